"""The engine on fakes with a fake clock: every decision shows up, in order, in the journal."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest

from runbook.engine.operator import NoTerminal, Scripted
from runbook.record.journal import History
from runbook.model import events as ev
from runbook.sim.fakes import FakeMetrics
from tests.conftest import assert_sequence
from tests.engine import helpers
from tests.engine.helpers import cluster, engine, playbook

APPLIED_IN_ORDER = [ev.RUN_STARTED, ev.STEP_STARTED, ev.EVIDENCE, ev.STEP_FINISHED, ev.STEP_STARTED,
                    ev.ACTION_PLANNED, ev.GUARD_PASSED, ev.ACTION_CONFIRMED, ev.ACTION_APPLIED, ev.STEP_FINISHED,
                    ev.STEP_STARTED, ev.EVIDENCE, ev.VERIFY_PASSED, ev.STEP_FINISHED,
                    ev.ESCALATED,  # 3 → 1 and nothing brings the replicas back: capacity reduced (issue 34)
                    ev.EVIDENCE,  # the signal's history around the incident, for the report's chart
                    ev.RUN_FINISHED]


def oom_until_changed(c):
    """OOM failures continue until the cluster has been changed."""
    return FakeMetrics({"oom_failures_per_min": lambda at: 0.0 if c.mutations else 4.0})


def refused_by(events) -> list[str]:
    return [e.data["guard"] for e in events if e.type == ev.GUARD_REFUSED]


def test_remediation_applied_after_confirmation(clock):
    c = cluster()
    operator = Scripted([True], by="alice")
    e = engine(clock, metrics=oom_until_changed(c), cluster_=c, operator=operator)
    result = e.run(playbook())
    events = e.journal.events()
    assert [x.type for x in events] == APPLIED_IN_ORDER
    # Every step finished, but the playbook leaves a third of the replicas serving: mitigated, not resolved.
    assert result.outcome == "mitigated" and result.exit_code == 5
    assert result.reason == ("capacity reduced: llm/statefulset/vllm-server serves 1 of its 3 replicas. To restore it "
                             "when it is safe: kubectl -n llm scale statefulset/vllm-server --replicas=3")
    assert c.get_workload("llm", "statefulset", "vllm-server").replicas == 1
    applied = next(x for x in events if x.type == ev.ACTION_APPLIED)
    assert applied.data["before"] == {"replicas": 3} and applied.data["after"] == {"replicas": 1}
    assert applied.data["by"] == "alice"
    assert operator.asked[0].diff == ("- replicas: 3", "+ replicas: 1")
    passed = next(x for x in events if x.type == ev.GUARD_PASSED).data["guards"]
    assert [g["guard"] for g in passed] == ["floor", "min_ready", "budget", "lock", "recheck", "dry_run"]
    assert [x.seq for x in events] == list(range(1, len(events) + 1))


def test_refused_without_a_terminal(clock):
    c = cluster()
    e = engine(clock, metrics=oom_until_changed(c), cluster_=c, operator=NoTerminal("alice"))
    result = e.run(playbook())
    events = e.journal.events()
    assert_sequence(events, [ev.ACTION_PLANNED, ev.GUARD_PASSED, ev.GUARD_REFUSED, ev.RUN_FINISHED],
                    forbidden=(ev.ACTION_APPLIED, ev.ACTION_CONFIRMED, ev.VERIFY_PASSED))
    assert refused_by(events) == ["confirm"]
    assert "--yes" in events[-1].data["reason"]
    assert result.outcome == "refused" and result.exit_code == 4
    assert c.mutations == []


def test_dry_run_applies_nothing(clock):
    c = cluster()
    e = engine(clock, metrics=oom_until_changed(c), cluster_=c, operator=Scripted([]), dry_run=True)
    result = e.run(playbook())
    events = e.journal.events()
    assert_sequence(events, [ev.EVIDENCE, ev.ACTION_PLANNED, ev.GUARD_PASSED, ev.STEP_FINISHED],
                    forbidden=(ev.ACTION_APPLIED, ev.ACTION_CONFIRMED))
    assert [s.status for s in result.steps][:2] == ["ok", "would_change"]
    assert c.mutations == []
    assert result.actions[0].applied is False and result.actions[0].after == {"replicas": 1}


@pytest.mark.parametrize(("guard", "ready", "refusing"), [
    ("{floor: 2}", None, "floor"),
    ("{min_ready: 1}", [False, True, True], "min_ready"),
    ("{max_fraction: 0.5}", None, "max_fraction"),
], ids=["floor", "min-ready", "max-fraction"])
def test_refused_by_a_hard_guard(clock, guard, ready, refusing):
    c = cluster(ready=ready)
    e = engine(clock, metrics=oom_until_changed(c), cluster_=c, operator=Scripted([]))
    result = e.run(playbook(guard=guard))
    events = e.journal.events()
    assert refused_by(events) == [refusing]
    assert_sequence(events, [ev.ACTION_PLANNED, ev.GUARD_REFUSED, ev.STEP_FINISHED, ev.RUN_FINISHED],
                    forbidden=(ev.ACTION_APPLIED, ev.ACTION_CONFIRMED, ev.GUARD_PASSED))
    assert result.outcome == "refused" and c.mutations == []


def test_yes_never_lifts_a_hard_guard(clock):
    c = cluster()
    e = engine(clock, metrics=oom_until_changed(c), cluster_=c)  # AssumeYes
    assert e.run(playbook(guard="{floor: 2}")).outcome == "refused"
    assert c.mutations == []


SCALE_ONLY = """
name: scale-only
title: scale only
detect: {signal: oom_failures_per_min, above: 0}
params: {replicas: 2}
steps:
  - id: scale
    uses: k8s.scale
    with: {target: statefulset/vllm-server, namespace: llm, replicas: "{{ params.replicas }}"}
    guard: GUARD
