"""Running a playbook for real from the terminal: journal, operator, locks, live view, result.

Shared by `runbook run` and `runbook triage --run`, so both behave the same way.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from runbook.record import journal as journals
from runbook import settings
from runbook.backends.base import World
from runbook.clock import SystemClock
from runbook.engine.runner import Engine, RunResult, default_operator_name
from runbook.backends import shared_state
from runbook.model.alert import Alert
from runbook.model.playbook import Playbook
from runbook.actions import load_builtin


def run_playbook(playbook: Playbook, world: World, *, alert: Alert | None, params: Mapping[str, Any],
                 yes: bool, dry_run: bool, operator_name: str | None, live: bool,
                 namespaces: Collection[str] | None = None) -> tuple[RunResult, str]:
    """Run and journal it; returns the result and the journal's path."""
    from runbook.cli.live import LiveView
    from runbook.cli.output import progress_console, stderr_console
    from runbook.cli.prompt import operator_for
    from runbook.cli.signals import RunSignals, run_signals
    from runbook.cli.state import state_directory

    console = progress_console()  # the run's progress on stdout; prompts on stderr
    state = state_directory()
    clock = SystemClock()
    incident = journals.new_incident_id(clock.now(), playbook.name)
    journal = journals.JsonlJournal.for_incident(state, incident, journals.new_run_id())
    view = LiveView(console) if live else None
    if view is not None:
        describe = getattr(world.cluster, "describe", None)
        console.print(f"[dim]incident {incident}" + (f"; {describe()}" if callable(describe) else "") + "[/]")
        journal.subscribe(view)
    operator = operator_for(yes=yes, by=operator_name or default_operator_name(), console=stderr_console())
    caught = RunSignals()
    engine = Engine(registry=load_builtin(), world=world, clock=clock, journal=journal, operator=operator,
                    locks=shared_state.target_locks(world, state),
                    history=shared_state.history_for(world, state), dry_run=dry_run,
                    kill_switch=lambda: settings.kill_switch(state), holder=f"runbook run by {operator.by}",
                    interrupted=caught.journaled(journal, clock), namespaces=namespaces,
                    progress=view.progress if view is not None else None)
    try:
        with run_signals(caught):  # SIGINT/SIGTERM stop at a safe point and roll back; SIGHUP is ignored
            result = engine.run(playbook, alert=alert, params=params)
    finally:
        journal.close()
    return result, str(journal.path)


def result_document(result: RunResult, journal_path: str) -> dict[str, Any]:
    refused = next((s for s in result.steps if s.status == "refused"), None)
    return {"incident_id": result.incident, "playbook": result.playbook, "outcome": result.outcome,
            "reason": result.reason, "journal": journal_path,
            "refused": {"step": refused.id, "guard": refused.guard, "reason": refused.result.get("reason")}
            if refused else None,
            "actions": [a.to_json() for a in result.actions],
            "steps": [{"id": s.id, "uses": s.uses, "status": s.status, "summary": s.summary} for s in result.steps]}
