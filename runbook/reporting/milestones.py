"""The postmortem's milestones: onset, detected, acknowledged, first action, mitigated, capacity restored
(where a change took capacity), resolved.

Each is read from the journal (the onset and the clearing from the alert's condition as the metrics
recorded it), so in a drill they are the scenario's virtual times; the times to detect, mitigate
and resolve are measured from the onset, and left out where either end is unknown.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from runbook.model import events as ev
from runbook.model.duration import format_duration
from runbook.reporting.condition import Condition
from runbook.reporting.times import clock as _clock, relative as _relative

NAMES = ("onset", "detected", "acknowledged", "first action", "mitigated", "capacity restored", "resolved")
# time to … : from the onset to this milestone
SPANS = (("detect", "detected"), ("mitigate", "mitigated"), ("resolve", "resolved"))


def _detected(alert: ev.Event | None, started: ev.Event | None) -> tuple[dt.datetime | None, str]:
    if alert is None:
        return (started.at, "no alert: the run was started by hand") if started else (None, "no alert")
    at, starts = alert.at, alert.data.get("starts_at")
    try:
        fired = ev.parse_iso(starts) if isinstance(starts, str) else None
    except ValueError:
        fired = None
    # Alertmanager's startsAt is when the rule began firing; the webhook may deliver it later.
    if fired is not None and fired.tzinfo is not None and fired < at:
        at = fired
    return at, f"alert {alert.data.get('name')} from {alert.data.get('source') or 'an alert source'}"


def _mitigated(events: Sequence[ev.Event], condition: Condition | None, onset: dt.datetime | None,
               detected: dt.datetime | None) -> tuple[dt.datetime | None, str]:
    if condition is not None and condition.unknown:
        return None, condition.unknown
    if condition is not None:
        after = onset or detected
        cleared = condition.cleared(after) if after is not None else None
        if cleared is not None:
            return cleared, f"{condition.text} stopped holding"
        return None, f"{condition.text} still held when the run ended"
    first_change = next((e.seq for e in events if e.type == ev.ACTION_APPLIED), None)
    for e in events:
        held = e.data.get("held_since")
        if e.type == ev.VERIFY_PASSED and first_change is not None and e.seq > first_change and isinstance(held, str):
            return ev.parse_iso(held), f"{e.data.get('condition')} began to hold (verified)"
    return None, "no record of the condition clearing"


def left_short(events: Sequence[ev.Event]) -> list[dict[str, Any]]:
    """The workloads a run left with fewer replicas, as the engine journaled them when it ended."""
    return [c for e in events if e.type == ev.ESCALATED for c in e.data.get("capacity") or []]


def _capacity_restored(events: Sequence[ev.Event]) -> tuple[dt.datetime | None, str] | None:
    """When the replicas a change took were all back (the restore's step finished), or why not; None
    where no change took capacity (issue 34)."""
    took = [e for e in events if e.type == ev.ACTION_APPLIED and isinstance(e.data.get("capacity"), dict)
            and e.data["capacity"]["after"] < e.data["capacity"]["before"]]
    if not took:
        return None
    short = left_short(events)
    if short:
        return None, "; ".join(f"not restored: {c['target']} serves {c['now']} of its {c['before']} replicas"
                               for c in short)
    restores = [e for e in events if e.type == ev.ACTION_APPLIED and (e.data.get("result") or {}).get("restored")]
    if not restores:
        return None, "no record of the replicas coming back"
    last = restores[-1]
    done = next((e for e in events if e.type == ev.STEP_FINISHED and e.step == last.step and e.seq > last.seq), last)
    return done.at, f"{last.data['capacity']['target']} back at {last.data['capacity']['after']} replicas"


def build(events: Sequence[ev.Event], condition: Condition | None,
          origin: dt.datetime) -> tuple[list[dict[str, Any]], dict[str, str], str]:
    """(milestone rows, {"detect"|"mitigate"|"resolve": duration}, what they are measured from)."""
    alert = next((e for e in events if e.type == ev.ALERT_RECEIVED), None)
    started = next((e for e in events if e.type == ev.RUN_STARTED), None)
    finished = [e for e in events if e.type == ev.RUN_FINISHED]
    applied = next((e for e in events if e.type == ev.ACTION_APPLIED), None)
    detected, detected_note = _detected(alert, started)

    if condition is None or condition.unknown:
        onset, onset_note = None, (condition.unknown if condition else
                                   "unknown: the journal has no record of the alert's condition")
    else:
        onset, lower_bound = condition.onset(detected or origin)
        onset_note = (f"{condition.text} began to hold" + (" (at the latest: it held from the first recorded sample)"
                                                          if lower_bound else "")
                      if onset else f"the recorded history does not show {condition.text} before the alert")
    mitigated, mitigated_note = _mitigated(events, condition, onset, detected)
    outcome = finished[-1].data.get("outcome") if finished else None
    resolved = finished[-1].at if finished and outcome == "resolved" else None
    moments: dict[str, tuple[dt.datetime | None, str] | None] = {
        "onset": (onset, onset_note),
        "detected": (detected, detected_note),
        "acknowledged": ((started.at, f"{started.data.get('holder') or 'runbook'} took the incident")
                         if started else (None, "no run started")),
        "first action": ((applied.at, str(applied.data.get("summary") or applied.data.get("action")))
                         if applied else (None, "nothing was applied")),
        "mitigated": (mitigated, mitigated_note),
        "capacity restored": _capacity_restored(events),
        "resolved": ((resolved, "the run ended resolved") if resolved else
                     (None, f"not resolved: the run ended {outcome}" if outcome else "the run did not finish")),
    }
    rows = [{"name": name, "at": at, "clock": _clock(at) if at else "—",
             "relative": _relative(at, origin) if at else "—", "note": note}
            for name, (at, note) in ((n, moments[n]) for n in NAMES if moments[n] is not None)]
    # Without an onset, the alert is the earliest moment known: time to detect is then unknown.
    start, since = (onset, "the onset") if onset is not None else (detected, "the alert (the onset is unknown)")
    durations = {}
    for span, name in SPANS:
        at = moments[name][0]  # type: ignore[index]
        if start is not None and at is not None and at >= start and not (span == "detect" and onset is None):
            durations[span] = format_duration((at - start).total_seconds())
    return rows, durations, since
