"""k8s.scale and k8s.set_arg against a real HPA controller and KEDA's CRD: the HPA and ScaledObject of a
workload are found, held at the target in the same change and given back by its rollback; GitOps refuses."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest

from runbook.actions import load_builtin
from runbook.actions.base import StepContext
from runbook.backends.base import World
from runbook.backends.kubernetes.autoscalers import PAUSED_REPLICAS
from runbook.clock import FakeClock
from runbook.errors import StalePlan
from tests.controlplane import objects
from tests.controlplane.identity import connect, runbook_kubeconfig, runbook_user
from tests.controlplane.plane import wait_for

NOW = dt.datetime(2026, 3, 14, 3, 12, 7, tzinfo=dt.timezone.utc)
HPA_SYNC = 1.0  # --horizontal-pod-autoscaler-sync-period of the test controller-manager


@pytest.fixture
def cluster(plane, namespace, tmp_path):
    plane.apply(objects.vllm_statefulset(namespace, replicas=3),
                objects.hpa(namespace, "statefulset/vllm-server", minimum=3, maximum=5))
    objects.settled(plane, namespace, "statefulset", "vllm-server")
    made = connect(runbook_kubeconfig(plane, namespace, tmp_path / "kubeconfig"))
    yield made
    made.close()


def plan_of(cluster, namespace: str, action: str, **params):
    spec = load_builtin().get(action)
    ctx = StepContext(world=World(cluster=cluster), clock=FakeClock(NOW), now=NOW, step_id="t",
                      params={"namespace": namespace}, dry_run=False, timeout=30.0, record_evidence=lambda e: None)
    return spec.func(ctx, spec.params.model_validate(params))  # type: ignore[union-attr]


def replicas(plane, namespace) -> int:
    return plane.get("statefulset", "vllm-server", namespace=namespace)["spec"]["replicas"]


def hpa_seen(plane, namespace, replicas: int) -> dict:
    """The HPA once its controller has synced it at `replicas` (an HPA has no generation to compare;
    its metric has no source here, so it never computes a desired count, but it reads the scale)."""
    def check():
        obj = plane.get("hpa", "vllm-server", namespace=namespace)
        return obj if (obj.get("status") or {}).get("currentReplicas") == replicas else None

    return wait_for("the HPA controller reads the HPA", check, timeout=30)


def runbook_patches(plane, namespace) -> list[tuple[str, bool, int]]:
    """runbook's patches in `namespace` as the audit log keeps them, in order: (resource[/subresource],
    dry run, the apiserver's answer)."""
    user = runbook_user(namespace)
    return [("/".join(filter(None, (e["objectRef"]["resource"], e["objectRef"].get("subresource")))),
             "dryRun=All" in e["requestURI"], e["responseStatus"]["code"])
            for e in plane.audit(namespace) if e["verb"] == "patch" and e["user"]["username"] == user]


def test_a_bare_scale_down_is_undone_by_the_hpa(plane, namespace, cluster):
    cluster.scale(namespace, "statefulset", "vllm-server", 1, expected_replicas=3)
    wait_for("the HPA scales back to its minReplicas", lambda: replicas(plane, namespace) == 3, timeout=30)
    events = plane.kubectl("get", "events", "-n", namespace, "--field-selector",
                           "involvedObject.kind=HorizontalPodAutoscaler", "-o", "jsonpath={.items[*].message}").stdout
    assert "below Spec.MinReplicas" in events


def test_the_scale_holds_the_hpa_so_the_scale_down_stays_and_the_rollback_gives_it_back(plane, namespace, cluster):
    plan = plan_of(cluster, namespace, "k8s.scale", target="statefulset/vllm-server", replicas=1)
    assert plan.before == {"replicas": 3, "hpa/vllm-server": "minReplicas=3 maxReplicas=5"}
    assert plan.diff() == ["- replicas: 3", "+ replicas: 1", "- hpa/vllm-server: minReplicas=3 maxReplicas=5",
                           "+ hpa/vllm-server: minReplicas=1 maxReplicas=1"]
    plan.apply(True)
    assert plane.get("hpa", "vllm-server", namespace=namespace)["spec"]["minReplicas"] == 3  # the dry run stored nothing
    assert replicas(plane, namespace) == 3
    applied = plan.apply(False)
    assert applied == {"replicas": 1, "hpa/vllm-server": "minReplicas=1 maxReplicas=1"}
    hpa = hpa_seen(plane, namespace, 1)
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 1)
    assert hpa["spec"]["metrics"][0]["type"] == "Pods"  # the rest of the HPA kept
    # The HPA is held first, each write dry-run before it is made for real. A patch that met the HPA
    # controller's status write is answered 409 and sent again at the new version: one change.
    patches = runbook_patches(plane, namespace)
    assert [p for p in patches if p[2] < 300] == [("horizontalpodautoscalers", True, 200),
                                                  ("statefulsets/scale", True, 200),
                                                  ("horizontalpodautoscalers", False, 200),
                                                  ("statefulsets/scale", False, 200)], patches
    assert {p[2] for p in patches if p[2] >= 300} <= {409}, patches
    time.sleep(3 * HPA_SYNC)  # three of the controller's syncs: it had every chance to scale back
    assert replicas(plane, namespace) == 1
    objects.settled(plane, namespace, "statefulset", "vllm-server")

    assert plan.rollback() == {"replicas": 3, "hpa/vllm-server": "minReplicas=3 maxReplicas=5"}
    hpa = plane.get("hpa", "vllm-server", namespace=namespace)
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 5)
    # The HPA, still held while the rollback scales, may undo that scale-up once; given back, it owns the 3.
    wait_for("the workload is back at 3", lambda: replicas(plane, namespace) == 3, timeout=30)
    objects.settled(plane, namespace, "statefulset", "vllm-server")


