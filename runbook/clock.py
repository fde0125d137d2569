"""Time as an injected seam: `Clock` with a real and a fake implementation.

The engine reads `now()` once per step and sleeps only through the clock, so a fake clock
turns "observe for 5 minutes" into milliseconds in tests and drills.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Protocol


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> dt.datetime:
    return dt.datetime(year, month, day, hour, minute, second, tzinfo=dt.timezone.utc)


class Clock(Protocol):
    def now(self) -> dt.datetime: ...

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """Wall-clock time in UTC."""

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.timezone.utc)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock:
    """Virtual time: `sleep` advances instantly; listeners let a simulated world follow along."""

    def __init__(self, start: dt.datetime | None = None):
        self._now = start or utc(2026, 1, 1)
        self._mono = 0.0
        self.slept: list[float] = []

    def now(self) -> dt.datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time does not run backwards")
        self._now += dt.timedelta(seconds=seconds)
        self._mono += seconds