"""


def test_cooldown_holds_across_two_incidents(clock, tmp_path):
    c = cluster()
    state = tmp_path / "state"
    first = engine(clock, cluster_=c, state=state, incident="inc-1")
    assert first.run(playbook(SCALE_ONLY, "{cooldown: 30m}")).outcome == "mitigated"  # 3 → 1, left there
    first.journal.close()
    clock.advance(5 * 60)
    second = engine(clock, cluster_=c, state=state, incident="inc-2")
    result = second.run(playbook(SCALE_ONLY, "{cooldown: 30m}"), params={"replicas": 1})
    events = second.journal.events()
    assert result.outcome == "refused" and refused_by(events) == ["cooldown"]
    refusal = next(x for x in events if x.type == ev.GUARD_REFUSED)
    assert "5m ago" in refusal.data["reason"] and "25m left" in refusal.data["reason"]
    clock.advance(30 * 60)
    third = engine(clock, cluster_=c, state=state, incident="inc-3")
    assert third.run(playbook(SCALE_ONLY, "{cooldown: 30m}"), params={"replicas": 1}).outcome == "mitigated"


def test_hourly_budget_counts_every_incident(clock, tmp_path):
    c = cluster()
    state = tmp_path / "state"
    # 3 → 2 leaves the workload short (mitigated); 2 → 3 is no reduction of the size that run began with.
    for number, (replicas, outcome) in enumerate([(2, "mitigated"), (3, "resolved")], start=1):
        run = engine(clock, cluster_=c, state=state, incident=f"inc-{number}")
        assert run.run(playbook(SCALE_ONLY, "{budget_per_hour: 2}"), params={"replicas": replicas}).outcome == outcome
        clock.advance(60)
    third = engine(clock, cluster_=c, state=state, incident="inc-3")
    result = third.run(playbook(SCALE_ONLY, "{budget_per_hour: 2}"), params={"replicas": 2})
    assert result.outcome == "refused" and refused_by(third.journal.events()) == ["budget"]
    assert History(state).applications("llm/statefulset/vllm-server", since=clock.now() - dt.timedelta(hours=1)) != []


def test_skipped_when_the_recheck_finds_the_condition_cleared(clock):
    readings = itertools.chain([4.0], itertools.repeat(0.0))
    c = cluster()
    e = engine(clock, metrics=FakeMetrics({"oom_failures_per_min": lambda at: next(readings)}), cluster_=c,
               operator=Scripted([]))
    result = e.run(playbook())
    events = e.journal.events()
    assert_sequence(events, [ev.ACTION_PLANNED, ev.ACTION_SKIPPED, ev.STEP_FINISHED, ev.VERIFY_PASSED],
                    forbidden=(ev.ACTION_APPLIED, ev.ACTION_CONFIRMED, ev.GUARD_REFUSED))
    assert "no longer holds" in next(x for x in events if x.type == ev.ACTION_SKIPPED).data["reason"]
    assert result.steps[1].status == "skipped" and c.mutations == []


def test_rolled_back_when_verification_fails(clock):
    c = cluster()
    start = clock.now()
    e = engine(clock, metrics=FakeMetrics({"oom_failures_per_min": 4.0}), cluster_=c)
    result = e.run(playbook())
    events = e.journal.events()
    assert_sequence(events, [ev.ACTION_APPLIED, ev.VERIFY_FAILED, ev.ROLLBACK_APPLIED, ev.ESCALATED, ev.RUN_FINISHED])
    rollback = next(x for x in events if x.type == ev.ROLLBACK_APPLIED)
    assert rollback.data["restored"] == {"replicas": 3} and rollback.data["from"] == {"replicas": 1}
    assert result.outcome == "rolled_back" and result.exit_code == 1
    assert c.get_workload("llm", "statefulset", "vllm-server").replicas == 3
    assert clock.now() - start == dt.timedelta(minutes=5)  # the whole window, in virtual time


def test_kill_switch_refuses_every_remediation(clock):
    c = cluster()
    e = engine(clock, metrics=oom_until_changed(c), cluster_=c, kill_switch=lambda: "RUNBOOK_KILL_SWITCH is set")
    result = e.run(playbook())
    assert result.outcome == "refused" and refused_by(e.journal.events()) == ["kill_switch"]
    assert c.mutations == []


def test_unreachable_metrics_never_reads_as_healthy(clock):
    text = helpers.PLAYBOOK.replace("with: {signal: oom_failures_per_min}\n",
                                    "with: {signal: oom_failures_per_min}\n    on_fail: continue\n")
    c = cluster()
    e = engine(clock, metrics=FakeMetrics(down=True), cluster_=c)
    result = e.run(playbook(text))
    events = e.journal.events()
    assert result.steps[0].status == "failed"
    assert refused_by(events) == ["recheck"]
    assert "refusing to act blind" in next(x for x in events if x.type == ev.GUARD_REFUSED).data["reason"]
    assert result.outcome == "refused" and c.mutations == []


def test_a_missing_template_value_is_an_error(clock):
    text = SCALE_ONLY.replace('"{{ params.replicas }}"', '"{{ alert.labels.replicas }}"')
    c = cluster()
    e = engine(clock, cluster_=c)
    result = e.run(playbook(text, "{}"))
    assert result.outcome == "failed"
    assert "replicas" in result.steps[0].summary and "missing" in result.steps[0].summary
    assert c.mutations == []


def test_a_whole_expression_keeps_its_type(clock):
    text = """
