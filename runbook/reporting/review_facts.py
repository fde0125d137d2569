"""One incident as the weekly review counts it: playbook, severity, its times, each change's fate.

Read from the journal's few lines that say so (the alert, the run's start and end, plans, applies,
rollbacks, escalations), found by their type before any JSON is parsed: the series evidence, most
of a journal's bytes, is never decoded, which keeps a review of 10,000 incidents inside two seconds.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
from pathlib import Path
from typing import Any, NamedTuple

from runbook.record.journal import DRILL_PREFIX
from runbook.model import events as ev

WANTED = frozenset({ev.ALERT_RECEIVED, ev.RUN_STARTED, ev.ACTION_PLANNED, ev.ACTION_APPLIED, ev.ACTION_UNKNOWN,
                    ev.ACTION_FAILED, ev.ACTION_PROPOSED, ev.GUARD_REFUSED, ev.VERIFY_PASSED, ev.ROLLBACK_APPLIED,
                    ev.ROLLBACK_FAILED, ev.ESCALATED, ev.RUN_FINISHED, ev.RUN_INTERRUPTED})
_TYPE = b',"type":"'
# The verdicts of an interrupted run that leave its change to a person (runbook.webhook.recovery's IN_DOUBT).
_INTERRUPTED_IN_DOUBT = ("unknown", "changed")


@dataclasses.dataclass(frozen=True)
class Change:
    """One planned change and what became of it: kept, rolled_back, undo_failed, in_doubt, failed,
    refused, proposed or planned (nothing after the plan)."""

    step: str
    action: str
    target: str
    summary: str
    fate: str


@dataclasses.dataclass(frozen=True)
class IncidentFacts:
    id: str
    drill: bool
    playbook: str | None
    severity: str | None
    alert: str | None
    ran: dt.datetime | None  # by the wall clock (a drill's events carry its scenario's virtual time)
    alert_start: dt.datetime | None  # when the alert began firing (Alertmanager's startsAt), else its arrival
    first_line: dt.datetime | None
    mitigated: dt.datetime | None
    resolved: dt.datetime | None
    outcome: str
    changes: tuple[Change, ...]
    escalated: str | None  # why, when the run handed the incident to a person
    damaged: int  # lines that could not be read: something may be missing above

    @property
    def origin(self) -> dt.datetime | None:
        """What the times to mitigate and resolve are measured from: the alert's start, else the first line."""
        return self.alert_start or self.first_line

    def seconds_to(self, moment: str) -> float | None:
        """Seconds from the alert's start (or, for mitigate and resolve without an alert, the first line)
        to "detect" (the journal's first line), "mitigate" or "resolve"; None where either end is unknown."""
        start = self.alert_start if moment == "detect" else self.origin
        end = {"detect": self.first_line, "mitigate": self.mitigated, "resolve": self.resolved}[moment]
        if start is None or end is None or end < start:
            return None
        return (end - start).total_seconds()


class _Line(NamedTuple):
    """One journal line the review reads: its time left as text until a fact needs it."""

    seq: int
    at: str
    run: str
    step: str | None
    type: str
    data: dict[str, Any]


def _line(raw: bytes) -> _Line:
    """ValueError unless `raw` is a journal line with the fields the review reads."""
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):  # a line nested past Python's limit is as unreadable as a torn one
        raise ValueError("not JSON") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("seq"), int) or not isinstance(obj.get("at"), str) \
            or not isinstance(obj.get("type"), str) or not isinstance(obj.get("data"), dict):
        raise ValueError("not a journal line")
    step = obj.get("step")
    return _Line(obj["seq"], obj["at"], str(obj.get("run", "")), step if isinstance(step, str) else None,
                 obj["type"], obj["data"])


def _selected(raw: bytes) -> tuple[list[_Line], int]:
    """The journal's lines of the types the review reads, and how many lines could not be read.

    Walked by offsets, not split: only the lines read are copied, never the series evidence."""
    events: list[_Line] = []
    damaged, pos, size = 0, 0, len(raw)
    while pos < size:
        end = raw.find(b"\n", pos)
        end = size if end < 0 else end
        where = raw.find(_TYPE, pos, end)  # the first one in a line is the event's own (data comes after)
        if where < 0:
            damaged += bool(raw[pos:end].strip())
        else:
            start = where + len(_TYPE)
            close = raw.find(b'"', start, end)
            if close < 0:  # torn inside its type: it may have been any event, a change included
                damaged += 1
            elif raw[start:close].decode("ascii", "replace") in WANTED:
                try:
                    events.append(_line(raw[pos:end]))
                except ValueError:
                    damaged += 1
        pos = end + 1
    return events, damaged


