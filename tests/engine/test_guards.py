"""The hard guards as pure functions: each refusal names its guard and says why."""

from __future__ import annotations

import datetime as dt

from runbook.actions.base import Plan
from runbook.clock import utc
from runbook.engine import guards
from runbook.record.journal import Application
from runbook.model.playbook import Guard

NOW = utc(2026, 3, 14, 3, 12, 7)


def plan(**facts) -> Plan:
    return Plan(target="llm/statefulset/vllm-server", summary="scale statefulset/vllm-server 3 → 1",
                before={"replicas": 3}, after={"replicas": 1}, apply=lambda dry: {}, **facts)


def applied(*times: dt.datetime) -> list[Application]:
    return [Application(f"inc-{n}", "k8s.scale", at) for n, at in enumerate(times)]


def verdicts(p: Plan, g: Guard, history=()) -> list[tuple[str, bool]]:
    return [(v.guard, v.allowed) for v in guards.hard_guards(
        p, g, action="k8s.scale", now=NOW, applications=lambda action, since: [a for a in history if a.at >= since])]


def test_floor_and_ceiling():
    assert ("floor", False) in verdicts(plan(value_after=1), Guard(floor=2, budget_per_hour=None))
    assert ("ceiling", False) in verdicts(plan(value_after=9), Guard(ceiling=8, budget_per_hour=None))
    assert verdicts(plan(value_after=2), Guard(floor=2, budget_per_hour=None)) == [("floor", True)]


def test_min_ready_counts_the_pods_left():
    assert ("min_ready", False) in verdicts(plan(ready_before=1, ready_after=0), Guard())
    assert ("min_ready", True) in verdicts(plan(ready_before=3, ready_after=1), Guard())


def test_max_fraction_of_pods_touched():
    assert ("max_fraction", False) in verdicts(plan(touched=3, total=4), Guard(max_fraction=0.5))
    assert ("max_fraction", True) in verdicts(plan(touched=2, total=4), Guard(max_fraction=0.5))


def test_cooldown_and_budget_read_the_history():
    recent = applied(NOW - dt.timedelta(minutes=10))
    assert ("cooldown", False) in verdicts(plan(), Guard(cooldown=1800), recent)
    assert ("cooldown", True) in verdicts(plan(), Guard(cooldown=300), recent)
    three = applied(*(NOW - dt.timedelta(minutes=m) for m in (50, 30, 10)))
    assert ("budget", False) in verdicts(plan(), Guard(budget_per_hour=3), three)
    assert ("budget", True) in verdicts(plan(), Guard(budget_per_hour=3), three[1:])


def test_a_cooldown_refusal_names_the_incident_whose_change_it_counts():
    history = applied(NOW - dt.timedelta(minutes=50), NOW - dt.timedelta(minutes=10))
    [refused] = [v for v in guards.hard_guards(plan(), Guard(cooldown=1800, budget_per_hour=None), action="k8s.scale",
                                               now=NOW, applications=lambda action, since: [a for a in history
                                                                                            if a.at >= since])
                 if not v.allowed]
    assert refused.reason == ("llm/statefulset/vllm-server was changed by this action 10m ago (incident inc-1); "
                              "cooldown 30m, 20m left")


def test_a_refusal_found_while_planning_comes_first():
    result = guards.hard_guards(plan(refusal=("pid", "PID 1 is init")), Guard(), action="x", now=NOW,
                                applications=lambda a, s: [])
    assert (result[0].guard, result[0].allowed, result[0].reason) == ("pid", False, "PID 1 is init")
