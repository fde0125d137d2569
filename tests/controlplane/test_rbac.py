"""deploy/rbac.yaml judged by the real RBAC authorizer: with one verb taken away, runbook's error
names the verb and the resource, and a change whose second half is refused leaves nothing changed.
"""

from __future__ import annotations

import datetime as dt

import pytest

from runbook.actions import load_builtin
from runbook.actions.base import StepContext
from runbook.backends.base import World
from runbook.clock import FakeClock
from runbook.errors import BackendUnavailable
from tests.controlplane import objects
from tests.controlplane.identity import connect, runbook_kubeconfig

NOW = dt.datetime(2026, 3, 14, 3, 12, 7, tzinfo=dt.timezone.utc)


def without(resource: str, verb: str):
    """A change to the Role's rules: `verb` taken off `resource` (and nothing else)."""
    def change(rules: list[dict]) -> list[dict]:
        changed = []
        for rule in rules:
            if resource in rule["resources"]:
                found = True
                rest = [r for r in rule["resources"] if r != resource]
                if rest:
                    changed.append({**rule, "resources": rest})
                changed.append({**rule, "resources": [resource], "verbs": [v for v in rule["verbs"] if v != verb]})
            else:
                changed.append(rule)
        assert found, f"deploy/rbac.yaml grants nothing on {resource}"
        return changed
    return change


def plan_of(cluster, namespace: str, action: str, **params):
    spec = load_builtin().get(action)
    ctx = StepContext(world=World(cluster=cluster), clock=FakeClock(NOW), now=NOW, step_id="t",
                      params={"namespace": namespace}, dry_run=False, timeout=30.0, record_evidence=lambda e: None)
    return spec.func(ctx, spec.params.model_validate(params))  # type: ignore[union-attr]


@pytest.fixture
def vllm(plane, namespace):
    plane.apply(objects.vllm_statefulset(namespace, replicas=3),
                objects.hpa(namespace, "statefulset/vllm-server", minimum=3, maximum=5))
    objects.settled(plane, namespace, "statefulset", "vllm-server")


def test_a_scale_refused_its_subresource_names_the_verb_and_leaves_the_hpa_as_it_was(plane, namespace, vllm,
                                                                                     tmp_path):
    cluster = connect(runbook_kubeconfig(plane, namespace, tmp_path / "kubeconfig",
                                         change_rules=without("statefulsets/scale", "patch")))
    try:
        plan = plan_of(cluster, namespace, "k8s.scale", target="statefulset/vllm-server", replicas=1)
        with pytest.raises(BackendUnavailable) as refused:
            plan.apply(False)  # the HPA is held first (allowed), then the scale is refused
    finally:
        cluster.close()
    said = str(refused.value)
    assert 'cannot patch resource "statefulsets/scale" in API group "apps"' in said
    assert "deploy/rbac.yaml" in said
    hpa = plane.get("hpa", "vllm-server", namespace=namespace)
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 5)  # released: nothing half-applied
    assert plane.get("statefulset", "vllm-server", namespace=namespace)["spec"]["replicas"] == 3


def test_an_argv_patch_refused_names_the_verb_and_changes_nothing(plane, namespace, vllm, tmp_path):
    cluster = connect(runbook_kubeconfig(plane, namespace, tmp_path / "kubeconfig",
                                         change_rules=without("statefulsets", "patch")))
    try:
        plan = plan_of(cluster, namespace, "k8s.set_arg", target="statefulset/vllm-server", container="vllm",
                       flag="--max-model-len", factor=0.9, floor=2048)
        with pytest.raises(BackendUnavailable, match='cannot patch resource "statefulsets" in API group "apps"'):
            plan.apply(False)
    finally:
        cluster.close()
    args = plane.get("statefulset", "vllm-server", namespace=namespace)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == objects.VLLM_ARGS


def test_exec_needs_both_verbs_rbac_yaml_grants_on_pods_exec(plane, namespace, vllm, tmp_path):
    """The WebSocket exec is a GET, and Kubernetes 1.35+ also checks `create`: without it, refused."""
    plane.answer(namespace, "nvidia-smi", stdout="ok\n")
    cluster = connect(runbook_kubeconfig(plane, namespace, tmp_path / "kubeconfig",
                                         change_rules=without("pods/exec", "create")))
    try:
        with pytest.raises(BackendUnavailable) as refused:
            cluster.exec(namespace, "vllm-server-0", "vllm", ["nvidia-smi"], timeout=20)
    finally:
        cluster.close()
    # The real apiserver's refusal of the second check names no verb ('pods "vllm-server-0" is
    # forbidden: '): runbook says which one it needs.
    assert str(refused.value) == (
        f'exec `nvidia-smi` in {namespace}/vllm-server-0/vllm: pods "vllm-server-0" is forbidden (the API server '
        "gave no reason: since Kubernetes 1.35 a WebSocket exec needs `create` on pods/exec as well as `get`); "
        "runbook's identity needs `get` and `create` on pods/exec (see deploy/rbac.yaml)")
    assert plane.calls(namespace, "vllm-server-0") == []  # nothing ran
    whole = connect(runbook_kubeconfig(plane, namespace, tmp_path / "whole"))
    try:
        assert whole.exec(namespace, "vllm-server-0", "vllm", ["nvidia-smi"], timeout=20).stdout == "ok\n"
    finally:
        whole.close()
