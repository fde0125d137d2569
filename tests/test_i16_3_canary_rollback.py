"""canary-rollback (issue 16, item 3; SOP §7) against its drills and variants of them, read back
from the journal and the simulated world's mutations."""

from __future__ import annotations

from pathlib import Path

import pytest

from runbook.record import journal as journals
from runbook.actions import load_builtin
from runbook.clock import FakeClock
from runbook.drill.run import bundled_playbook, run_drill
from runbook.engine.operator import AssumeYes
from runbook.engine.runner import Engine
from runbook.errors import StalePlan
from runbook.record.locks import MemoryLocks
from runbook.model import events as ev
from runbook.sim.scenario import load_scenario
from runbook.sim.world import build_world
from tests.realstack.timeline import alert_of

STABLE = {"app": "vllm", "version": "v1"}


def run_on_sim(scenario, state: Path):
    """The playbook on `scenario`'s simulated world, as `runbook drill --yes` runs it."""
    registry = load_builtin()
    playbook = bundled_playbook(scenario.playbook, registry)
    clock = FakeClock(scenario.t0)
    world = build_world(scenario, clock)
    journal = journals.JsonlJournal.for_incident(state, journals.new_incident_id(scenario.t0, playbook.name, drill=True),
                                                 journals.new_run_id())
    engine = Engine(registry=registry, world=world.world_backends(), clock=clock, journal=journal,
                    operator=AssumeYes("test"), locks=MemoryLocks(), history=journals.History(None, extra=journal),
                    holder="test")
    try:
        result = engine.run(playbook, alert=alert_of(scenario), params=dict(scenario.params))
    finally:
        journal.close()
    return result, journals.read_journal(journal.path).events, world


def assert_sequence(events, expected: list, *, forbidden: tuple[str, ...] = ()) -> None:
    """`expected` (an event type, or (type, step)) occur in this order, others between; none of `forbidden`."""
    seen = [(e.type, e.step) for e in events]
    position = 0
    for wanted in expected:
        match = (lambda t: t == wanted) if isinstance(wanted, tuple) else (lambda t: t[0] == wanted)
        found = next((i for i in range(position, len(seen)) if match(seen[i])), None)
        assert found is not None, f"{wanted!r} not found in order after position {position}: {seen}"
        position = found + 1
    present = [t for t in seen if t[0] in forbidden]
    assert not present, f"forbidden events {present} in {seen}"


def _changes(world) -> list[tuple]:
    return [(m["op"], m.get("route") or m.get("workload"), m.get("after")) for m in world.mutations
            if m["op"] in ("set_route", "scale")]


def test_the_drill_routes_back_then_drains_then_retires_the_canary(tmp_path):
    done = run_drill("canary-rollback", state=tmp_path, operator=AssumeYes("test"))
    assert done.run.outcome == "resolved" == done.scenario.expect
    events = journals.read_journal(done.journal).events
    assert_sequence(events, [
        (ev.STEP_FINISHED, "canary-ooms"), (ev.STEP_FINISHED, "canary-throughput"), (ev.STEP_FINISHED, "canary-p95"),
        (ev.ACTION_PLANNED, "route-back"), (ev.GUARD_PASSED, "route-back"), (ev.ACTION_APPLIED, "route-back"),
        (ev.STEP_FINISHED, "route-on-stable"), (ev.VERIFY_PASSED, "canary-drained"),
        (ev.ACTION_PLANNED, "retire-canary"), (ev.ACTION_APPLIED, "retire-canary"),
        (ev.VERIFY_PASSED, "stable-carries"), ev.RUN_FINISHED], forbidden=(ev.GUARD_REFUSED, ev.ROLLBACK_APPLIED))
    applied = {e.step: e for e in events if e.type == ev.ACTION_APPLIED}
    assert applied["route-back"].data["before"]["selector"] == {"app": "vllm"}
    assert applied["route-back"].data["after"]["selector"] == STABLE
    assert applied["retire-canary"].data["after"] == {"replicas": 0}


def test_the_world_sees_the_route_move_before_the_canary_goes_and_the_stable_pods_stay(tmp_path):
    result, _, world = run_on_sim(load_scenario("canary-rollback"), tmp_path)
    assert result.outcome == "resolved"
    assert _changes(world) == [("set_route", "service/vllm", {"selector": STABLE}),
                               ("scale", "deployment/vllm-v2", 0)]
    stable = world.cluster.list_pods("llm", STABLE)
    assert len(stable) == 3 and all(p.ready for p in stable)
    assert world.cluster.get_route("llm", "service", "vllm").selector == STABLE