def scaledobject(namespace: str) -> dict:
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "gateway", "namespace": namespace},
            "spec": {"scaleTargetRef": {"name": "api-gateway"}, "minReplicaCount": 1, "maxReplicaCount": 4,
                     "triggers": [{"type": "prometheus", "metadata": {
                         "serverAddress": "http://prometheus-k8s.monitoring.svc:9090",
                         "query": "sum(rate(x[1m]))", "threshold": "5"}}]}}


@pytest.fixture
def gateway(plane, namespace):
    """api-gateway scaled by a ScaledObject, with the HPA KEDA makes for it (owned by the ScaledObject
    through its real uid, or the garbage collector deletes it), and an HPA of some other workload."""
    plane.apply(objects.deployment(namespace, "api-gateway", replicas=2), scaledobject(namespace))
    uid = plane.get("scaledobject", "gateway", namespace=namespace)["metadata"]["uid"]
    keda_hpa = objects.hpa(namespace, "deployment/api-gateway", minimum=1, maximum=4, name="keda-hpa-gateway")
    keda_hpa["metadata"]["ownerReferences"] = [{"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
                                                "name": "gateway", "uid": uid, "controller": True}]
    plane.apply(keda_hpa, objects.hpa(namespace, "deployment/other", minimum=1, maximum=3, name="other"))
    objects.settled(plane, namespace, "deployment", "api-gateway")


def test_the_autoscalers_of_a_workload_are_its_hpa_and_scaledobject_not_kedas_own_hpa(plane, namespace, cluster,
                                                                                      gateway):
    [hpa] = cluster.autoscalers(namespace, "statefulset", "vllm-server")
    assert (hpa.ref, hpa.target, hpa.min_replicas, hpa.max_replicas) == ("hpa/vllm-server", "statefulset/vllm-server",
                                                                         3, 5)
    [keda] = cluster.autoscalers(namespace, "deployment", "api-gateway")  # keda-hpa-gateway is the ScaledObject's
    assert (keda.ref, keda.paused_replicas, keda.min_replicas, keda.max_replicas) == ("scaledobject/gateway", None, 1, 4)
    assert plane.get("hpa", "keda-hpa-gateway", namespace=namespace) is not None  # still there: its owner is real


