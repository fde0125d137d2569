"""Signals during a run: SIGINT and SIGTERM ask the engine to stop at a safe point; SIGHUP is ignored.

A run killed between an apply and its verify or rollback leaves production half-changed, so the
handlers only record a stop request that the engine reads before each step and each apply.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from runbook.clock import Clock
from runbook.record.journal import Journal
from runbook.model import events as ev

STOPPING = {signal.SIGINT: "SIGINT from the terminal", signal.SIGTERM: "SIGTERM"}
HANGUP_NOTE = "SIGHUP (the terminal closed): ignored; the run goes on to its end, the journal holds its record"


class RunSignals:
    """What arrived during the run: the stop request (the first SIGINT/SIGTERM) and notes to journal."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._notes: list[str] = []

    def interrupted(self) -> str | None:
        return self.reason

    def take_notes(self) -> list[str]:
        notes, self._notes = self._notes, []
        return notes

    def journaled(self, journal: Journal, clock: Clock) -> Callable[[], str | None]:
        """The engine's `interrupted` check, which first journals what arrived since it last looked.

        Notes are written here, when the engine asks between steps, never from inside a handler:
        a handler may run in the middle of a journal write.
        """

        def interrupted() -> str | None:
            for message in self.take_notes():
                journal.record(ev.NOTE, at=clock.now(), data={"message": message})
            return self.reason

        return interrupted

    def _on_stop(self, signum: int, frame: Any) -> None:
        if self.reason is not None:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt  # a second Ctrl-C: the person insists
            return  # already stopping; a repeated SIGTERM changes nothing
        self.reason = STOPPING.get(signal.Signals(signum), signal.Signals(signum).name)
        _tell(f"\n{self.reason}: stopping at the next safe point; nothing more is applied and this run's "
              f"changes are rolled back (Ctrl-C again aborts at once, without rolling back)\n")

    def _on_hangup(self, signum: int, frame: Any) -> None:
        self._notes.append(HANGUP_NOTE)


def _tell(message: str) -> None:
    """Straight to file descriptor 2: a handler must not re-enter a rich console mid-print."""
    try:
        os.write(2, message.encode("utf-8", "replace"))
    except OSError:
        pass  # the terminal is gone; the journal still gets the interruption


@contextlib.contextmanager
def run_signals(caught: RunSignals | None = None) -> Iterator[RunSignals]:
    """Install the handlers for the length of one run, then put back the ones found."""
    caught = caught if caught is not None else RunSignals()
    if threading.current_thread() is not threading.main_thread():
        yield caught  # handlers can only be set from the main thread; there, nothing is delivered to us
        return
    handlers = {signal.SIGINT: caught._on_stop, signal.SIGTERM: caught._on_stop, signal.SIGHUP: caught._on_hangup}
    previous = {signum: signal.getsignal(signum) for signum in handlers}
    try:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        yield caught
    finally:
        for signum, handler in previous.items():
            # None: a handler set outside Python; the default is the closest we can restore.
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
