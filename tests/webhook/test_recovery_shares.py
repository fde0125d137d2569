"""What a restart counts as applied, or in doubt, goes where other runbook instances count it too.

`recover()` on a journal left by a process killed mid-apply, with a shared history whose ledger is a
fake that keeps what it was told (or cannot be reached).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

from runbook.record import journal as journals
from runbook.actions import load_builtin
from runbook.clock import FakeClock
from runbook.errors import BackendUnavailable
from runbook.record.history import SharedHistory
from runbook.record.journal import Application
from runbook.model import events as ev
from runbook.webhook.recovery import recover
from runbook.webhook.store import IncidentRow

AT = dt.datetime(2026, 3, 14, 3, 20, tzinfo=dt.timezone.utc)
TARGET = "llm/pod/vllm-server-0"


class FakeLedger:
    def __init__(self, reachable: bool = True):
        self.reachable = reachable
        self.recorded: list[tuple[str, Application]] = []

    def applications(self, target, *, since, action=None, namespace=None):
        return [a for t, a in self.recorded if t == target and a.at >= since]

    def record(self, target, application, *, namespace=None):
        if not self.reachable:
            raise BackendUnavailable("the cluster's record of changes cannot be reached (test)")
        self.recorded.append((target, application))


@dataclasses.dataclass
class FakeRuns:
    state: Path
    ledger: FakeLedger
    registry: object = dataclasses.field(default_factory=load_builtin)
    clock: FakeClock = dataclasses.field(default_factory=lambda: FakeClock(AT + dt.timedelta(minutes=2)))
    owner: str = "test:1"

    def history(self):
        return SharedHistory(self.state, self.ledger)

    def execute(self, row, book, skip, *, dry_run=False):
        raise AssertionError("a change that cannot be re-checked is never re-run")


def killed_mid_delete(state: Path) -> IncidentRow:
    incident = "20260314-031207-test-zombie-0001"
    journal = journals.JsonlJournal.for_incident(state, incident, "run-killed")
    journal.record(ev.RUN_STARTED, at=AT, data={"playbook": "test-zombie"})
    journal.record(ev.ACTION_PLANNED, at=AT, step="delete-pod", data={
        "action": "k8s.delete_pod", "target": TARGET, "summary": "delete pod vllm-server-0",
        "before": {"uid": "u1"}, "after": {"deleted": True}})
    journal.record(ev.ACTION_CONFIRMED, at=AT, step="delete-pod", data={"by": "alice"})
    journal.close()
    return IncidentRow(id=incident, source="alertmanager", source_key="k", playbook="test-zombie", params={},
                       alert={}, state="interrupted", job="", owner=None, outcome=None, opened=0.0, updated=0.0,
                       closed=None)


def test_a_change_in_doubt_is_put_in_the_shared_record(tmp_path):
    runs = FakeRuns(tmp_path / "state", FakeLedger())
    row = killed_mid_delete(runs.state)
    assert recover(runs, row, book=None) is None  # left to a person
    assert [(t, a.incident, a.action) for t, a in runs.ledger.recorded] == [(TARGET, row.id, "k8s.delete_pod")]
    # Another instance, reading only the shared record, counts it inside its cooldown.
    other = SharedHistory(None, runs.ledger)
    assert len(other.records(TARGET, since=AT - dt.timedelta(minutes=30))) == 1


def test_a_shared_record_that_cannot_be_written_is_said_in_the_journal(tmp_path):
    runs = FakeRuns(tmp_path / "state", FakeLedger(reachable=False))
    row = killed_mid_delete(runs.state)
    assert recover(runs, row, book=None) is None
    events = journals.read_journal(journals.incident_dir(runs.state, row.id) / journals.JOURNAL_NAME).events
    killed = [e.type for e in events if e.run == "run-killed"]
    assert killed == [ev.RUN_STARTED, ev.ACTION_PLANNED, ev.ACTION_CONFIRMED, ev.RUN_INTERRUPTED, ev.ACTION_UNKNOWN,
                      ev.NOTE, ev.ESCALATED, ev.RUN_FINISHED]
    note = next(e for e in events if e.type == ev.NOTE)
    assert "their cooldowns will not count it" in note.data["message"]
    # This instance still counts it from its own journal.
    assert len(journals.History(runs.state).records(TARGET, since=AT)) == 1

