"""Running one drill: a bundled playbook against a scenario's simulated world, on virtual time.

Journals go to the state directory like any incident (ids start with `drill-`, so they never
count against the cooldowns and budgets of real targets), and the RCA report is written beside.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from runbook.record import journal as journals
from runbook import settings
from runbook.clock import FakeClock
from runbook.sim.scenario import Scenario, load_scenario, scenario_names
from runbook.sim.world import build_world
from runbook.engine.operator import Operator
from runbook.engine.runner import Engine, RunResult
from runbook.errors import InvalidInput
from runbook.loading import validation
from runbook.record.locks import MemoryLocks
from runbook.model.alert import Alert
from runbook.model.events import Event
from runbook.model.playbook import Playbook
from runbook.model.registry import Registry
from runbook.actions import load_builtin
from runbook.reporting import rca


@dataclasses.dataclass(frozen=True)
class DrillResult:
    scenario: Scenario
    run: RunResult
    journal: Path
    report: Path

    def to_json(self) -> dict:
        refused = next((s for s in self.run.steps if s.status == "refused"), None)
        return {
            "incident_id": self.run.incident, "scenario": self.scenario.name, "playbook": self.run.playbook,
            "outcome": self.run.outcome, "expect": self.scenario.expect,
            "as_expected": self.run.outcome == self.scenario.expect, "reason": self.run.reason,
            "refused": {"step": refused.id, "guard": refused.guard, "reason": refused.result.get("reason")}
            if refused else None,
            "journal": str(self.journal), "rca": str(self.report),
            "actions": [a.to_json() for a in self.run.actions],
            "steps": [{"id": s.id, "uses": s.uses, "status": s.status, "summary": s.summary} for s in self.run.steps],
        }


def check_scenario_name(name: str) -> None:
    """InvalidInput with "did you mean" for a name that is neither a bundled scenario nor a file."""
    from runbook.files.problems import did_you_mean

    if "/" in name or name.endswith((".yaml", ".yml")) or Path(name).is_file():
        return  # a scenario file: its own loader says what is wrong with it
    known = scenario_names()
    if name not in known:
        raise InvalidInput(f"no scenario {name} (see `runbook drill --list`); {did_you_mean(name, known)}")


def bundled_playbook(name: str, registry: Registry) -> Playbook:
    path = validation.bundled_dir() / f"{name}.yaml"
    if not path.is_file():
        raise InvalidInput(f"the scenario names playbook {name!r}, which is not bundled")
    loaded = validation.load_playbook_file(path, registry, label=f"<bundled>/{name}.yaml")
    if loaded.playbook is None:
        raise InvalidInput(f"the bundled playbook {name} is invalid: "
                           + "; ".join(p.format() for p in loaded.problems))
    return loaded.playbook


def playbook_from_file(path: Path, registry: Registry) -> Playbook:
    """The playbook of `path`, valid, or InvalidInput listing its problems."""
    loaded = validation.load_playbook_file(Path(path), registry)
    if loaded.playbook is None:
        raise InvalidInput(f"{path}: the playbook is invalid (`runbook validate {path}` shows each problem):\n"
                           + "\n".join(p.format() for p in loaded.problems))
    return loaded.playbook


def run_drill(name: str, *, state: Path, operator: Operator, dry_run: bool = False,
              on_event: Callable[[Event], None] | None = None, registry: Registry | None = None,
              on_start: Callable[[Scenario, Playbook, str], None] | None = None,
              interrupted: Callable[[journals.Journal, FakeClock], Callable[[], str | None]] | None = None,
              on_progress: Callable[[str, dict], None] | None = None, playbook_file: Path | None = None,
              ) -> DrillResult:
    """`interrupted`: given the run's journal and clock, the engine's stop check (the CLI's signals).

    `on_progress(step, update)`: a step's live readings (a verify's value and time left), for a view.
    `playbook_file`: run this playbook instead of the one the scenario names (a change tried on it).
    """
    check_scenario_name(name)
    registry = registry or load_builtin()
    scenario = load_scenario(name)
    playbook = bundled_playbook(scenario.playbook, registry) if playbook_file is None else \
        playbook_from_file(playbook_file, registry)
    clock = FakeClock(scenario.t0)
    world = build_world(scenario, clock)
    incident = journals.new_incident_id(scenario.t0, playbook.name, drill=True)
    journal = journals.JsonlJournal.for_incident(state, incident, journals.new_run_id())
    if on_event is not None:
        journal.subscribe(on_event)
    if on_start is not None:
        on_start(scenario, playbook, incident)
    engine = Engine(registry=registry, world=world.world_backends(), clock=clock, journal=journal,
                    operator=operator, locks=MemoryLocks(), history=journals.History(None, extra=journal),
                    dry_run=dry_run, kill_switch=lambda: settings.kill_switch(state), holder="runbook drill",
                    interrupted=interrupted(journal, clock) if interrupted is not None else lambda: None,
                    progress=on_progress)
    alert = Alert(source=scenario.alert.source, name=scenario.alert.name, labels=dict(scenario.alert.labels),
                  annotations=dict(scenario.alert.annotations), starts_at=scenario.t0)
    try:
        result = engine.run(playbook, alert=alert, params=scenario.params)
    finally:
        journal.close()
    report = rca.write_report(journal.path, journal.path.parent / "rca.md")
    return DrillResult(scenario, result, journal.path, report)
