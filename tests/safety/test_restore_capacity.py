"""Issue 34: after the fix, capacity comes back, a replica at a time, or the run says it did not.

`k8s.restore_scale` is a plan like any other (dry run, a changed target, its guards); each new replica
must be ready and the incident's signal quiet before the next; where the signal returns, that step
is undone. A run that leaves a workload short ends `mitigated` (exit 5) with the commands to finish.
"""

from __future__ import annotations

import pytest

from runbook.actions import load_builtin
from runbook.actions.base import StepContext
from runbook.backends.base import World
from runbook.clock import FakeClock, utc
from runbook.errors import InvalidInput, StalePlan
from runbook.model import events as ev
from runbook.sim.fakes import FakeMetrics
from tests.conftest import assert_sequence
from tests.engine.helpers import PLAYBOOK, cluster, engine, playbook

T0 = utc(2026, 3, 14, 3, 12, 7)
RESTORE = {"target": "statefulset/vllm-server", "before": {"replicas": 3}, "signal": "oom_failures_per_min",
           "below": 1, "for": "2m", "interval": "15s"}


def context(world: World, clock: FakeClock) -> StepContext:
    return StepContext(world=world, clock=clock, now=clock.now(), step_id="restore", params={"namespace": "llm"},
                       dry_run=False, timeout=30.0, record_evidence=lambda e: None)


def plan_of(world: World, clock: FakeClock, **params):
    spec = load_builtin().get("k8s.restore_scale")
    return spec.func(context(world, clock), spec.params.model_validate({**RESTORE, **params}))  # type: ignore[union-attr]


def scaled_down(replicas: int = 1):
    c = cluster()
    c.scale("llm", "statefulset", "vllm-server", replicas, expected_replicas=3)
    c.mutations.clear()
    return c


def test_the_plan_shows_the_way_back_and_its_dry_run_changes_nothing():
    c, clock = scaled_down(), FakeClock(T0)
    plan = plan_of(World(metrics=FakeMetrics({"oom_failures_per_min": 0}), cluster=c), clock)
    assert plan.summary == ("restore statefulset/vllm-server 1 → 3, one replica at a time, each ready and "
                            "oom_failures_per_min < 1 for 2m")
    assert (plan.before, plan.after) == ({"replicas": 1}, {"replicas": 3})
    assert plan.capacity is not None and (plan.capacity.before, plan.capacity.after) == (1, 3)
    assert plan.capacity.restore == ("kubectl -n llm scale statefulset/vllm-server --replicas=3",)
    assert plan.apply(True) == {} and c.mutations == []
    assert c.get_workload("llm", "statefulset", "vllm-server").replicas == 1


def test_each_replica_comes_back_only_once_the_signal_stayed_quiet():
    c, clock = scaled_down(), FakeClock(T0)
    plan = plan_of(World(metrics=FakeMetrics({"oom_failures_per_min": 0}), cluster=c), clock)
    done = plan.apply(False)
    assert c.mutations == [("scale", "statefulset/vllm-server", 1, 2), ("scale", "statefulset/vllm-server", 2, 3)]
    assert (done["replicas"], done["restored"], done["stopped"]) == (3, True, None)
    assert [s["replicas"] for s in done["steps"]] == [2, 3]
    assert (done["steps"][1]["at"] - done["steps"][0]["at"]).total_seconds() >= 120  # quiet for 2m at 2 first


def test_where_the_signal_returns_the_last_step_is_undone():
    c, clock = scaled_down(), FakeClock(T0)
    # OOM failures come back once three replicas serve again.
    ooms = FakeMetrics({"oom_failures_per_min": lambda at: 3.0 if c.get_workload(
        "llm", "statefulset", "vllm-server").replicas >= 3 else 0.0})
    done = plan_of(World(metrics=ooms, cluster=c), clock).apply(False)
    assert c.mutations == [("scale", "statefulset/vllm-server", 1, 2), ("scale", "statefulset/vllm-server", 2, 3),
                           ("scale", "statefulset/vllm-server", 3, 2)]
    assert (done["replicas"], done["restored"]) == (2, False)
    assert done["stopped"].startswith("at 3 replicas: oom_failures_per_min < 1 did not hold for 2m")
    assert done["stopped"].endswith("; back to 2")


