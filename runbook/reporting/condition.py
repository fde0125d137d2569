"""The alert's condition over the history a run recorded: when it began to hold, when it cleared.

Read from the `series` evidence the engine marks with `detect` (the signal as the alert reads it,
with its bound); pure, and the same walk back from the alert that triage does to say "since".
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Sequence
from typing import Any

from runbook.model import events as ev

# How long before the alert the condition may have last held for its stretch to count as the onset.
ONSET_SEARCH = dt.timedelta(minutes=5)


@dataclasses.dataclass(frozen=True)
class Condition:
    signal: str
    text: str  # "oom_failures_per_min > 0"
    above: float | None
    below: float | None
    for_seconds: float
    labels: dict[str, str]
    step: float
    points: tuple[tuple[dt.datetime, float | None], ...]  # one value per instant: the worst series
    error: str | None = None  # why the history could not be read

    @property
    def unknown(self) -> str | None:
        """Why the history says nothing, or None when it has samples."""
        if self.error:
            return f"unknown: the metrics could not be read ({self.error})"
        if not any(v is not None for _, v in self.points):
            return f"unknown: no sample of {self.signal} was recorded"
        return None

    def holds(self, value: float | None) -> bool:
        if value is None or math.isnan(value):
            return False
        return value > self.above if self.above is not None else value < (self.below or 0.0)

    def onset(self, reference: dt.datetime) -> tuple[dt.datetime | None, bool]:
        """When the stretch of holding that the alert saw began, and whether that is only a lower bound
        (it held from the first recorded sample on). (None, False) when it did not hold near the alert."""
        before = [i for i, (at, _) in enumerate(self.points) if at <= reference]
        last = next((i for i in reversed(before) if self.holds(self.points[i][1])), None)
        if last is None or reference - self.points[last][0] > ONSET_SEARCH:
            return None, False
        first = last
        while first > 0 and self.holds(self.points[first - 1][1]):
            first -= 1
        return self.points[first][0], first == 0

    def cleared(self, after: dt.datetime) -> dt.datetime | None:
        """The first sample after `after` from which the condition stopped holding for good (to the end of
        the history); None while it still holds at the end or no sample says otherwise."""
        start: dt.datetime | None = None
        for at, value in self.points:
            if at <= after:
                continue
            if self.holds(value):
                start = None
            elif value is not None and start is None:
                start = at
        return start

    def worst(self) -> tuple[float, dt.datetime] | None:
        """The value furthest past the bound, and when: the alert's own terms for the impact."""
        known = [(v, at) for at, v in self.points if v is not None and not math.isnan(v)]
        if not known:
            return None
        pick = max if self.above is not None else min
        return pick(known, key=lambda p: p[0])


def _at(value: Any) -> dt.datetime:
    return ev.parse_iso(value) if isinstance(value, str) else value


def from_events(events: Sequence[ev.Event]) -> Condition | None:
    """The run's detect condition and its recorded history, or None when the journal has none."""
    marked = [e for e in events if e.type == ev.EVIDENCE and e.data.get("kind") == "series"
              and isinstance(e.data.get("detect"), dict)]
    if not marked:
        return None
    data = marked[-1].data
    detect = data["detect"]
    above, below = detect.get("above"), detect.get("below")
    if above is None and below is None:
        return None
    pick = max if above is not None else min
    combined: dict[dt.datetime, float | None] = {}
    for series in data.get("series") or []:
        for at_text, value in series.get("points") or []:
            at = _at(at_text)
            if value is None:
                combined.setdefault(at, None)
            else:
                known = combined.get(at)
                combined[at] = float(value) if known is None else pick(known, float(value))
    return Condition(signal=str(data.get("signal")), text=str(detect.get("condition") or data.get("signal")),
                     above=above, below=below, for_seconds=float(detect.get("for") or 0.0),
                     labels={str(k): str(v) for k, v in (data.get("labels") or {}).items()},
                     step=float(data.get("step") or 0.0), points=tuple(sorted(combined.items())),
                     error=str(data["error"]) if data.get("error") else None)
