"""Per-pod and per-node work of one step, run concurrently with a bounded pool and one deadline.

One slow or dead target does not hold up the others' evidence: it is reported as timed out.
Results come back in the order of the targets, so the journal reads the same on every run.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

from runbook.errors import BackendError, BackendUnavailable

Target = TypeVar("Target")
Result = TypeVar("Result")


@dataclasses.dataclass(frozen=True)
class Outcome(Generic[Target, Result]):
    target: Target
    result: Result | None
    error: BackendError | None


def fan_out(targets: Sequence[Target], work: Callable[[Target], Result], *, pool_size: int,
            deadline: float, describe: Callable[[Target], str] = str) -> list[Outcome[Target, Result]]:
    """`work(target)` for each target; a BackendError or the deadline becomes that target's error."""
    with fan_out_in_order(targets, work, pool_size=pool_size, deadline=deadline, describe=describe) as outcomes:
        return list(outcomes)


class fan_out_in_order(Generic[Target, Result]):  # noqa: N801 - used as a function, in a `with`
    """The same fan-out, each outcome handed over as soon as it and every one before it are in.

    The caller reads (parses, journals) the first targets' answers while the later ones are still
    in flight, instead of after the slowest: on a fleet that work is off the step's critical path.
    Used in a `with`, so that leaving early (an error while journaling) stops the pool at once.
    """

    def __init__(self, targets: Sequence[Target], work: Callable[[Target], Result], *, pool_size: int,
                 deadline: float, describe: Callable[[Target], str] = str):
        self._targets, self._work, self._describe = list(targets), work, describe
        self._pool_size, self._deadline = pool_size, deadline
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def __enter__(self) -> Iterator[Outcome[Target, Result]]:
        if len(self._targets) <= 1 or self._pool_size <= 1:
            return (_one(target, self._work) for target in self._targets)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=min(self._pool_size, len(self._targets)), thread_name_prefix="runbook-fanout")
        ends = time.monotonic() + self._deadline
        futures = [self._executor.submit(_one, target, self._work) for target in self._targets]
        return self._in_order(futures, ends)

    def _in_order(self, futures: list[concurrent.futures.Future], ends: float) -> Iterator[Outcome[Target, Result]]:
        for target, future in zip(self._targets, futures):
            try:
                # A finished one is handed over even past the deadline: only what is missing times out.
                yield future.result(timeout=max(0.0, ends - time.monotonic()))
            except concurrent.futures.TimeoutError:
                future.cancel()
                yield Outcome(target, None, BackendUnavailable(
                    f"{self._describe(target)} did not answer within the step's deadline of {self._deadline:g}s"))

    def __exit__(self, *exc_info: object) -> None:
        if self._executor is not None:
            # Stragglers are bounded by their own backend timeouts; the step does not wait for them.
            self._executor.shutdown(wait=False, cancel_futures=True)


def _one(target: Target, work: Callable[[Target], Result]) -> Outcome[Target, Result]:
    try:
        return Outcome(target, work(target), None)
    except BackendError as exc:
        return Outcome(target, None, exc)
