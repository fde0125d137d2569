"""k8s.scale against a real HPA controller: without the hold the HPA scales the workload straight
back (the reason the hold exists); with it, the scale-down stays, and the rollback gives the HPA
back as it was, which then owns the replicas again.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest

from runbook.actions import load_builtin
from runbook.actions.base import StepContext
from runbook.backends.base import World
from runbook.clock import FakeClock
from tests.controlplane import objects
from tests.controlplane.identity import connect, runbook_kubeconfig
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


def test_a_bare_scale_down_is_undone_by_the_hpa(plane, namespace, cluster):
    cluster.scale(namespace, "statefulset", "vllm-server", 1, expected_replicas=3)
    wait_for("the HPA scales back to its minReplicas", lambda: replicas(plane, namespace) == 3, timeout=30)
    events = plane.kubectl("get", "events", "-n", namespace, "--field-selector",
                           "involvedObject.kind=HorizontalPodAutoscaler", "-o", "jsonpath={.items[*].message}").stdout
    assert "below Spec.MinReplicas" in events


def test_the_scale_holds_the_hpa_so_the_scale_down_stays_and_the_rollback_gives_it_back(plane, namespace, cluster):
    plan = plan_of(cluster, namespace, "k8s.scale", target="statefulset/vllm-server", replicas=1)
    assert plan.before == {"replicas": 3, "hpa/vllm-server": "minReplicas=3 maxReplicas=5"}
    applied = plan.apply(False)
    assert applied["replicas"] == 1
    hpa = hpa_seen(plane, namespace, 1)
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 1)
    time.sleep(3 * HPA_SYNC)  # three of the controller's syncs: it had every chance to scale back
    assert replicas(plane, namespace) == 1
    objects.settled(plane, namespace, "statefulset", "vllm-server")

    plan.rollback()
    hpa = plane.get("hpa", "vllm-server", namespace=namespace)
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 5)
    assert replicas(plane, namespace) == 3
    objects.settled(plane, namespace, "statefulset", "vllm-server")
