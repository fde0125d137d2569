"""Issue 15, item 15: the timeline keeps what a reader needs — the alert, each decision, each change,
each verification, each refusal — and folds the engine's chatter (step started, step ok, evidence)
into one row per step."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from runbook.drill.run import run_drill
from runbook.engine.operator import AssumeYes
from runbook.record.journal import read_journal
from runbook.model import events as ev
from runbook.reporting.context import build_context
from runbook.reporting.rca import render

KEPT = {ev.ALERT_RECEIVED, ev.RUN_STARTED, ev.ACTION_PLANNED, ev.GUARD_PASSED, ev.GUARD_REFUSED, ev.ACTION_CONFIRMED,
        ev.ACTION_APPLIED, ev.ACTION_SKIPPED, ev.ACTION_FAILED, ev.VERIFY_PASSED, ev.VERIFY_FAILED,
        ev.ROLLBACK_APPLIED, ev.ROLLBACK_FAILED, ev.ESCALATED, ev.NOTE, ev.RUN_FINISHED}
CHATTER = {ev.STEP_STARTED, ev.EVIDENCE}


def drill_events(name: str, tmp_path) -> list[ev.Event]:
    drill = run_drill(name, state=tmp_path / "state", operator=AssumeYes("alice"))
    return read_journal(drill.journal).events


@pytest.mark.parametrize("name", ["oom-surge", "waiting-queue-all-unready"])
def test_15_the_timeline_keeps_every_decision_change_verification_and_refusal(name, tmp_path):
    events = drill_events(name, tmp_path)
    timeline = build_context(events)["timeline"]
    kept = [e.seq for e in events if e.type in KEPT]
    assert [r["seq"] for r in timeline if r["type"] in KEPT] == kept
    assert not [r for r in timeline if r["type"] in CHATTER]
    if name == "waiting-queue-all-unready":
        assert any(r["type"] == ev.GUARD_REFUSED and "min_ready" in r["what"] for r in timeline)


def test_15_each_diagnostic_step_is_one_row_with_its_summary_and_evidence(tmp_path):
    events = drill_events("oom-surge", tmp_path)
    context = build_context(events)
    timeline = context["timeline"]
    numbers = {(e["step"], e["title"]): e["number"] for e in context["evidence"]}
    diagnostics = [e for e in events if e.type == ev.STEP_FINISHED and e.data.get("kind") == "diagnostic"]
    for finished in diagnostics:
        [row] = [r for r in timeline if r["step"] == finished.step]
        assert finished.data["summary"] in row["what"]
        for e in events:
            if e.type == ev.EVIDENCE and e.step == finished.step:
                assert f"E{numbers[(e.step, e.data['title'])]}" in row["evidence"]
    # A remediation's step.finished says what action.applied already says: folded.
    assert not [r for r in timeline if r["type"] == ev.STEP_FINISHED and r["step"] == "scale-down"]
    assert len(timeline) < len(events) / 2


def test_15_the_markdown_timeline_has_no_chatter(tmp_path):
    text = render(drill_events("oom-surge", tmp_path), with_charts=False).text
    timeline = text.split("## Timeline", 1)[1].split("\n## ", 1)[0]
    assert not re.search(r"started \((prom|k8s|flow)\.", timeline)
    assert "evidence:" not in timeline and "around the incident" not in timeline
    assert "| alertmanager | alert VllmOomSurge firing" in timeline
    assert "confirmed (--yes)" in timeline


def test_15_a_failed_or_skipped_step_keeps_its_row():
    at = dt.datetime(2026, 3, 14, 3, 12, 7, tzinfo=dt.timezone.utc)

    def event(seq, type_, step=None, **data):
        return ev.Event(seq=seq, at=at + dt.timedelta(seconds=seq), incident="inc", run="r", type=type_, step=step,
                        data=data)

    events = [event(1, ev.RUN_STARTED, playbook="p"),
              event(2, ev.STEP_STARTED, "gpu", uses="k8s.exec", kind="diagnostic"),
              event(3, ev.STEP_FINISHED, "gpu", status="failed", summary="exec timed out after 30s", kind="diagnostic"),
              event(4, ev.STEP_FINISHED, "reset", status="skipped", summary="`when` is false: gpu busy",
                    kind="remediation"),
              event(5, ev.RUN_FINISHED, outcome="failed", reason="exec timed out after 30s")]
    rows = build_context(events)["timeline"]
    assert [(r["step"], r["type"]) for r in rows] == [("", ev.RUN_STARTED), ("gpu", ev.STEP_FINISHED),
                                                      ("reset", ev.STEP_FINISHED), ("", ev.RUN_FINISHED)]
    assert "failed" in rows[1]["what"] and "exec timed out after 30s" in rows[1]["what"]
    assert "skipped" in rows[2]["what"]
