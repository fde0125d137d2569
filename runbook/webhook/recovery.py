"""After a crash: close each interrupted run in its journal, and never apply one change twice.

A change confirmed but not recorded as applied may or may not have happened. A reversible one is
checked against the world with a dry run (is its `after` already there?); any other is not
retried: the incident escalates to a human. The rest of the playbook then runs again, skipping
every step already applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from runbook.record import journal as journals
from runbook.clock import Clock
from runbook.errors import BackendError
from runbook.model import events as ev
from runbook.model.events import Event
from runbook.model.playbook import Playbook
from runbook.model.registry import Registry
from runbook.webhook import records
from runbook.webhook.store import IncidentRow


class Runs(Protocol):
    """What recovery needs of `runbook.webhook.runs.Runs`, which calls it: named here, not imported back."""

    registry: Registry
    state: Path
    clock: Clock
    owner: str

    def execute(self, row: IncidentRow, book: Playbook, skip: Mapping[str, str], *,
                dry_run: bool = False) -> tuple[Any, journals.JsonlJournal]: ...

    def history(self) -> journals.History: ...


RECOVERED_BY = "found applied after a restart"
IN_DOUBT_BY = "left in doubt by a restart"  # the `by` of an interrupted change counted as applied
IN_DOUBT = ("unknown", "changed")  # verdicts that leave the change to a person: it may have happened


def interrupted_runs(events: list[Event]) -> list[str]:
    started = [e.run for e in events if e.type == ev.RUN_STARTED]
    finished = {e.run for e in events if e.type == ev.RUN_FINISHED}
    return [run for run in dict.fromkeys(started) if run not in finished]


def in_flight(events: list[Event], run: str) -> Event | None:
    """The `action.planned` of a change confirmed in this run with no recorded result, if any."""
    mine = [e for e in events if e.run == run]
    for index in range(len(mine) - 1, -1, -1):
        event = mine[index]
        if event.type != ev.ACTION_CONFIRMED:
            continue
        after = mine[index + 1:]
        if any(e.step == event.step and e.type in (ev.ACTION_APPLIED, ev.ACTION_FAILED, ev.STEP_FINISHED)
               for e in after):
            return None
        return next((e for e in reversed(mine[:index]) if e.type == ev.ACTION_PLANNED and e.step == event.step),
                    None)
    return None


def applied_steps(events: list[Event]) -> dict[str, str]:
    return {e.step: e.run for e in events if e.type == ev.ACTION_APPLIED and e.step}


def check(runs: Runs, row: IncidentRow, book: Playbook, planned: Event, skip: dict[str, str]) -> tuple[str, str]:
    """applied | not_applied | not_needed | changed | unknown, and why."""
    action, target = planned.data.get("action", "?"), planned.data.get("target", "?")
    spec = runs.registry.get(str(action))
    if spec is None or not spec.reversible:
        return "unknown", (f"{action} on {target} was interrupted while being applied; whether it happened cannot "
                           f"be told safely, so it is not retried: check {target} by hand")
    result, journal = runs.execute(row, book, skip, dry_run=True)
    events = [e for e in journal.events() if e.run == result.run]
    now = next((e for e in reversed(events) if e.type == ev.ACTION_PLANNED and e.step == planned.step), None)
    if now is None:
        outcome = next((s for s in result.steps if s.id == planned.step), None)
        if outcome is not None and outcome.status == "skipped":
            return "not_needed", f"{planned.step} no longer applies: {outcome.summary}"
        return "unknown", f"the re-check of {planned.step} could not plan it: {outcome.summary if outcome else result.reason}"
    current = now.data.get("before")
    if current == planned.data.get("after"):
        return "applied", f"{target} already shows the change ({_show(current)})"
    if current == planned.data.get("before"):
        return "not_applied", f"{target} is unchanged ({_show(current)}); the step may run again under its guards"
    return "changed", (f"{target} is now {_show(current)}, neither the state before ({_show(planned.data.get('before'))}) "
                       f"nor after ({_show(planned.data.get('after'))}) the interrupted change")


def _share(runs: Runs, journal: journals.JsonlJournal, row: IncidentRow, planned: Event, at: Any) -> None:
    """Put what recovery counts as applied where other runbook instances count it too (a shared history)."""
    record = getattr(runs.history(), "record_applied", None)
    if record is None:
        return  # the local journals are the whole history: the journal line just written is counted
    target = str(planned.data.get("target", "?"))
    try:
        record(target=target, action=str(planned.data.get("action", "?")), at=at, incident=row.id)
    except BackendError as exc:
        journal.record(ev.NOTE, at=runs.clock.now(), data={
            "message": f"could not record the change to {target} where other runbook instances see it: {exc}; "
                       "their cooldowns will not count it"})


def _show(value: Any) -> str:
    return ", ".join(f"{k}={v}" for k, v in value.items()) if isinstance(value, dict) else str(value)


def recover(runs: Runs, row: IncidentRow, book: Playbook) -> dict[str, str] | None:
    """Close the interrupted runs; the steps a re-run must skip, or None when a human must decide."""
    path = journals.incident_dir(runs.state, row.id) / "journal.jsonl"
    events = journals.read_journal(path).events
    go_on = True
    for run in interrupted_runs(events):
        planned = in_flight(events, run)
        verdict, why = "none", "no change was being applied"
        if planned is not None:
            verdict, why = check(runs, row, book, planned, _skips(applied_steps(events)))
        journal = journals.JsonlJournal(path, incident=row.id, run=run)
        try:
            now = runs.clock.now()
            journal.record(records.RUN_INTERRUPTED, at=now, step=planned.step if planned else None,
                           data={"verdict": verdict, "reason": why, "by": runs.owner})
            if verdict == "applied" and planned is not None:
                # Recorded as applied so that cooldowns, budgets and this recovery count it once.
                journal.record(ev.ACTION_APPLIED, at=now, step=planned.step, data={
                    **{k: planned.data.get(k) for k in ("action", "target", "summary", "before", "after")},
                    # the serving capacity it left, as planned: the resumed run's outcome counts it (issue 34)
                    **({"capacity": planned.data["capacity"]} if "capacity" in planned.data else {}),
                    "by": RECOVERED_BY, "recovered": True})
                _share(runs, journal, row, planned, now)
            if verdict in IN_DOUBT and planned is not None:
                # It may have happened: cooldowns and budgets count it as applied, as an apply that raised is
                # counted; at the restart or the run's last record, whichever is later: no earlier than it can
                # have happened, so the wait is never shorter than the real one (even on a clock set back).
                counted_at = max(now, max((e.at for e in events if e.run == run), default=now))
                journal.record(ev.ACTION_UNKNOWN, at=counted_at, step=planned.step, data={
                    **{k: planned.data.get(k) for k in ("action", "target", "summary", "before", "after")},
                    **({"capacity": planned.data["capacity"]} if "capacity" in planned.data else {}),
                    "by": IN_DOUBT_BY, "recovered": True, "error": why,
                    "why": "interrupted while being applied; counted as applied"})
                _share(runs, journal, row, planned, counted_at)
            if verdict in IN_DOUBT:
                go_on = False
                journal.record(ev.ESCALATED, at=now, step=planned.step if planned else None, data={"reason": why})
            journal.record(ev.RUN_FINISHED, at=now, data={"outcome": "interrupted", "reason": why,
                                                         "dry_run": False, "steps": {}, "applied": 0})
        finally:
            journal.close()
        events = journals.read_journal(path).events
    return _skips(applied_steps(events)) if go_on else None


def held_for_a_person(events: list[Event]) -> tuple[str, str] | None:
    """The last run a restart closed without knowing whether its change happened: (run, why), or None."""
    for event in reversed(events):
        if event.type == records.RUN_INTERRUPTED and event.data.get("verdict") in IN_DOUBT and event.run:
            return event.run, str(event.data.get("reason", ""))
    return None


def _skips(applied: dict[str, str]) -> dict[str, str]:
    return {step: f"applied by run {run} before the restart" for step, run in applied.items()}
