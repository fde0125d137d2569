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

from runbook.record import safe_fs
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

    def path_of(self, target: str) -> Path:
        return self.root / _lock_name(target)

    @contextlib.contextmanager
    def hold(self, target: str, *, holder: str, namespace: str | None = None) -> Iterator[HeldLock]:
        path = self.path_of(target)
        try:
            safe_fs.private_dir(self.root)
            # Never through a planted link: the holder is written into the file we opened, and only there.
            fd = safe_fs.open_private(path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            raise Refused("lock", f"cannot open the lock file {path}: {safe_fs.reason(exc)}") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise Refused("lock", f"{target} is locked by {_read_holder(fd)}; wait for that run to finish") from None
            os.ftruncate(fd, 0)
            # Each pwrite goes at the end of what is written so far: a short write goes on where it stopped.
            safe_fs.write_all(fd, json.dumps({"holder": holder, "pid": os.getpid(), "target": target}).encode(),
                              write=lambda fd, data: os.pwrite(fd, data, os.fstat(fd).st_size))
            try:
                yield HeldLock()  # flock is held until released or the process dies: never lost
            finally:
                os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _read_holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 65536, 0) or b"{}")
    except (OSError, ValueError):
        return "another run"
    if not isinstance(info, dict) or not info:
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
