"""oom-surge on a StatefulSet an HPA scales, on the real stack (issue 16, item 8).

The scale-down holds the HPA at one replica in the same planned change, so the one replica left
stays one; a scale made by hand without holding it is undone by the HPA within its sync period.
"""

from __future__ import annotations

from tests.kubernetes.apiserver.resources import BY_KIND
from tests.realstack.harness import real_backends, run_in_process


def test_the_scale_down_holds_the_hpa_and_the_replica_count_sticks(played, laid_out, tmp_path):
    drill = played["oom-surge-hpa"]
    laid = laid_out(drill)
    since = len(laid.world.mutations)
    result, events = run_in_process(laid, drill, tmp_path / "state")
    assert result.outcome == "resolved", result.reason
    hpa = laid.projection.store.find(BY_KIND["HorizontalPodAutoscaler"], "llm", "vllm-server")["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (1, 1)
    assert laid.projection.store.find(BY_KIND["StatefulSet"], "llm", "vllm-server")["spec"]["replicas"] == 1
    ops = [m["op"] for m in laid.world.mutations[since:] if m["op"] in ("set_autoscaler", "scale", "autoscaler_scaled")]
    assert ops == ["set_autoscaler", "scale"]  # held first; never scaled back up
    applied = next(e for e in events if e.type == "action.applied" and e.step == "scale-down")
    assert applied.data["before"]["hpa/vllm-server"] == "minReplicas=2 maxReplicas=6"
    assert applied.data["after"]["hpa/vllm-server"] == "minReplicas=1 maxReplicas=1"


def test_a_scale_without_holding_the_hpa_is_undone_within_its_sync(played, laid_out, tmp_path):
    laid = laid_out(played["oom-surge-hpa"])
    world = real_backends(laid)
    try:
        world.cluster.scale("llm", "statefulset", "vllm-server", 1)
        assert world.cluster.get_workload("llm", "statefulset", "vllm-server").replicas == 1
        laid.clock.advance(20)  # past the HPA's 15 s sync
        assert world.cluster.get_workload("llm", "statefulset", "vllm-server").replicas == 2  # its minReplicas
    finally:
        world.cluster.close()
    assert [m["op"] for m in laid.world.mutations if m["op"] == "autoscaler_scaled"] == ["autoscaler_scaled"]
