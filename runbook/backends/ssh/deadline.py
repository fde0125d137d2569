"""One deadline per node command, over every phase from the TCP connect to the exit status.

paramiko waits without any timeout for some answers (the reply to an exec request, a send during a
key re-exchange), so a watchdog closes the connection when the deadline passes: every wait wakes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from runbook.errors import BackendUnavailable

# phases after which the command may be running on the node; before them nothing ran
STARTED_PHASES = ("exec request", "output", "exit status")


class DeadlinePassed(BackendUnavailable):
    """A phase of a node command got no answer before the command's deadline; the connection was closed."""

    def __init__(self, message: str, *, phase: str, stdout: str = "", stderr: str = ""):
        super().__init__(message)
        self.phase, self.stdout, self.stderr = phase, stdout, stderr


class Deadline:
    """A command's deadline: `phase()` says what it waits for now; at the deadline the watchdog runs
    every `on_expiry` callback (close the connection), once, and the blocked call fails."""

    def __init__(self, node: str, seconds: float, *, command: str = "",
                 clock: Callable[[], float] = time.monotonic):
        self.node, self.seconds, self.command, self._clock = node, seconds, command, clock
        self.end = clock() + seconds
        self._lock = threading.Lock()
        self._phase = "connect"
        self._describe: Callable[[], str] | None = None
        self._on_expiry: list[Callable[[], None]] = []
        self._passed_in: str | None = None
        self._done = False
        self._timer = threading.Timer(max(0.0, seconds), self.expire)
        self._timer.daemon = True
        self._timer.name = f"runbook-ssh-deadline-{node}"

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._done = True  # a late watchdog must not close a connection other commands use now
        self._timer.cancel()

    def left(self) -> float:
        return max(0.0, self.end - self._clock())

    def bounded(self, seconds: float) -> float:
        """`seconds`, or what is left of the deadline when that is less (never 0: paramiko reads 0 as 'no wait')."""
        return max(0.001, min(seconds, self.left()))

    def phase(self, name: str, describe: Callable[[], str] | None = None) -> None:
        """Enter a phase; `describe` names it more exactly at expiry (e.g. key exchange vs authentication)."""
        with self._lock:
            self._phase, self._describe = name, describe
        if self.passed or self.left() <= 0:
            self.expire()
            raise self.error()

    def on_expiry(self, callback: Callable[[], None], *, first: bool = False) -> None:
        """Run `callback` when the deadline passes (now, if it has); `first` puts it before the others."""
        with self._lock:
            passed = self._passed_in is not None
            if not passed:
                self._on_expiry.insert(0, callback) if first else self._on_expiry.append(callback)
        if passed:
            _quietly(callback)

    def reached(self) -> bool:
        """Whether the deadline has passed; expires it now when the watchdog has not come yet."""
        if self._passed_in is None and self.left() <= 0:
            self.expire()
        return self._passed_in is not None

    @property
    def passed(self) -> bool:
        return self._passed_in is not None

    @property
    def passed_in(self) -> str | None:
        return self._passed_in

    def expire(self) -> None:
        """The deadline has passed: remember the phase, then close what the command waits on (once)."""
        with self._lock:
            if self._done or self._passed_in is not None:
                return
            try:
                self._passed_in = self._describe() if self._describe else self._phase
            except Exception:  # naming the phase must never keep the connection open
                self._passed_in = self._phase
            callbacks, self._on_expiry = self._on_expiry, []
        for callback in callbacks:
            _quietly(callback)

    def error(self) -> DeadlinePassed:
        phase = self._passed_in or self._phase
        what = f"`{self.command}`" if self.command else "the command"
        ran = f"{what} may have started there" if phase in STARTED_PHASES else f"{what} was not started"
        return DeadlinePassed(f"ssh {self.node}: the {phase} got no answer within the command's deadline of "
                              f"{self.seconds:g}s; the connection was closed and {ran}", phase=phase)


def _quietly(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:  # closing a connection that is already broken may fail: it is closed either way
        pass