def test_with_no_stable_pod_ready_the_route_is_not_moved_and_nothing_changes(tmp_path):
    result, events, world = run_on_sim(load_scenario("canary-rollback-stable-unready"), tmp_path)
    assert result.outcome == "refused"
    refused = [e for e in events if e.type == ev.GUARD_REFUSED]
    assert [(e.step, e.data["guard"]) for e in refused] == [("route-back", "min_ready")]
    assert_sequence(events, [(ev.ACTION_PLANNED, "route-back"), (ev.GUARD_REFUSED, "route-back"), ev.ESCALATED,
                             ev.RUN_FINISHED], forbidden=(ev.ACTION_APPLIED,))
    assert _changes(world) == []


def test_a_canary_that_keeps_its_traffic_is_rolled_back_route_and_all(tmp_path):
    """Something else sends the canary requests (no reaction drains it): the drain check fails, the
    route is restored to what it was, and the canary was never scaled."""
    scenario = load_scenario("canary-rollback").model_copy(update={"reactions": []})
    result, events, world = run_on_sim(scenario, tmp_path)
    assert result.outcome == "rolled_back"
    assert_sequence(events, [(ev.ACTION_APPLIED, "route-back"), (ev.VERIFY_FAILED, "canary-drained"),
                             (ev.ROLLBACK_APPLIED, "route-back"), ev.ESCALATED, ev.RUN_FINISHED])
    assert _changes(world) == [("set_route", "service/vllm", {"selector": STABLE}),
                               ("set_route", "service/vllm", {"selector": {"app": "vllm"}})]
    assert not any(e.step == "retire-canary" and e.type == ev.ACTION_APPLIED for e in events)


def test_a_canary_no_worse_than_stable_is_left_alone(tmp_path):
    scenario = load_scenario("canary-rollback")
    calm = []
    for signal in scenario.signals:
        if signal.name in ("oom_failures_per_min", "decode_tokens_per_sec", "e2e_latency_p95_seconds"):
            series = [s.model_copy(update={"points": [(-2 * 86400.0, 0.0 if signal.name == "oom_failures_per_min"
                                                       else 2100.0 if signal.name == "decode_tokens_per_sec" else 6.0)]})
                      for s in signal.series]
            signal = signal.model_copy(update={"series": series})
        calm.append(signal)
    result, events, world = run_on_sim(scenario.model_copy(update={"signals": calm}), tmp_path)
    assert _changes(world) == []
    assert not any(e.type == ev.ACTION_APPLIED for e in events)
    assert {e.step for e in events if e.type == ev.ACTION_PLANNED} == set()


def test_the_sim_route_refuses_a_change_planned_from_another_version(tmp_path):
    scenario = load_scenario("canary-rollback")
    world = build_world(scenario, FakeClock(scenario.t0))
    route = world.cluster.get_route("llm", "service", "vllm")
    world.cluster.set_route("llm", "service", "vllm", selector={"app": "vllm", "version": "v2"})
    with pytest.raises(StalePlan):
        world.cluster.set_route("llm", "service", "vllm", selector=STABLE, resource_version=route.resource_version)
    with pytest.raises(StalePlan):
        world.cluster.set_route("llm", "service", "vllm", selector=STABLE, expected=route)
    assert world.cluster.get_route("llm", "service", "vllm").selector == {"app": "vllm", "version": "v2"}


def _variant(route: dict, params: dict, trigger: dict):
    """canary-rollback with another kind of route in front of the two versions."""
    import importlib.resources

    import yaml

    from runbook.sim.scenario import Scenario

    text = (importlib.resources.files("runbook") / "scenarios" / "canary-rollback.yaml").read_text(encoding="utf-8")
    doc = yaml.safe_load(text)
    doc["routes"] = [route]
    doc["params"] = params
    reaction = doc["reactions"][0]
    reaction.pop(True, None)  # YAML 1.1 reads the key `on:` as true
    reaction["on"] = {"route_changed": trigger}
    return Scenario.model_validate(doc)


