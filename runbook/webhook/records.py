"""Journal events the webhook writes itself, outside a run, and the one way it writes them.

Each write opens the incident's journal, appends one fsynced line and closes it, so the ack
path holds no file open between deliveries.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from runbook.journal import JsonlJournal
from runbook.model import events as ev

WEBHOOK_RUN = "webhook"  # the run id of events that belong to no playbook run
INCIDENT_CLOSED = "incident.closed"
PROPOSAL_APPROVED = "proposal.approved"
PROPOSAL_EXPIRED = "proposal.expired"
PROPOSAL_CLOSED = "proposal.closed"
RUN_INTERRUPTED = "run.interrupted"


def write(state: Path, incident: str, type: str, *, at: dt.datetime, data: dict[str, Any],
          step: str | None = None, run: str = WEBHOOK_RUN) -> ev.Event:
    journal = JsonlJournal.for_incident(state, incident, run)
    try:
        return journal.record(type, at=at, step=step, data=data)
    finally:
        journal.close()
