"""Group commit: deliveries that arrive while one batch is being committed wait, then go together in
the next, so the deliveries of a burst share one commit and one journal pass instead of one each.

No caller waits for company: a lone delivery is committed at once, and a batch is whatever queued
up while the one before it was on its way to disk. Each caller gets its own result or exception.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")
DEFAULT_MOST = 64  # the most deliveries one commit takes: a bound on the wait of the last one in


class _Slot(Generic[T, R]):
    __slots__ = ("item", "result", "error", "done")

    def __init__(self, item: T):
        self.item = item
        self.result: R | None = None
        self.error: BaseException | None = None
        self.done = False


class GroupCommit(Generic[T, R]):
    """`submit(item)` returns what `commit([..., item, ...])` gave for it, or raises what it gave.

    `commit` takes the batch in arrival order and returns one result per item, an exception
    instance standing for that item's failure; an exception it raises fails the whole batch.
    """

    def __init__(self, commit: Callable[[list[T]], Sequence[R | BaseException]], *, most: int = DEFAULT_MOST,
                 on_batch: Callable[[int], object] = lambda size: None):
        if most < 1:
            raise ValueError("a batch holds at least one item")
        self._commit, self.most, self.on_batch = commit, most, on_batch  # on_batch: told each batch's size
        self._cond = threading.Condition()
        self._waiting: list[_Slot[T, R]] = []
        self._committing = False
        self.batches = 0  # how many commits were made (the benchmark reports deliveries per commit)
        self.items = 0

    def waiting(self) -> int:
        """How many items wait for the next commit (not counting the batch being committed)."""
        with self._cond:
            return len(self._waiting)

    def committing(self) -> bool:
        """Whether a batch is on its way to disk now."""
        with self._cond:
            return self._committing

    def submit(self, item: T) -> R:
        slot: _Slot[T, R] = _Slot(item)
        with self._cond:
            self._waiting.append(slot)
            while not slot.done:
                if self._committing:
                    self._cond.wait()
                    continue
                # No batch is on its way: this caller commits what waits (its own item among it).
                self._committing = True
                batch, self._waiting = self._waiting[:self.most], self._waiting[self.most:]
                self._cond.release()
                try:
                    self._run(batch)
                finally:
                    self._cond.acquire()
                    self._committing = False
                    self._cond.notify_all()
        if slot.error is not None:
            raise slot.error
        return slot.result  # type: ignore[return-value]

    def _run(self, batch: list[_Slot[T, R]]) -> None:
        try:
            results = list(self._commit([slot.item for slot in batch]))
            if len(results) != len(batch):
                raise RuntimeError(f"a group commit gave {len(results)} results for {len(batch)} items")
        except BaseException as exc:  # the batch failed as a whole: every caller in it is told
            results = [exc] * len(batch)
        self.batches += 1
        self.items += len(batch)
        self.on_batch(len(batch))
        for slot, result in zip(batch, results):
            if isinstance(result, BaseException):
                slot.error = result
            else:
                slot.result = result
            slot.done = True