def test_an_hpa_changed_since_the_plan_is_a_stale_plan_and_nothing_is_applied(plane, namespace, cluster):
    plan = plan_of(cluster, namespace, "k8s.scale", target="statefulset/vllm-server", replicas=1)
    plane.kubectl("patch", "hpa", "vllm-server", "-n", namespace, "--type=merge",
                  "-p", '{"spec": {"maxReplicas": 8}}')  # someone widened it meanwhile
    with pytest.raises(StalePlan):
        plan.apply(False)
    hpa = plane.get("hpa", "vllm-server", namespace=namespace)["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (3, 8)
    assert replicas(plane, namespace) == 3
    # the apiserver refused the HPA's patch on its resourceVersion; the scale was never sent
    assert runbook_patches(plane, namespace) == [("horizontalpodautoscalers", False, 409)]


def test_the_hpa_controllers_status_writes_between_plan_and_apply_are_not_a_persons_edit(plane, namespace, cluster):
    """The HPA controller writes the HPA's status (and so its resourceVersion) as the replicas move:
    a hold planned from the HPA's spec before is still the plan, and lands as planned."""
    plan = plan_of(cluster, namespace, "k8s.scale", target="statefulset/vllm-server", replicas=1)
    planned = plane.get("hpa", "vllm-server", namespace=namespace)["metadata"]["resourceVersion"]
    # Someone scales up and back by hand: the workload is at the planned 3 again, the HPA's spec untouched.
    plane.kubectl("scale", "statefulset", "vllm-server", "-n", namespace, "--replicas=4")
    hpa_seen(plane, namespace, 4)
    plane.kubectl("scale", "statefulset", "vllm-server", "-n", namespace, "--replicas=3")
    hpa = hpa_seen(plane, namespace, 3)
    assert hpa["metadata"]["resourceVersion"] != planned and (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 5)
    objects.settled(plane, namespace, "statefulset", "vllm-server")
    assert plan.apply(False) == {"replicas": 1, "hpa/vllm-server": "minReplicas=1 maxReplicas=1"}
    hpa = plane.get("hpa", "vllm-server", namespace=namespace)["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (1, 1)
    assert replicas(plane, namespace) == 1


def test_a_scale_that_fails_after_the_hpa_was_held_puts_the_hpa_back(plane, namespace, cluster):
    plan = plan_of(cluster, namespace, "k8s.scale", target="statefulset/vllm-server", replicas=1)
    plane.kubectl("scale", "statefulset", "vllm-server", "-n", namespace, "--replicas=4")  # another hand, in range
    hpa_seen(plane, namespace, 4)  # the HPA controller's status write lands before the apply, not during it
    with pytest.raises(StalePlan, match="now has 4 replicas|it has 4 replicas"):
        plan.apply(False)
    hpa = plane.get("hpa", "vllm-server", namespace=namespace)["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (3, 5)  # all or nothing
    assert replicas(plane, namespace) == 4
    # held (past the controller's status write), the scale refused on its resourceVersion, the HPA given back
    landed = [(what, code) for what, _, code in runbook_patches(plane, namespace) if what != "horizontalpodautoscalers"
              or code == 200]
    assert landed == [("horizontalpodautoscalers", 200), ("statefulsets/scale", 409), ("horizontalpodautoscalers", 200)]


def test_a_scaledobject_is_paused_at_the_target_and_unpaused_by_the_rollback(plane, namespace, cluster, gateway):
    plan = plan_of(cluster, namespace, "k8s.scale", target="deployment/api-gateway", replicas=1)
    assert "+ scaledobject/gateway: paused-replicas=1 (minReplicaCount=1 maxReplicaCount=4)" in plan.diff()
    plan.apply(False)
    annotations = plane.get("scaledobject", "gateway", namespace=namespace)["metadata"]["annotations"]
    assert annotations[PAUSED_REPLICAS] == "1"
    assert plane.get("deployment", "api-gateway", namespace=namespace)["spec"]["replicas"] == 1
    objects.settled(plane, namespace, "deployment", "api-gateway")
    assert plane.get("hpa", "keda-hpa-gateway", namespace=namespace)["spec"]["minReplicas"] == 1  # KEDA's own: untouched
    plan.rollback()
    annotations = plane.get("scaledobject", "gateway", namespace=namespace)["metadata"].get("annotations") or {}
    assert PAUSED_REPLICAS not in annotations
    assert plane.get("deployment", "api-gateway", namespace=namespace)["spec"]["replicas"] == 2
    patched = [e["objectRef"]["resource"] for e in plane.audit(namespace) if e["verb"] == "patch"
               and e["user"]["username"] == runbook_user(namespace)]
    assert patched == ["scaledobjects", "deployments", "deployments", "scaledobjects"]  # no HPA among them


def test_a_workload_without_autoscalers_has_a_plain_plan_and_an_hpa_cannot_hold_zero(plane, namespace, tmp_path):
    plane.apply(objects.vllm_statefulset(namespace, replicas=3))
    objects.settled(plane, namespace, "statefulset", "vllm-server")
    made = connect(runbook_kubeconfig(plane, namespace, tmp_path / "kubeconfig"))
    try:
        plan = plan_of(made, namespace, "k8s.scale", target="statefulset/vllm-server", replicas=1)
        assert plan.before == {"replicas": 3} and plan.refusal is None
        plane.apply(objects.hpa(namespace, "statefulset/vllm-server", minimum=3, maximum=5))
        plan = plan_of(made, namespace, "k8s.scale", target="statefulset/vllm-server", replicas=0)
        assert plan.refusal is not None and plan.refusal[0] == "autoscaler" and "hpa/vllm-server" in plan.refusal[1]
    finally:
        made.close()


@pytest.mark.parametrize("metadata, controller", [
    ({"annotations": {"argocd.argoproj.io/tracking-id": "llm-serving:apps/StatefulSet:llm/vllm-server"}},
     "Argo CD Application llm-serving"),
    ({"labels": {"kustomize.toolkit.fluxcd.io/name": "vllm", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}},
     "Flux Kustomization flux-system/vllm"),
])
def test_a_set_arg_on_a_workload_synced_from_git_is_refused_naming_the_controller(plane, namespace, cluster, metadata,
                                                                                   controller):
    plane.kubectl("patch", "statefulset", "vllm-server", "-n", namespace, "--type=merge",
                  "-p", json.dumps({"metadata": metadata}))  # as the GitOps controller marks what it syncs
    plan = plan_of(cluster, namespace, "k8s.set_arg", target="statefulset/vllm-server", container="vllm",
                   flag="--max-model-len", factor=0.9, floor=2048)
    guard, reason = plan.refusal
    assert guard == "gitops" and controller in reason
    assert "would be reverted at its next sync" in reason and "--max-model-len 6635 in Git" in reason
    allowed = plan_of(cluster, namespace, "k8s.set_arg", target="statefulset/vllm-server", container="vllm",
                      flag="--max-model-len", factor=0.9, floor=2048, gitops="allow")
    assert allowed.refusal is None
