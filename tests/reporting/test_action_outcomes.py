"""The report's actions table says what became of each plan of a change, each plan on its own row.

A change whose outcome is unknown, one planned again because the target moved, one a restart found
unchanged, one proposed to a person and one whose run stopped after the yes each read as such, never
as merely "planned".
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from runbook.record.journal import MemoryJournal
from runbook.model import events as ev
from runbook.reporting.context import build_context

AT = dt.datetime(2026, 3, 14, 3, 12, 7, tzinfo=dt.timezone.utc)
TARGET = "llm/statefulset/vllm-server"


def plan(journal: MemoryJournal, step: str = "lower", **data) -> None:
    journal.record(ev.ACTION_PLANNED, at=AT, step=step, data={"action": "k8s.set_arg", "target": TARGET,
                                                              "summary": "lower --max-model-len", "before": 8192,
                                                              "after": 7372, "diff": [], "dry_run": False, **data})


def confirm(journal: MemoryJournal, step: str = "lower") -> None:
    journal.record(ev.ACTION_CONFIRMED, at=AT, step=step, data={"by": "alice", "how": "prompt", "target": TARGET,
                                                                "action": "k8s.set_arg"})


def statuses(journal: MemoryJournal) -> list[str]:
    return [a["status"] for a in build_context(journal.events())["actions"]]


def started(incident: str = "inc-1", run: str = "r1") -> MemoryJournal:
    journal = MemoryJournal(incident, run=run)
    journal.record(ev.RUN_STARTED, at=AT, data={"playbook": "oom-surge"})
    return journal


def finished(journal: MemoryJournal) -> None:
    journal.record(ev.RUN_FINISHED, at=AT, data={"outcome": "failed"})


def test_an_apply_that_raised_reads_as_an_unknown_outcome_with_its_error():
    journal = started()
    plan(journal)
    confirm(journal)
    journal.record(ev.ACTION_UNKNOWN, at=AT, step="lower", data={"action": "k8s.set_arg", "target": TARGET,
                                                                 "error": "the answer was cut off"})
    finished(journal)
    [row] = build_context(journal.events())["actions"]
    assert row["status"] == "outcome unknown (counted as applied)"
    assert row["note"] == "the answer was cut off"


def test_a_plan_the_target_moved_under_is_one_row_and_its_new_plan_another():
    journal = started()
    plan(journal)
    confirm(journal)
    plan(journal, replanned_because="the StatefulSet changed")
    confirm(journal)
    journal.record(ev.ACTION_APPLIED, at=AT, step="lower", data={"action": "k8s.set_arg", "target": TARGET})
    finished(journal)
    assert statuses(journal) == ["planned again (the target moved before the apply; nothing applied)", "applied"]


def test_a_run_stopped_after_the_yes_reads_as_in_doubt_until_a_restart_checks_it():
    journal = started()
    plan(journal)
    confirm(journal)
    assert statuses(journal) == ["in doubt: the run stopped after the yes, before its result (counted as applied)"]
    journal.record(ev.RUN_INTERRUPTED, at=AT, step="lower", data={"verdict": "not_applied",
                                                                  "reason": "unchanged (8192)"})
    finished(journal)
    rows = build_context(journal.events())["actions"]
    assert [r["status"] for r in rows] == ["not applied (checked after a restart)"]
    assert rows[0]["note"] == "unchanged (8192)"


def test_a_proposal_reads_as_waiting_for_a_person_and_a_finished_run_is_never_in_doubt():
    journal = started()
    plan(journal)
    journal.record(ev.ACTION_PROPOSED, at=AT, step="lower", data={"action": "k8s.set_arg", "target": TARGET})
    plan(journal, step="other")
    confirm(journal, step="other")
    finished(journal)
    assert statuses(journal) == ["proposed (waiting for a person)", "planned"]


def test_each_run_of_an_incident_keeps_its_own_plans():
    first = started(run="r1")
    plan(first)
    confirm(first)
    first.record(ev.RUN_INTERRUPTED, at=AT, step="lower", data={"verdict": "unknown", "reason": "cannot tell"})
    finished(first)
    second = MemoryJournal("inc-1", run="r2")
    plan(second)
    second.record(ev.ACTION_SKIPPED, at=AT, step="lower", data={"reason": "already in the desired state"})
    events = [*first.events(), *[dataclasses.replace(e, seq=e.seq + 100) for e in second.events()]]
    assert [a["status"] for a in build_context(events)["actions"]] == [
        "outcome unknown after a restart (counted as applied; left to a person)", "not applied"]
