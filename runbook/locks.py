"""Locks per remediation target, so two runs never act on one workload at once.

`LocalLocks` uses `flock` on files in the state directory: it holds across processes on one
machine and is released by the kernel when its holder dies. A cluster-wide Lease is another backend.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from runbook.errors import Refused


class HeldLock:
    """A lock in hand; `lost()` says why it is no longer held (a Lease taken over, renewals failing)."""

    def __init__(self, lost: Callable[[], str | None] = lambda: None):
        self._lost = lost

    def lost(self) -> str | None:
        return self._lost()


class Locks(Protocol):
    def hold(self, target: str, *, holder: str, namespace: str | None = None) -> contextlib.AbstractContextManager[HeldLock]:
        """Hold the target's lock for the block, or raise Refused naming the current holder.

        `namespace`: the Kubernetes namespace the change is in, where a cluster-wide lock may live.

        The engine asks the `HeldLock` just before it changes anything: a lost lock aborts the change.
        """
        ...


def _lock_name(target: str) -> str:
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", target)[:80]
    return f"{readable}-{hashlib.sha256(target.encode()).hexdigest()[:12]}.lock"


class LocalLocks:
    def __init__(self, state: Path):
        self.root = Path(state) / "locks"

    @contextlib.contextmanager
    def hold(self, target: str, *, holder: str, namespace: str | None = None) -> Iterator[HeldLock]:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / _lock_name(target)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise Refused("lock", f"{target} is locked by {_read_holder(path)}; wait for that run to finish") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({"holder": holder, "pid": os.getpid(), "target": target}).encode(), 0)
            try:
                yield HeldLock()  # flock is held until released or the process dies: never lost
            finally:
                os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _read_holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return "another run"
    if not info:
        return "another run"
    return f"{info.get('holder', 'another run')} (pid {info.get('pid', '?')})"


class MemoryLocks:
    """Locks within one process, for tests; `held_by` pre-seeds a lock as held by someone else."""

    def __init__(self, held_by: dict[str, str] | None = None):
        self.held: dict[str, str] = dict(held_by or {})

    @contextlib.contextmanager
    def hold(self, target: str, *, holder: str, namespace: str | None = None) -> Iterator[HeldLock]:
        if target in self.held:
            raise Refused("lock", f"{target} is locked by {self.held[target]}; wait for that run to finish")
        self.held[target] = holder
        try:
            yield HeldLock(lambda: None if self.held.get(target) == holder else
                           f"the lock on {target} is now held by {self.held.get(target) or 'nobody'}")
        finally:
            self.held.pop(target, None)