name: names
title: names
params: {namespace: llm}
steps:
  - id: pods
    uses: k8s.pods
    with: {workload: statefulset/vllm-server}
  - id: delete
    uses: k8s.delete_pod
    when: "steps['pods'].result.not_ready"
    with: {workload: statefulset/vllm-server, names: "{{ steps['pods'].result.not_ready }}"}
    guard: {max_fraction: 0.5}
"""
    c = cluster(ready=[True, False, True])
    e = engine(clock, cluster_=c)
    result = e.run(playbook(text))
    assert result.outcome == "resolved", result.reason
    assert c.deleted == ["vllm-server-1"]


def test_skipped_by_when_leaves_no_start_event(clock):
    text = SCALE_ONLY.replace("    uses: k8s.scale\n", "    uses: k8s.scale\n    when: \"false\"\n")
    e = engine(clock)
    result = e.run(playbook(text, "{}"))
    assert result.steps[0].status == "skipped"
    assert [x.type for x in e.journal.events()] == [ev.RUN_STARTED, ev.STEP_FINISHED, ev.EVIDENCE, ev.RUN_FINISHED]


def test_the_run_ends_with_each_signals_history(clock):
    c = cluster()
    fixed_at = clock.now() + dt.timedelta(seconds=30)
    e = engine(clock, metrics=FakeMetrics({"oom_failures_per_min": lambda at: 4.0 if at < fixed_at else 0.0}),
               cluster_=c)
    e.run(playbook())
    [history] = [x for x in e.journal.events() if x.type == ev.EVIDENCE and x.data["kind"] == "series"]
    assert history.data["signal"] == "oom_failures_per_min"
    points = history.data["series"][0]["points"]
    assert points[0][1] == 4.0 and points[-1][1] == 0.0  # before the fix, and after it


def test_a_damaged_journal_line_that_may_be_a_change_refuses_instead_of_skipping_the_cooldown(clock, tmp_path):
    c = cluster()
    state = tmp_path / "state"
    first = engine(clock, cluster_=c, state=state, incident="inc-1")
    assert first.run(playbook(SCALE_ONLY, "{cooldown: 30m}"), params={"replicas": 2}).outcome == "mitigated"
    path = state / "incidents" / "inc-1" / "journal.jsonl"
    lines = path.read_bytes().split(b"\n")
    applied = next(i for i, line in enumerate(lines) if b'"action.applied"' in line)
    lines[applied] = lines[applied][:len(lines[applied]) // 2 + 40]  # the record of the change, torn mid-line
    path.write_bytes(b"\n".join(lines))
    clock.advance(5 * 60)
    second = engine(clock, cluster_=c, state=state, incident="inc-2")
    result = second.run(playbook(SCALE_ONLY, "{cooldown: 30m}"), params={"replicas": 1})
    events = second.journal.events()
    assert result.outcome == "refused" and refused_by(events) == ["history"]
    reason = next(x for x in events if x.type == ev.GUARD_REFUSED).data["reason"]
    assert f"{path}:{applied + 1}: an unreadable line may record a change applied to llm/statefulset/vllm-server" \
        in reason and "refusing to act without the cooldown and budget" in reason
    assert [m[-1] for m in c.mutations] == [2]  # not scaled again inside the cooldown
