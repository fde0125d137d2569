"""Finding 1: a change is applied from the view its plan and guards saw, or planned again, or not at all.

Another hand changes the workload while the operator is being asked (the window a 3am prompt
leaves open); the apply must notice, plan again, re-run the guards and ask again.
"""

from __future__ import annotations

import dataclasses

from runbook.backends.base import ContainerSpec
from runbook.engine.operator import Confirmation, Scripted
from runbook.errors import StalePlan
from runbook.record.locks import MemoryLocks
from runbook.model import events as ev
from runbook.sim.fakes import FakeMetrics
from tests.conftest import assert_sequence
from tests.engine.helpers import ARGS, cluster, engine, playbook
from tests.safety.books import SCALE, SET_ARG

class MeddlingOperator(Scripted):
    """Says yes, but each time, before answering, another hand changes the cluster."""

    def __init__(self, answers, meddle):
        super().__init__(answers, by="alice")
        self.meddle = meddle

    def confirm(self, request) -> Confirmation:
        self.meddle(len(self.asked))
        return super().confirm(request)


def workload(c):
    return c.workloads[("llm", "statefulset", "vllm-server")]


def test_f1_set_arg_never_writes_back_a_flag_changed_since_the_plan(clock):
    c = cluster()

    def someone_edits(times: int) -> None:
        if times == 0:
            w = workload(c)
            w.containers[0] = dataclasses.replace(w.containers[0], args=tuple(
                "--gpu-memory-utilization=0.8" if a.startswith("--port") else a for a in ARGS))
            w.version += 1

    e = engine(clock, cluster_=c, metrics=FakeMetrics({"oom_failures_per_min": 4}),
               operator=MeddlingOperator([True], someone_edits))
    result = e.run(playbook(SET_ARG, "{confirm: true}"))
    assert result.outcome == "resolved"
    args = workload(c).containers[0].args
    assert "--gpu-memory-utilization=0.8" in args and "--max-model-len=6635" in args
    planned = [x for x in e.journal.events() if x.type == ev.ACTION_PLANNED]
    assert len(planned) == 2 and "replanned_because" in planned[1].data
    # The diff did not change (7372 → 6635 both times): the operator's yes still answers it.
    assert_sequence(e.journal.events(), [ev.ACTION_PLANNED, ev.GUARD_PASSED, ev.ACTION_CONFIRMED,
                                         ev.ACTION_PLANNED, ev.GUARD_PASSED, ev.ACTION_APPLIED, ev.RUN_FINISHED])


def test_f1_scale_replans_from_the_new_count_and_asks_again(clock):
    c = cluster(replicas=3)

    def someone_scales(times: int) -> None:
        if times == 0:
            w = workload(c)
            w.replicas, w.ready, w.version = 6, [True] * 6, w.version + 1

    operator = MeddlingOperator([True, False], someone_scales)
    e = engine(clock, cluster_=c, metrics=FakeMetrics({"oom_failures_per_min": 4}), operator=operator)
    result = e.run(playbook(SCALE, "{confirm: true, min_ready: 1}"))
    # The second plan is 6 → 1, another diff: asked again, and declined, nothing is applied.
    assert [r.summary for r in operator.asked] == ["scale statefulset/vllm-server 3 → 1",
                                                   "scale statefulset/vllm-server 6 → 1"]
    assert result.outcome == "refused"
    assert workload(c).replicas == 6 and not c.mutations
    assert_sequence(e.journal.events(), [ev.ACTION_PLANNED, ev.ACTION_CONFIRMED, ev.ACTION_PLANNED,
                                         ev.GUARD_REFUSED, ev.RUN_FINISHED], forbidden=(ev.ACTION_APPLIED,))


def test_f1_replanned_scale_reruns_the_guards(clock):
    c = cluster(replicas=3, ready=[True, True, True])

    def ready_pods_go_away(times: int) -> None:
        if times == 0:
            w = workload(c)
            w.ready, w.version = [False, False, False], w.version + 1

    e = engine(clock, cluster_=c, metrics=FakeMetrics({"oom_failures_per_min": 4}),
               operator=MeddlingOperator([True, True], ready_pods_go_away))
    result = e.run(playbook(SCALE, "{confirm: true, min_ready: 1}"))
    assert result.outcome == "refused" and result.steps[0].guard == "min_ready"
    assert not c.mutations


def test_f1_a_target_that_keeps_changing_is_refused_as_stale_plan(clock):
    c = cluster()
    original = c.set_container_argv

    def churning(*args, **kwargs):
        # Another controller writes the workload between every read and write of ours.
        w = workload(c)
        w.containers[0] = ContainerSpec("vllm", w.containers[0].command, w.containers[0].args + ("--seed=1",))
        w.version += 1
        return original(*args, **kwargs)

    c.set_container_argv = churning
    e = engine(clock, cluster_=c, metrics=FakeMetrics({"oom_failures_per_min": 4}))
    result = e.run(playbook(SET_ARG, "{confirm: true}"))
    assert result.outcome == "refused" and result.steps[0].guard == "stale_plan"
    assert not any(m[0] == "set_argv" for m in c.mutations)
    planned = [x for x in e.journal.events() if x.type == ev.ACTION_PLANNED]
    assert len(planned) == 4  # the first plan and three re-plans
    assert e.journal.events()[-1].type == ev.RUN_FINISHED


def test_f1_history_guards_run_under_the_lock(clock):
    c = cluster()
    locks = MemoryLocks()
    seen_locked = []

    class WatchingHistory:
        def records(self, target, *, since, action=None, namespace=None):
            seen_locked.append(target in locks.held)
            return []

    e = engine(clock, cluster_=c, locks=locks, history=WatchingHistory(),
               metrics=FakeMetrics({"oom_failures_per_min": 4}))
    assert e.run(playbook(SCALE, "{cooldown: 30m, budget_per_hour: 3}")).outcome == "mitigated"  # 3 → 1, left there
    assert seen_locked and all(seen_locked)


def test_f1_a_lock_lost_before_the_apply_aborts_it(clock):
    c = cluster()
    locks = MemoryLocks()

    def another_takes_the_lock(times: int) -> None:
        locks.held["llm/statefulset/vllm-server"] = "bob's runbook"

    e = engine(clock, cluster_=c, locks=locks, metrics=FakeMetrics({"oom_failures_per_min": 4}),
               operator=MeddlingOperator([True], another_takes_the_lock))
    result = e.run(playbook(SCALE, "{confirm: true}"))
    assert result.outcome == "refused" and result.steps[0].guard == "lock"
    assert "bob's runbook" in result.reason and not c.mutations


def test_f1_rollback_leaves_a_later_hands_change_alone(clock):
    c = cluster(replicas=3)
    e = engine(clock, cluster_=c, metrics=FakeMetrics({"oom_failures_per_min": 4}))
    result = e.run(playbook(SCALE, "{confirm: false}"))
    applied = result.actions[0]
    w = workload(c)
    w.replicas, w.ready, w.version = 5, [True] * 5, w.version + 1  # someone scaled after us
    try:
        applied.rollback()
    except StalePlan as exc:
        assert "5 replicas" in str(exc)
    else:
        raise AssertionError("the rollback scaled over a later change")
    assert workload(c).replicas == 5
