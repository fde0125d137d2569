"""Autoscalers and GitOps over real HTTPS to the test API server, through the official client
(issue 16, item 8): the HPA (autoscaling/v2) and KEDA ScaledObject (keda.sh/v1alpha1) that scale a
workload are found and held at a scale-down's target in the same planned change, restored by its
rollback, each change conditional on the version its plan read; a set_arg on a workload that
Argo CD or Flux syncs is refused, naming the controller and what to change in Git.
"""

from __future__ import annotations

import datetime as dt
import subprocess

import pytest

from runbook.actions import load_builtin
from runbook.actions.base import StepContext
from runbook.backends.base import World
from runbook.backends.kubernetes.autoscalers import PAUSED_REPLICAS
from runbook.clock import FakeClock
from runbook.errors import StalePlan
from tests.kubernetes.apiserver.resources import BY_KIND

STS = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "vllm-server"}


def seed_autoscalers(k8s) -> None:
    """An HPA on vllm-server, a ScaledObject on api-gateway (with the HPA KEDA makes for it), and an
    HPA of some other workload."""
    k8s.apply(
        {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
         "metadata": {"name": "vllm-server", "namespace": "llm"},
         "spec": {"scaleTargetRef": STS, "minReplicas": 2, "maxReplicas": 6, "metrics": [
             {"type": "Pods", "pods": {"metric": {"name": "vllm_num_requests_waiting"},
                                       "target": {"type": "AverageValue", "averageValue": "5"}}}]}},
        {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "gateway", "namespace": "llm"},
         "spec": {"scaleTargetRef": {"name": "api-gateway"}, "minReplicaCount": 1, "maxReplicaCount": 4,
                  "triggers": [{"type": "prometheus", "metadata": {"query": "sum(rate(x[1m]))", "threshold": "5"}}]}},
        {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
         "metadata": {"name": "keda-hpa-gateway", "namespace": "llm",
                      "ownerReferences": [{"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "name": "gateway",
                                           "uid": "0d9a4c3e-0000-4000-8000-000000000001", "controller": True}]},
         "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api-gateway"},
                  "minReplicas": 1, "maxReplicas": 4}},
        {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "other", "namespace": "llm"},
         "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "other"},
                  "minReplicas": 1, "maxReplicas": 3}},
    )


def plan_of(cluster, action: str, **params):
    spec = load_builtin().get(action)
    ctx = StepContext(world=World(cluster=cluster), clock=FakeClock(dt.datetime(2026, 3, 14, 3, 12, 7,
                                                                                tzinfo=dt.timezone.utc)),
                      now=dt.datetime(2026, 3, 14, 3, 12, 7, tzinfo=dt.timezone.utc), step_id="t",
                      params={"namespace": "llm"}, dry_run=False, timeout=30.0, record_evidence=lambda e: None)
    return spec.func(ctx, spec.params.model_validate(params))  # type: ignore[union-attr]


def test_the_autoscalers_of_a_workload_are_its_hpa_and_scaledobject_not_kedas_own_hpa(k8s, cluster):
    seed_autoscalers(k8s)
    [hpa] = cluster.autoscalers("llm", "statefulset", "vllm-server")
    assert (hpa.ref, hpa.target, hpa.min_replicas, hpa.max_replicas) == ("hpa/vllm-server", "statefulset/vllm-server", 2, 6)
    [keda] = cluster.autoscalers("llm", "deployment", "api-gateway")  # keda-hpa-gateway is the ScaledObject's
    assert (keda.ref, keda.paused_replicas, keda.min_replicas, keda.max_replicas) == ("scaledobject/gateway", None, 1, 4)