@pytest.mark.parametrize(("route", "params", "trigger", "after"), [
    ({"kind": "ingress", "name": "vllm-canary", "namespace": "llm", "weights": {"vllm-v2": 20}},
     {"route": "ingress/vllm-canary"}, {"route": "ingress/vllm-canary", "weights": {"vllm-v2": 0}},
     {"weights": {"vllm-v2": 0}}),
    ({"kind": "httproute", "name": "vllm", "namespace": "llm", "weights": {"vllm-v1": 80, "vllm-v2": 20}},
     {"route": "httproute/vllm"}, {"route": "httproute/vllm", "weights": {"vllm-v2": 0, "vllm-v1": 100}},
     {"weights": {"vllm-v1": 100, "vllm-v2": 0}}),
], ids=["ingress-nginx-canary", "httproute"])
def test_an_ingress_canary_or_an_httproute_is_weighted_back_to_stable(route, params, trigger, after, tmp_path):
    result, events, world = run_on_sim(_variant(route, params, trigger), tmp_path)
    assert result.outcome == "resolved", result.reason
    assert _changes(world) == [("set_route", params["route"], after), ("scale", "deployment/vllm-v2", 0)]
    checked = next(e for e in events if e.type == ev.STEP_FINISHED and e.step == "route-on-stable")
    assert checked.data["status"] == "ok"


def test_a_rollback_puts_the_httproute_weights_back_as_they_were(tmp_path):
    route = {"kind": "httproute", "name": "vllm", "namespace": "llm", "weights": {"vllm-v1": 80, "vllm-v2": 20}}
    # A trigger that never fires: the canary keeps its requests, the drain check fails.
    scenario = _variant(route, {"route": "httproute/vllm"}, {"route": "httproute/other"})
    result, _, world = run_on_sim(scenario, tmp_path)
    assert result.outcome == "rolled_back"
    assert _changes(world) == [("set_route", "httproute/vllm", {"weights": {"vllm-v1": 100, "vllm-v2": 0}}),
                               ("set_route", "httproute/vllm", {"weights": {"vllm-v1": 80, "vllm-v2": 20}})]


def test_when_stable_does_not_take_the_load_the_canary_is_scaled_back_and_the_route_restored(tmp_path):
    """The canary drains, but the stable version's requests stay where they were (clients gave up):
    the last check fails, and the rollback undoes both changes, the later one first."""
    scenario = load_scenario("canary-rollback")
    reaction = scenario.reactions[0]
    kept = [e for e in reaction.effects if not (e.signal == "requests_per_min" and e.labels.get("version") == "v1")]
    scenario = scenario.model_copy(update={"reactions": [reaction.model_copy(update={"effects": kept})]})
    result, events, world = run_on_sim(scenario, tmp_path)
    assert result.outcome == "rolled_back"
    assert_sequence(events, [(ev.ACTION_APPLIED, "route-back"), (ev.ACTION_APPLIED, "retire-canary"),
                             (ev.VERIFY_FAILED, "stable-carries"), ev.ROLLBACK_APPLIED, ev.ROLLBACK_APPLIED,
                             ev.ESCALATED, ev.RUN_FINISHED], forbidden=(ev.ROLLBACK_FAILED,))
    assert _changes(world) == [("set_route", "service/vllm", {"selector": STABLE}), ("scale", "deployment/vllm-v2", 0),
                               ("scale", "deployment/vllm-v2", 1),
                               ("set_route", "service/vllm", {"selector": {"app": "vllm"}})]


def test_a_p95_regression_alone_rolls_the_canary_back(tmp_path):
    """No OOM failure at all (the detect condition is quiet): the latency comparison is reason enough."""
    scenario = load_scenario("canary-rollback")
    signals = []
    for signal in scenario.signals:
        if signal.name in ("oom_failures_per_min", "decode_tokens_per_sec"):
            value = 0.0 if signal.name == "oom_failures_per_min" else 2100.0
            signal = signal.model_copy(update={"series": [s.model_copy(update={"points": [(-2 * 86400.0, value)]})
                                                          for s in signal.series]})
        signals.append(signal)
    result, events, world = run_on_sim(scenario.model_copy(update={"signals": signals}), tmp_path)
    assert result.outcome == "resolved"
    worse = {e.step: "; worse: " in e.data["summary"] for e in events if e.type == ev.STEP_FINISHED
             and e.step in ("canary-ooms", "canary-throughput", "canary-p95")}
    assert worse == {"canary-ooms": False, "canary-throughput": False, "canary-p95": True}
    assert _changes(world)[0] == ("set_route", "service/vllm", {"selector": STABLE})
