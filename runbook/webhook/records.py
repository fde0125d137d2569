"""Journal events the webhook writes itself, outside a run, and the one way it writes them.

Each write opens the incident's journal, appends one fsynced line and closes it, so the ack
path holds no file open between deliveries.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from runbook.record.journal import JsonlJournal
from runbook.model import events as ev

WEBHOOK_RUN = "webhook"  # the run id of events that belong to no playbook run
INCIDENT_CLOSED = ev.INCIDENT_CLOSED
PROPOSAL_APPROVED = ev.PROPOSAL_APPROVED
PROPOSAL_EXPIRED = ev.PROPOSAL_EXPIRED
PROPOSAL_CLOSED = ev.PROPOSAL_CLOSED
RUN_INTERRUPTED = ev.RUN_INTERRUPTED


def write(state: Path, incident: str, type: str, *, at: dt.datetime, data: dict[str, Any],
          step: str | None = None, run: str = WEBHOOK_RUN) -> ev.Event:
    journal = JsonlJournal.for_incident(state, incident, run)
    try:
        return journal.record(type, at=at, step=step, data=data)
    finally:
        journal.close()