def test_a_scale_down_holds_the_hpa_at_its_target_and_the_rollback_restores_it(k8s, cluster):
    seed_autoscalers(k8s)
    plan = plan_of(cluster, "k8s.scale", target="statefulset/vllm-server", replicas=1)
    assert plan.diff() == ["- replicas: 3", "+ replicas: 1", "- hpa/vllm-server: minReplicas=2 maxReplicas=6",
                           "+ hpa/vllm-server: minReplicas=1 maxReplicas=1"]
    plan.apply(True)
    assert k8s.get("HorizontalPodAutoscaler", "llm", "vllm-server")["spec"]["minReplicas"] == 2
    done = plan.apply(False)
    assert done == {"replicas": 1, "hpa/vllm-server": "minReplicas=1 maxReplicas=1"}
    hpa = k8s.get("HorizontalPodAutoscaler", "llm", "vllm-server")["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"], hpa["metrics"][0]["type"]) == (1, 1, "Pods")  # the rest kept
    assert k8s.get("StatefulSet", "llm", "vllm-server")["spec"]["replicas"] == 1
    writes = [(s.resource, s.dry_run) for s in k8s.seen if s.method == "PATCH"]
    assert writes == [("horizontalpodautoscalers", True), ("statefulsets/scale", True),
                      ("horizontalpodautoscalers", False), ("statefulsets/scale", False)]  # the HPA first
    assert plan.rollback() == {"replicas": 3, "hpa/vllm-server": "minReplicas=2 maxReplicas=6"}
    hpa = k8s.get("HorizontalPodAutoscaler", "llm", "vllm-server")["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 6)
    assert k8s.get("StatefulSet", "llm", "vllm-server")["spec"]["replicas"] == 3


def test_an_hpa_changed_since_the_plan_is_a_stale_plan_and_nothing_is_applied(k8s, cluster):
    seed_autoscalers(k8s)
    plan = plan_of(cluster, "k8s.scale", target="statefulset/vllm-server", replicas=1)
    hpa = k8s.get("HorizontalPodAutoscaler", "llm", "vllm-server")
    hpa["spec"]["maxReplicas"] = 8  # someone widened it meanwhile
    k8s.state.store.update(BY_KIND["HorizontalPodAutoscaler"], "llm", "vllm-server", hpa)
    with pytest.raises(StalePlan):
        plan.apply(False)
    assert k8s.get("StatefulSet", "llm", "vllm-server")["spec"]["replicas"] == 3
    assert k8s.get("HorizontalPodAutoscaler", "llm", "vllm-server")["spec"]["minReplicas"] == 2


def test_a_scale_that_fails_after_the_hpa_was_held_puts_the_hpa_back(k8s, cluster):
    seed_autoscalers(k8s)
    plan = plan_of(cluster, "k8s.scale", target="statefulset/vllm-server", replicas=1)
    sts = k8s.get("StatefulSet", "llm", "vllm-server")
    sts["spec"]["replicas"] = 4  # scaled by another hand after the plan: the scale is refused
    k8s.state.store.update(BY_KIND["StatefulSet"], "llm", "vllm-server", sts)
    with pytest.raises(StalePlan):
        plan.apply(False)
    hpa = k8s.get("HorizontalPodAutoscaler", "llm", "vllm-server")["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 6)  # all or nothing


def test_a_scaledobject_is_paused_at_the_target_and_unpaused_by_the_rollback(k8s, cluster):
    seed_autoscalers(k8s)
    plan = plan_of(cluster, "k8s.scale", target="deployment/api-gateway", replicas=1)
    assert "+ scaledobject/gateway: paused-replicas=1 (minReplicaCount=1 maxReplicaCount=4)" in plan.diff()
    plan.apply(False)
    meta = k8s.get("ScaledObject", "llm", "gateway")["metadata"]
    assert meta["annotations"][PAUSED_REPLICAS] == "1"
    assert k8s.get("HorizontalPodAutoscaler", "llm", "keda-hpa-gateway")["spec"]["minReplicas"] == 1  # untouched
    plan.rollback()
    assert PAUSED_REPLICAS not in (k8s.get("ScaledObject", "llm", "gateway")["metadata"].get("annotations") or {})
    assert k8s.get("Deployment", "llm", "api-gateway")["spec"]["replicas"] == 2


def test_a_cluster_without_keda_has_no_scaledobjects_and_an_hpa_cannot_hold_zero(k8s, cluster):
    plan = plan_of(cluster, "k8s.scale", target="statefulset/vllm-server", replicas=1)
    assert plan.before == {"replicas": 3} and plan.refusal is None
    seed_autoscalers(k8s)
    plan = plan_of(cluster, "k8s.scale", target="statefulset/vllm-server", replicas=0)
    assert plan.refusal is not None and plan.refusal[0] == "autoscaler" and "hpa/vllm-server" in plan.refusal[1]


@pytest.mark.parametrize("metadata, controller", [
    ({"annotations": {"argocd.argoproj.io/tracking-id": "llm-serving:apps/StatefulSet:llm/vllm-server"}},
     "Argo CD Application llm-serving"),
    ({"labels": {"kustomize.toolkit.fluxcd.io/name": "vllm", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}},
     "Flux Kustomization flux-system/vllm"),
])
def test_a_set_arg_on_a_workload_synced_from_git_is_refused_naming_the_controller(k8s, cluster, metadata,
                                                                                   controller):
    sts = k8s.get("StatefulSet", "llm", "vllm-server")
    sts["metadata"] |= metadata
    k8s.state.store.update(BY_KIND["StatefulSet"], "llm", "vllm-server", sts)
    plan = plan_of(cluster, "k8s.set_arg", target="statefulset/vllm-server", container="vllm", flag="--max-model-len",
                   factor=0.9, floor=2048)
    guard, reason = plan.refusal
    assert guard == "gitops" and controller in reason
    assert "would be reverted at its next sync" in reason and "--max-model-len 6635 in Git" in reason
    allowed = plan_of(cluster, "k8s.set_arg", target="statefulset/vllm-server", container="vllm",
                      flag="--max-model-len", factor=0.9, floor=2048, gitops="allow")
    assert allowed.refusal is None


def test_kubectl_reads_the_hpa_and_scaledobject(k8s, kubectl, kubeconfig, tmp_path):
    seed_autoscalers(k8s)

    def run(*args: str) -> str:
        done = subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), "--context", "runbook-test", "-n", "llm",
                               "--request-timeout=20s", *args], capture_output=True, text=True, timeout=60,
                              env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
        assert done.returncode == 0, done.stderr
        return done.stdout

    rows = {line.split()[0]: line.split() for line in run("get", "hpa").splitlines()[1:]}
    assert rows["vllm-server"][1:4] == ["StatefulSet/vllm-server", "2", "6"]
    assert "gateway" in run("get", "scaledobjects.keda.sh", "-o", "name")
