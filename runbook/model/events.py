"""Journal events: the names of their types and the one record shape every line has.

An event is what happened, stamped with the step's time; it never holds text formatted for
people. The journal writes them, the CLI shows them live, the RCA report reads them later.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

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
    at = at.astimezone(dt.timezone.utc)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


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
    def from_json(cls, obj: dict[str, Any]) -> "Event":
        return cls(seq=int(obj["seq"]), at=parse_iso(obj["at"]), incident=obj["incident"], run=obj["run"],
                   type=obj["type"], step=obj.get("step"), data=obj.get("data") or {})
