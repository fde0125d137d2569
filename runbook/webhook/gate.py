"""Deliveries before runs: while a delivery is being answered, a run worker waits a moment before it
starts the next run, so an acknowledgement does not queue behind a run's Python work for the GIL.

A wait is bounded (`most` seconds a run), so a steady stream of deliveries slows the runs, never stops them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

DEFAULT_MOST = 0.05  # seconds a run start may wait for the deliveries being answered


class IntakeGate:
    def __init__(self, most: float = DEFAULT_MOST):
        self.most = most
        self._answering = 0
        self._clear = threading.Condition()

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        """Around one delivery's answer, from its first byte read to its response."""
        with self._clear:
            self._answering += 1
        try:
            yield
        finally:
            with self._clear:
                self._answering -= 1
                if not self._answering:
                    self._clear.notify_all()

    def wait_clear(self) -> bool:
        """Before a run starts: wait until no delivery is being answered, at most `most` seconds
        (True when none is)."""
        with self._clear:
            return self._clear.wait_for(lambda: self._answering == 0, timeout=self.most)
