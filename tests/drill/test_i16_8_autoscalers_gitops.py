"""Autoscalers and GitOps in the simulated world (issue 16, item 8).

An HPA puts a scale-down outside its bounds back within its sync period; oom-surge's scale-down
holds it at the target in the same planned change (journaled, in the plan's diff) and a rollback
restores it; a KEDA ScaledObject is paused with its paused-replicas annotation instead; and a
set_arg on a workload Argo CD or Flux syncs is refused by the `gitops` guard, naming it.
"""

from __future__ import annotations

import importlib.resources

import pytest

from runbook.actions import load_builtin
from runbook.clock import FakeClock
from runbook.drill.run import bundled_playbook
from runbook.engine.operator import AssumeYes
from runbook.record.journal import MemoryJournal
from runbook.model import events as ev
from runbook.sim.scenario import load_scenario, parse_scenario
from runbook.sim.world import build_world
from tests.safety.test_f2_kills import Sim

HPA_LINE = ("  - {kind: hpa, name: vllm-server, namespace: llm, target: statefulset/vllm-server, min_replicas: 2,\n"
            "     max_replicas: 6, sync_seconds: 15s}\n")


def bundled_text(name: str) -> str:
    return (importlib.resources.files("runbook") / "scenarios" / f"{name}.yaml").read_text(encoding="utf-8")


def sim_of(scenario) -> Sim:
    clock = FakeClock(scenario.t0)
    return Sim(build_world(scenario, clock), clock, MemoryJournal(f"drill-i16-8-{scenario.name}"), scenario)


def test_an_hpa_undoes_a_scale_down_that_did_not_hold_it():
    s = sim_of(load_scenario("oom-surge-hpa"))
    cluster = s.world.cluster
    cluster.scale("llm", "statefulset", "vllm-server", 1)
    s.clock.advance(10)
    assert cluster.get_workload("llm", "statefulset", "vllm-server").replicas == 1  # not yet synced
    s.clock.advance(10)
    assert cluster.get_workload("llm", "statefulset", "vllm-server").replicas == 2  # its minReplicas
    scaled = [m for m in s.world.mutations if m["op"] == "autoscaler_scaled"]
    assert [(m["autoscaler"], m["before"], m["after"]) for m in scaled] == [("hpa/vllm-server", 1, 2)]


def test_oom_surge_holds_the_hpa_in_the_same_change_and_the_count_sticks():
    s = sim_of(load_scenario("oom-surge-hpa"))
    result = s.run(bundled_playbook("oom-surge", load_builtin()), AssumeYes("tester"))
    assert result.outcome == "resolved", result.reason
    ops = [m["op"] for m in s.world.mutations if m["op"] in ("set_autoscaler", "scale", "autoscaler_scaled")]
    # The hold, then the scale; the restore moves the hold with each replica and at the end gives it back.
    assert ops == ["set_autoscaler", "scale"] + ["set_autoscaler", "scale"] * 2 + ["set_autoscaler"]
    applied = s.applied("scale-down")
    assert applied["summary"] == "scale statefulset/vllm-server 3 → 1, holding hpa/vllm-server at 1"
    assert applied["before"] == {"replicas": 3, "hpa/vllm-server": "minReplicas=2 maxReplicas=6"}
    assert applied["after"] == {"replicas": 1, "hpa/vllm-server": "minReplicas=1 maxReplicas=1"}
    restored = s.applied("restore-capacity")
    assert restored["before"] == {"replicas": 1, "hpa/vllm-server": "minReplicas=1 maxReplicas=1"}
    assert restored["after"] == {"replicas": 3, "hpa/vllm-server": "minReplicas=2 maxReplicas=6"}
    assert restored["result"]["hpa/vllm-server"] == "minReplicas=2 maxReplicas=6"
    assert s.world.cluster.get_workload("llm", "statefulset", "vllm-server").replicas == 3
    [hpa] = s.world.cluster.autoscalers("llm", "statefulset", "vllm-server")
    assert (hpa.min_replicas, hpa.max_replicas) == (2, 6)  # given back as it was


def test_a_rollback_releases_the_hpa():
    text = bundled_text("oom-surge-hpa")
    text = text[:text.index("  - name: lower-max-model-len-stops-ooms")]  # the lower value does not help
    s = sim_of(parse_scenario(text, "oom-surge-hpa-no-fix"))
    result = s.run(bundled_playbook("oom-surge", load_builtin()), AssumeYes("tester"))
    assert result.outcome == "rolled_back"
    rolled = [e.data for e in s.journal.events() if e.type == ev.ROLLBACK_APPLIED and e.step == "scale-down"]
    assert rolled[0]["result"] == {"replicas": 3, "hpa/vllm-server": "minReplicas=2 maxReplicas=6"}
    [hpa] = s.world.cluster.autoscalers("llm", "statefulset", "vllm-server")
    assert (hpa.min_replicas, hpa.max_replicas) == (2, 6)


def test_a_scaledobject_is_paused_at_the_target():
    text = bundled_text("oom-surge-hpa").replace(HPA_LINE, (
        "  - {kind: scaledobject, name: vllm-server, namespace: llm, target: statefulset/vllm-server,\n"
        "     min_replicas: 1, max_replicas: 6}\n"))
    s = sim_of(parse_scenario(text, "oom-surge-keda"))
    result = s.run(bundled_playbook("oom-surge", load_builtin()), AssumeYes("tester"))
    assert result.outcome == "resolved", result.reason
    assert s.applied("scale-down")["after"]["scaledobject/vllm-server"].startswith("paused-replicas=1 ")
    # Paused at each size on the way back, then unpaused as it was.
    assert s.applied("restore-capacity")["after"]["scaledobject/vllm-server"].startswith("paused-replicas=none ")
    [so] = s.world.cluster.autoscalers("llm", "statefulset", "vllm-server")
    assert so.paused_replicas is None
    assert s.world.cluster.get_workload("llm", "statefulset", "vllm-server").replicas == 3


@pytest.mark.parametrize("metadata, named", [
    ("    annotations: {argocd.argoproj.io/tracking-id: 'llm-serving:apps/StatefulSet:llm/vllm-server'}\n",
     "Argo CD Application llm-serving"),
    ("    annotations: {argocd.argoproj.io/tracking-id: 'argocd-apps_llm:apps/StatefulSet:llm/vllm-server'}\n",
     "Argo CD Application argocd-apps/llm"),
])
def test_a_set_arg_on_a_workload_synced_by_argo_cd_is_refused_by_the_gitops_guard(metadata, named):
    text = bundled_text("oom-surge").replace("    labels: {app.kubernetes.io/name: vllm, model: llama-3-8b-instruct}\n",
                                             "    labels: {app.kubernetes.io/name: vllm, model: llama-3-8b-instruct}\n"
                                             + metadata)
    s = sim_of(parse_scenario(text, "oom-surge-argo"))
    result = s.run(bundled_playbook("oom-surge", load_builtin()), AssumeYes("tester"))
    assert result.outcome == "refused"
    refused = next(e.data for e in s.journal.events() if e.type == ev.GUARD_REFUSED)
    assert (refused["guard"], refused["action"]) == ("gitops", "k8s.set_arg")
    assert named in refused["reason"] and "Set --max-model-len 6635 in Git instead" in refused["reason"]
    assert not [m for m in s.world.mutations if m["op"] == "set_container_argv"]
