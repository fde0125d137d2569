"""Per-pod and per-node work of one step, run concurrently with a bounded pool and one deadline.

One slow or dead target does not hold up the others' evidence: it is reported as timed out.
Results come back in the order of the targets, so the journal reads the same on every run.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from collections.abc import Callable, Sequence
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
    if not targets:
        return []
    if len(targets) == 1 or pool_size <= 1:
        return [_one(target, work) for target in targets]
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=min(pool_size, len(targets)),
                                                     thread_name_prefix="runbook-fanout")
    try:
        futures = [executor.submit(_one, target, work) for target in targets]
        concurrent.futures.wait(futures, timeout=deadline)
        outcomes = []
        for target, future in zip(targets, futures):
            if future.done():
                outcomes.append(future.result())
            else:
                future.cancel()
                outcomes.append(Outcome(target, None, BackendUnavailable(
                    f"{describe(target)} did not answer within the step's deadline of {deadline:g}s")))
        return outcomes
    finally:
        # Stragglers are bounded by their own backend timeouts; the step does not wait for them.
        executor.shutdown(wait=False, cancel_futures=True)


def _one(target: Target, work: Callable[[Target], Result]) -> Outcome[Target, Result]:
    try:
        return Outcome(target, work(target), None)
    except BackendError as exc:
        return Outcome(target, None, exc)
