"""A drill played once on the simulated world, and its signals' whole course as Prometheus data.

The drill's world, after the run, knows every series' value at every moment (the reactions to
what was applied included); sampled each second over the windows the drill queried, it backfills
a real Prometheus whose answers at those virtual times are the drill's.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from runbook.record import journal as journals
from runbook.sim.world import SimulatedWorld
from runbook.clock import FakeClock
from runbook.drill.run import bundled_playbook, run_drill
from runbook.sim.scenario import Scenario, load_scenario
from runbook.sim.world import build_world
from runbook.engine.operator import Operator
from runbook.engine.runner import Engine, RunResult
from runbook.record.locks import MemoryLocks
from runbook.model.alert import Alert
from runbook.model.events import Event
from runbook.actions import load_builtin

METRIC_PREFIX = "runbook_drill:"  # one gauge per scenario signal, carrying the scenario's own labels
GRID = 1.0  # seconds between samples; Prometheus runs with a lookback of the same length
PAD = 5.0  # seconds of data on each side of every window the drill queried


@dataclasses.dataclass(frozen=True)
class Played:
    scenario: Scenario
    result: RunResult
    events: list[Event]
    world: SimulatedWorld
    windows: list[tuple[dt.datetime, dt.datetime]]  # merged, padded


class _RecordingMetrics:
    """The drill's Metrics, noting the times each query looked at."""

    def __init__(self, inner, seen: list[tuple[dt.datetime, dt.datetime]]):
        self._inner, self._seen = inner, seen

    def query(self, signal, *, at, labels={}, by=()):
        self._seen.append((at, at))
        return self._inner.query(signal, at=at, labels=labels, by=by)

    def query_range(self, signal, *, start, end, step_seconds, labels={}, by=()):
        self._seen.append((start, end))
        return self._inner.query_range(signal, start=start, end=end, step_seconds=step_seconds, labels=labels, by=by)


def alert_of(scenario: Scenario) -> Alert:
    return Alert(source=scenario.alert.source, name=scenario.alert.name, labels=dict(scenario.alert.labels),
                 annotations=dict(scenario.alert.annotations), starts_at=scenario.t0)


def reference_events(name: str, state: Path, operator: Operator) -> tuple[RunResult, list[Event]]:
    """`runbook drill NAME` itself: the journal the real stack must match."""
    done = run_drill(name, state=state, operator=operator)
    return done.run, journals.read_journal(done.journal).events


def play(name: str, state: Path, operator: Operator) -> Played:
    """The drill as `run_drill` runs it, keeping its world and the windows its queries read."""
    registry = load_builtin()
    scenario = load_scenario(name)
    playbook = bundled_playbook(scenario.playbook, registry)
    clock = FakeClock(scenario.t0)
    world = build_world(scenario, clock)
    backends = world.world_backends()
    seen: list[tuple[dt.datetime, dt.datetime]] = []
    backends = dataclasses.replace(backends, metrics=_RecordingMetrics(backends.metrics, seen))
    incident = journals.new_incident_id(scenario.t0, playbook.name, drill=True)
    journal = journals.JsonlJournal.for_incident(state, incident, journals.new_run_id())
    engine = Engine(registry=registry, world=backends, clock=clock, journal=journal, operator=operator,
                    locks=MemoryLocks(), history=journals.History(None, extra=journal), holder="runbook drill")
    try:
        result = engine.run(playbook, alert=alert_of(scenario), params=scenario.params)
    finally:
        journal.close()
    return Played(scenario, result, journals.read_journal(journal.path).events, world, _merge(seen))


def _merge(windows: Iterable[tuple[dt.datetime, dt.datetime]]) -> list[tuple[dt.datetime, dt.datetime]]:
    pad = dt.timedelta(seconds=PAD)
    merged: list[tuple[dt.datetime, dt.datetime]] = []
    for start, end in sorted((s - pad, e + pad) for s, e in windows):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _grid(windows: Sequence[tuple[dt.datetime, dt.datetime]]) -> Iterable[dt.datetime]:
    for start, end in windows:
        t = dt.datetime.fromtimestamp(int(start.timestamp()), dt.timezone.utc)
        while t <= end:
            yield t
            t += dt.timedelta(seconds=GRID)


def _labels(labels: Mapping[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))


def samples(played: Played, *, shift: dt.timedelta = dt.timedelta(0),
            windows: Sequence[tuple[dt.datetime, dt.datetime]] | None = None) -> dict[str, list[str]]:
    """OpenMetrics sample lines per metric family: every series of every signal, each second of
    each window, as the drill's world says it was (no line while a series is absent); `shift`
    moves the drill's time axis (a drill time t is written at t + shift)."""
    state = played.world.state
    families: dict[str, list[str]] = {}
    times = list(_grid(played.windows if windows is None else windows))
    for signal in played.scenario.signals:
        family = families.setdefault(METRIC_PREFIX + signal.name, [])
        for index, series in enumerate(signal.series):
            labels = _labels({**series.labels, "scenario": played.scenario.name})
            for t in times:
                value = state.signal_value(signal.name, index, t)
                if value is not None:
                    family.append(f"{METRIC_PREFIX}{signal.name}{{{labels}}} {value:.12g} {(t + shift).timestamp():.0f}")
    return families


def openmetrics(played: Iterable[Played], **placing) -> str:
    """Every played scenario as one document for `promtool tsdb create-blocks-from openmetrics`."""
    families: dict[str, list[str]] = {}
    for one in played:
        for name, lines in samples(one, **placing).items():
            families.setdefault(name, []).extend(lines)
    out: list[str] = []
    for name in sorted(families):  # a family's samples stay together
        out.append(f"# TYPE {name} gauge")
        out.extend(families[name])
    out.append("# EOF")
    return "\n".join(out) + "\n"


def signal_overrides(scenario: Scenario) -> dict[str, dict]:
    """The config's `signals.overrides`: each scenario signal read from its backfilled gauge, with
    the scenario's aggregate and no label renaming (the series carry the playbooks' label names)."""
    return {s.name: {"expr": f'{METRIC_PREFIX}{s.name}{{{{labels}}scenario="{scenario.name}"}}',
                     "aggregate": s.aggregate, "labels": {}}
            for s in scenario.signals}


def first_time_below(played: Played, signal: str, threshold: float) -> dt.datetime:
    """The first second, after the drill started, from which `signal` summed over its series stays
    below `threshold` until the drill's last query (when the fix took effect)."""
    state = played.world.state
    spec = next(s for s in played.scenario.signals if s.name == signal)
    end = played.windows[-1][1]
    t, found = played.scenario.t0, None
    while t <= end:
        total = sum(v for i in range(len(spec.series)) if (v := state.signal_value(signal, i, t)) is not None)
        found = (found or t) if total < threshold else None
        t += dt.timedelta(seconds=GRID)
    if found is None:
        raise AssertionError(f"{signal} never stayed below {threshold} in drill {played.scenario.name}")
    return found