def test_a_replica_that_never_comes_ready_is_taken_back():
    c, clock = scaled_down(), FakeClock(T0)
    real_scale = c.scale

    def scale_unready(namespace, kind, name, replicas, **kw):
        done = real_scale(namespace, kind, name, replicas, **kw)
        c.workloads[("llm", "statefulset", "vllm-server")].ready = [True] + [False] * (replicas - 1)
        return c.get_workload(namespace, kind, name)

    c.scale = scale_unready
    done = plan_of(World(metrics=FakeMetrics({"oom_failures_per_min": 0}), cluster=c), clock,
                   ready_within="2m").apply(False)
    assert (done["replicas"], done["restored"]) == (1, False)
    assert done["stopped"] == "at 2 replicas: 1/2 ready after 2m; back to 1"


def test_a_scale_by_someone_else_before_the_apply_is_a_stale_plan():
    c, clock = scaled_down(), FakeClock(T0)
    plan = plan_of(World(metrics=FakeMetrics({"oom_failures_per_min": 0}), cluster=c), clock)
    c.scale("llm", "statefulset", "vllm-server", 2)  # a person, between the plan and the apply
    with pytest.raises(StalePlan):
        plan.apply(False)
    assert c.get_workload("llm", "statefulset", "vllm-server").replicas == 2


def test_before_must_be_the_scale_steps_before():
    spec = load_builtin().get("k8s.restore_scale")
    with pytest.raises(Exception, match=r"steps\['scale-down'\].result.before"):
        spec.params.model_validate({**RESTORE, "before": {"pods": 3}})  # type: ignore[union-attr]


def test_an_autoscaler_shown_otherwise_than_a_scale_step_shows_it_is_refused():
    from runbook.actions.k8s_restore import _as_it_was
    from runbook.backends.base import Autoscaler

    hpa = Autoscaler("hpa", "vllm-server", "llm", "statefulset/vllm-server", 1, 1)
    assert _as_it_was(hpa, "minReplicas=2 maxReplicas=6").min_replicas == 2
    with pytest.raises(InvalidInput, match="not as a scale step shows a hpa"):
        _as_it_was(hpa, "min=2")


def test_a_playbook_that_scales_down_and_stops_there_ends_mitigated_with_the_way_back(clock):
    c = cluster()
    metrics = FakeMetrics({"oom_failures_per_min": lambda at: 0.0 if c.mutations else 4.0})
    e = engine(clock, metrics=metrics, cluster_=c)
    result = e.run(playbook(PLAYBOOK))
    assert (result.outcome, result.exit_code) == ("mitigated", 5)
    assert "llm/statefulset/vllm-server serves 1 of its 3 replicas" in result.reason
    events = e.journal.events()
    assert_sequence(events, [ev.ACTION_APPLIED, ev.VERIFY_PASSED, ev.ESCALATED, ev.RUN_FINISHED])
    [escalated] = [x for x in events if x.type == ev.ESCALATED]
    assert escalated.data["capacity"] == [{"target": "llm/statefulset/vllm-server", "before": 3, "now": 1,
                                           "restore": ["kubectl -n llm scale statefulset/vllm-server --replicas=3"]}]


def test_with_the_restore_the_same_run_is_resolved(clock):
    c = cluster()
    metrics = FakeMetrics({"oom_failures_per_min": lambda at: 0.0 if c.mutations else 4.0})
    text = PLAYBOOK + """  - id: restore-capacity
    uses: k8s.restore_scale
    with: {target: "{{ params.workload }}", before: "{{ steps['scale-down'].result.before }}",
           signal: oom_failures_per_min, below: 1, for: 1m}
    guard: {recheck: false}
"""
    e = engine(clock, metrics=metrics, cluster_=c)
    result = e.run(playbook(text))
    assert result.outcome == "resolved", result.reason
    assert c.get_workload("llm", "statefulset", "vllm-server").replicas == 3
    assert not [x for x in e.journal.events() if x.type == ev.ESCALATED]


def test_a_dry_run_shows_the_restore_from_where_the_scale_down_would_leave_it(tmp_path):
    from runbook.drill.run import run_drill
    from runbook.engine.operator import AssumeYes
    from runbook.record.journal import read_journal

    done = run_drill("oom-surge", state=tmp_path, operator=AssumeYes("tester"), dry_run=True)
    assert done.run.outcome == "dry_run"
    events = read_journal(done.journal).events
    planned = [e for e in events if e.type == ev.ACTION_PLANNED and e.step == "restore-capacity"]
    assert [(p.data["before"], p.data["after"]) for p in planned] == [({"replicas": 1}, {"replicas": 3})]
    assert not [e for e in events if e.type == ev.ACTION_APPLIED]