def _when(text: object) -> dt.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        at = ev.parse_iso(text)
    except ValueError:
        return None
    return at if at.tzinfo is not None else None


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _changes(events: list[_Line]) -> tuple[Change, ...]:
    """Each (run, step)'s change by its last recorded fate, in the order they were planned."""
    planned: dict[tuple[str, str], dict] = {}
    fate: dict[tuple[str, str], str] = {}
    for event in events:
        key = (event.run, event.step or "")
        if event.type == ev.ACTION_PLANNED:
            planned[key], fate[key] = event.data, "planned"
        elif key not in planned:
            continue
        elif event.type == ev.ACTION_APPLIED:
            fate[key] = "kept"
        elif event.type == ev.ACTION_UNKNOWN and not event.data.get("recovered"):
            fate[key] = "in_doubt"
        elif event.type == ev.ACTION_FAILED:
            fate[key] = "failed"
        elif event.type == ev.GUARD_REFUSED:
            fate[key] = "refused"
        elif event.type == ev.ACTION_PROPOSED:
            fate[key] = "proposed"
        elif event.type == ev.ROLLBACK_APPLIED and fate[key] in ("kept", "in_doubt"):
            fate[key] = "rolled_back"
        elif event.type == ev.ROLLBACK_FAILED and fate[key] in ("kept", "in_doubt"):
            fate[key] = "undo_failed"
        elif event.type == ev.RUN_INTERRUPTED and event.data.get("verdict") in _INTERRUPTED_IN_DOUBT:
            fate[key] = "in_doubt"
    return tuple(Change(step, str(data.get("action", "?")), str(data.get("target", "?")),
                        str(data.get("summary", "")), fate[(run, step)])
                 for (run, step), data in planned.items())


def _mitigated(events: list[_Line]) -> dt.datetime | None:
    """When the run's check of the fix began to hold: the first verify after the first change applied."""
    applied = next((e.seq for e in events if e.type == ev.ACTION_APPLIED), None)
    if applied is None:
        return None
    verified = next((e for e in events if e.type == ev.VERIFY_PASSED and e.seq > applied), None)
    if verified is None:
        return None
    return _when(verified.data.get("held_since")) or _when(verified.at)


def from_journal(path: Path) -> IncidentFacts:
    """The facts of the incident whose journal is `path` (OSError if it cannot be read)."""
    raw = Path(path).read_bytes()
    events, damaged = _selected(raw)
    first = raw[:raw.find(b"\n")] if b"\n" in raw else raw
    first_line = None
    if first.strip():
        try:
            first_line = _when(_line(first).at)
        except ValueError:
            pass
    incident = path.parent.name
    drill = incident.startswith(DRILL_PREFIX)
    alert = next((e for e in events if e.type == ev.ALERT_RECEIVED), None)
    started = next((e for e in events if e.type == ev.RUN_STARTED), None)
    finished = [e for e in events if e.type == ev.RUN_FINISHED]
    escalated = next((e for e in reversed(events) if e.type == ev.ESCALATED), None)
    outcome = str(finished[-1].data.get("outcome")) if finished else "unfinished"
    alert_start = None
    if alert is not None:
        fired = _when(alert.data.get("starts_at"))
        # Alertmanager's startsAt is when the rule began firing; a time after the delivery is not believed.
        arrived = _when(alert.at)
        alert_start = fired if fired is not None and arrived is not None and fired <= arrived else arrived
    severity = started.data.get("severity") if started else None
    if severity is None and alert is not None and isinstance(alert.data.get("labels"), dict):
        severity = alert.data["labels"].get("severity")
    ran = first_line
    if drill or ran is None:
        ran = dt.datetime.fromtimestamp(os.stat(path).st_mtime, dt.timezone.utc).replace(microsecond=0)
    return IncidentFacts(
        id=incident, drill=drill, playbook=_text(started.data.get("playbook")) if started else None,
        severity=_text(severity), alert=_text(alert.data.get("name")) if alert else None, ran=ran,
        alert_start=alert_start, first_line=first_line, mitigated=_mitigated(events),
        resolved=_when(finished[-1].at) if finished and outcome == "resolved" else None, outcome=outcome,
        changes=_changes(events), escalated=_text(escalated.data.get("reason")) if escalated else None,
        damaged=damaged)
