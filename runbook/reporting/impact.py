"""The impact, in the alert's own terms: its condition at its worst, as the alert adds the series up
(the summed queue, not one pod's), and how long it held; then every other signal's peak. With units.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from runbook.model import events as ev
from runbook.model.duration import format_duration
from runbook.reporting.condition import Condition
from runbook.reporting.times import clock
from runbook.reporting.words import inline, meaning, with_unit

COMBINE = {"sum": sum, "max": max, "min": min, "avg": lambda values: sum(values) / len(values)}


def _at(value: Any, default: dt.datetime) -> dt.datetime:
    return ev.parse_iso(value) if isinstance(value, str) else value if isinstance(value, dt.datetime) else default


def _readings_of_the_alert(events: Sequence[ev.Event], condition: Condition) -> list[tuple[float, dt.datetime]]:
    """The condition's value at each instant the run read it: its recorded history, and every instant
    query of its signal over the same labels, the series added up as the alert adds them."""
    out = [(v, at) for at, v in condition.points if v is not None]
    combine = COMBINE.get(meaning(condition.signal).aggregate)
    for e in events:
        d = e.data
        if e.type != ev.EVIDENCE or d.get("signal") != condition.signal:
            continue
        if {str(k): str(v) for k, v in (d.get("labels") or {}).items()} != condition.labels:
            continue
        if d.get("kind") == "comparison" and isinstance(d.get("now"), (int, float)):
            out.append((float(d["now"]), e.at))
        elif d.get("kind") == "samples" and d.get("samples"):
            values = [float(s["value"]) for s in d["samples"] if isinstance(s.get("value"), (int, float))]
            if values and not d.get("by"):
                out.append((values[0], _at(d.get("at"), e.at)))
            elif values and combine is not None:
                out.append((float(combine(values)), _at(d.get("at"), e.at)))
    return out


def headline(events: Sequence[ev.Event], condition: Condition | None, onset: dt.datetime | None,
             mitigated: dt.datetime | None, end: dt.datetime) -> dict[str, Any] | None:
    """The alert's condition: its worst value (with unit and how the series were added up) and how long it held."""
    if condition is None or condition.unknown:
        return None
    readings = _readings_of_the_alert(events, condition)
    if not readings:
        return None
    value, at = (max if condition.above is not None else min)(readings, key=lambda r: r[0])
    what = meaning(condition.signal)
    over = ", ".join(f"{k}={v}" for k, v in condition.labels.items()) or "every series"
    held = None
    if onset is not None:
        until = mitigated or end
        held = {"duration": format_duration((until - onset).total_seconds()), "from": clock(onset),
                "until": clock(until), "cleared": mitigated is not None}
    return {"condition": condition.text, "signal": condition.signal, "meaning": what.what,
            "value": with_unit(value, what.unit), "at": clock(at),
            "over": f"{what.aggregate} over {over}" if what.aggregate else over, "held": held}


def peaks(events: Sequence[ev.Event], start: dt.datetime, end: dt.datetime,
          leave_out: str | None = None) -> list[dict[str, Any]]:
    """The highest value of each signal the run read (but `leave_out`), from its history and its instant queries."""
    best: dict[str, tuple[float, str, str]] = {}

    def offer(signal: str, value: Any, at: dt.datetime, labels: Any) -> None:
        if value is None or at < start or at > end:
            return
        if signal not in best or float(value) > best[signal][0]:
            best[signal] = (float(value), clock(at), inline(labels or {}) or "total")

    for event in events:
        if event.type != ev.EVIDENCE or not event.data.get("signal") or event.data.get("signal") == leave_out:
            continue
        signal = str(event.data["signal"])
        if event.data.get("kind") == "series":
            for series in event.data.get("series") or []:
                for at_text, value in series.get("points") or []:
                    offer(signal, value, _at(at_text, event.at), series.get("labels"))
        elif event.data.get("kind") == "samples" and event.data.get("samples"):
            at = _at(event.data.get("at"), event.at)
            for row in event.data["samples"]:
                offer(signal, row.get("value"), at, row.get("labels"))
    out = []
    for signal, (value, at, where) in sorted(best.items()):
        what = meaning(signal)
        out.append({"signal": signal, "meaning": what.what, "value": with_unit(value, what.unit), "at": at,
                    "where": where})
    return out
