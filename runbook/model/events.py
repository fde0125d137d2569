"""Journal events: the names of their types and the one record shape every line has.

An event is what happened, stamped with the step's time; it never holds text formatted for
people. The journal writes them, the CLI shows them live, the RCA report reads them later.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any

from runbook.model.json_depth import nesting_depth

ALERT_RECEIVED = "alert.received"
RUN_STARTED = "run.started"
STEP_STARTED = "step.started"
STEP_FINISHED = "step.finished"
EVIDENCE = "evidence"
GUARD_PASSED = "guard.passed"
GUARD_REFUSED = "guard.refused"
ACTION_PLANNED = "action.planned"
ACTION_CONFIRMED = "action.confirmed"
ACTION_PROPOSED = "action.proposed"  # left to a human by an unattended policy
ACTION_APPLIED = "action.applied"
ACTION_SKIPPED = "action.skipped"
ACTION_FAILED = "action.failed"
ACTION_UNKNOWN = "action.unknown"  # the apply raised after it may have changed the target: counted as applied
VERIFY_PASSED = "verify.passed"
VERIFY_FAILED = "verify.failed"
ROLLBACK_APPLIED = "rollback.applied"
ROLLBACK_FAILED = "rollback.failed"
NOTE = "note"
ESCALATED = "escalated"
RUN_FINISHED = "run.finished"
RUN_INTERRUPTED = "run.interrupted"
INCIDENT_CLOSED = "incident.closed"
PROPOSAL_APPROVED = "proposal.approved"
PROPOSAL_EXPIRED = "proposal.expired"
PROPOSAL_CLOSED = "proposal.closed"

TYPES = frozenset(v for k, v in dict(globals()).items() if k.isupper() and isinstance(v, str))


def iso_ms(at: dt.datetime) -> str:
    """UTC with milliseconds and a Z, the one timestamp form of the journal."""
    # isoformat, not strftime: a few times faster, and series points are written by the thousand.
    return at.astimezone(dt.timezone.utc).replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


def parse_iso(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclasses.dataclass(frozen=True)
class Event:
    seq: int
    at: dt.datetime
    incident: str
    run: str
    type: str
    step: str | None = None
    data: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "at": iso_ms(self.at), "incident": self.incident, "run": self.run,
                "type": self.type, "step": self.step, "data": self.data}

    @classmethod
    def from_json(cls, obj: Any) -> "Event":
        """The event a parsed journal line holds; ValueError saying what is wrong with it if none."""
        if not isinstance(obj, dict):
            raise ValueError(f"not an object but {_show(obj)}")
        seq = obj.get("seq")
        if type(seq) is not int or seq < 1:  # not bool, not float, not a string of digits
            raise ValueError(f"seq is {_show(seq)}, not a positive integer")
        return cls(seq=seq, at=_timestamp(obj.get("at")), incident=_text(obj, "incident"), run=_text(obj, "run"),
                   type=_text(obj, "type"), step=_text(obj, "step", optional=True), data=_data(obj.get("data")))


# Room for what runbook writes (a drill's deepest line is 6 levels; a webhook body, bounded at 64,
# journaled inside an event) and far below where json or the readers of events would run out of stack.
MAX_NESTING = 128


def parse_line(line: bytes) -> Event:
    """One journal line as an event; ValueError saying what is wrong (never a RecursionError)."""
    if line.count(b"[") + line.count(b"{") > MAX_NESTING and nesting_depth(line) > MAX_NESTING:
        raise ValueError(f"nested deeper than {MAX_NESTING} levels")
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ValueError(f"not JSON ({exc})") from None
    return Event.from_json(obj)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _timestamp(value: Any) -> dt.datetime:
    if not isinstance(value, str):
        raise ValueError(f"at is {_show(value)}, not an ISO timestamp")
    try:
        at = parse_iso(value)
    except ValueError:
        raise ValueError(f"at is {_show(value)}, not an ISO timestamp") from None
    if at.tzinfo is None:
        raise ValueError(f"at is {_show(value)}, a timestamp without a time zone")
    return at


def _text(obj: dict[str, Any], key: str, *, optional: bool = False) -> Any:
    value = obj.get(key)
    if optional and value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key} is {_show(value)}, not a non-empty string")
    return value


def _data(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"data is {_show(value)}, not an object")
    return value
