"""Issue 15, item 14: the report's milestones are real — onset from the alert's condition as the
metrics recorded it, then detected, acknowledged, first action, mitigated, resolved — and the
times to detect, mitigate and resolve are measured from the onset, never "0s" by construction."""

from __future__ import annotations

import datetime as dt
import importlib.resources
from pathlib import Path

import pytest

from runbook.drill.run import run_drill
from runbook.engine.operator import AssumeYes
from runbook.record.journal import read_journal
from runbook.model import events as ev
from runbook.reporting.context import build_context
from runbook.reporting.rca import render
from runbook.model.duration import format_duration
from runbook.sim.scenario import load_scenario

HERE = Path(__file__).parent
OLD_JOURNAL = HERE / "fixtures" / "oom-surge.jsonl"  # written before the run recorded its condition
ONSET = "-7m"  # the bundled oom-surge: "a wave of long prompts started ~7 minutes before the alert"
NAMES = ["onset", "detected", "acknowledged", "first action", "mitigated", "resolved"]


@pytest.fixture
def stated(tmp_path) -> Path:
    """The bundled oom-surge scenario, stating its onset."""
    text = (importlib.resources.files("runbook") / "scenarios" / "oom-surge.yaml").read_text(encoding="utf-8")
    path = tmp_path / "oom-surge-onset.yaml"
    path.write_text(text + f"onset: {ONSET}\n", encoding="utf-8")
    return path


def _step(events) -> float:
    [condition] = [e for e in events if e.type == ev.EVIDENCE and e.data.get("detect")]
    return float(condition.data["step"])


def test_14_a_scenario_states_its_onset(stated):
    scenario = load_scenario(stated)
    assert scenario.onset == -420.0
    assert scenario.at(scenario.onset) == dt.datetime(2026, 3, 14, 3, 5, 7, tzinfo=dt.timezone.utc)


def test_14_milestones_of_a_drill_follow_the_scenarios_virtual_times(stated, tmp_path):
    drill = run_drill(str(stated), state=tmp_path / "state", operator=AssumeYes("alice"))
    scenario = drill.scenario
    events = read_journal(drill.journal).events
    context = build_context(events)
    rows = {m["name"]: m for m in context["milestones"]}
    assert [m["name"] for m in context["milestones"]] == [*NAMES[:5], "capacity restored", "resolved"]  # it took capacity
    step = dt.timedelta(seconds=_step(events))
    onset = scenario.at(scenario.onset)
    # From the metrics: the first recorded sample at which the condition holds, within one step of the world's onset.
    assert onset <= rows["onset"]["at"] < onset + step, rows["onset"]
    assert rows["detected"]["at"] == scenario.t0  # the alert
    assert rows["acknowledged"]["at"] == scenario.t0  # the drill took it at once
    assert rows["first action"]["at"] == scenario.t0
    cleared = scenario.t0 + dt.timedelta(seconds=60)  # OOM failures stop 60 s after the change (the reaction)
    assert cleared <= rows["mitigated"]["at"] < cleared + step, rows["mitigated"]
    assert rows["resolved"]["at"] == [e for e in events if e.type == ev.RUN_FINISHED][-1].at
    # the replicas were all back when the restore's step finished, which ended the run (issue 34)
    restored = [e for e in events if e.type == ev.STEP_FINISHED and e.step == "restore-capacity"][-1]
    assert rows["capacity restored"]["at"] == restored.at == rows["resolved"]["at"]
    assert rows["capacity restored"]["note"] == "llm/statefulset/vllm-server back at 3 replicas"
    durations = context["durations"]
    assert set(durations) == {"detect", "mitigate", "resolve"}
    assert "0s" not in durations.values()
    assert durations["detect"] == format_duration((scenario.t0 - rows["onset"]["at"]).total_seconds())
    assert durations["resolve"] == format_duration((rows["resolved"]["at"] - rows["onset"]["at"]).total_seconds())
    text = render(events, with_charts=False).text
    assert "| onset | 03:05:" in text and "| mitigated | 03:13:" in text
    assert f"Time to detect: **{durations['detect']}**" in text
    assert f"Time to mitigate: **{durations['mitigate']}**" in text
    assert f"Time to resolve: **{durations['resolve']}**" in text


def test_14_a_journal_without_the_condition_says_the_onset_is_unknown_never_0s():
    events = read_journal(OLD_JOURNAL).events
    context = build_context(events)
    rows = {m["name"]: m for m in context["milestones"]}
    assert rows["onset"]["at"] is None and rows["onset"]["clock"] == "—"
    assert "0s" not in context["durations"].values()
    assert "detect" not in context["durations"]  # no onset: nothing to measure it from
    # Mitigated is when the verified condition began to hold, not when the last change was made.
    assert rows["mitigated"]["clock"] == "03:13:07"
    text = render(events, with_charts=False).text
    assert "Time to mitigate: **0s**" not in text and "| 0s |" not in text


def test_14_an_unresolved_run_has_no_resolved_milestone(tmp_path):
    drill = run_drill("waiting-queue-all-unready", state=tmp_path / "state", operator=AssumeYes("alice"))
    context = build_context(read_journal(drill.journal).events)
    rows = {m["name"]: m for m in context["milestones"]}
    assert rows["resolved"]["at"] is None and rows["first action"]["at"] is None
    assert "resolve" not in context["durations"]
