"""runbook's reading of workloads and its argv patch on objects the real apiserver validated and
the real controllers own: Deployment pods through their ReplicaSet, a DaemonSet's pods on every
node, a sidecar kept by the real strategic merge, a selector runbook cannot follow whole.
"""

from __future__ import annotations

import pytest

from runbook.errors import InvalidInput
from tests.controlplane import objects
from tests.controlplane.identity import connect, runbook_kubeconfig
from tests.controlplane.plane import NODES


@pytest.fixture
def cluster(plane, namespace, tmp_path):
    made = connect(runbook_kubeconfig(plane, namespace, tmp_path / "kubeconfig"))
    yield made
    made.close()


def test_deployment_pods_name_their_deployment_through_the_real_replicaset(plane, namespace, cluster):
    plane.apply(objects.deployment(namespace, "api-gateway", replicas=2))
    objects.settled(plane, namespace, "deployment", "api-gateway")
    pods = cluster.list_pods(namespace, {"app": "api-gateway"})
    real = {p["metadata"]["name"]: p["metadata"]["ownerReferences"][0] for p in objects.ready_pods(
        plane, namespace, {"app": "api-gateway"})}
    assert {owner["kind"] for owner in real.values()} == {"ReplicaSet"}  # the controller's, named at random
    assert len(pods) == 2 and {p.owner for p in pods} == {"deployment/api-gateway"}
    deploy = cluster.get_workload(namespace, "deployment", "api-gateway")
    assert (deploy.replicas, deploy.ready_replicas) == (2, 2)


def test_a_daemonset_counts_a_pod_on_every_node(plane, namespace, cluster):
    ds = objects.deployment(namespace, "dcgm-exporter", labels={"app": "dcgm"})
    ds["kind"] = "DaemonSet"
    del ds["spec"]["replicas"]
    plane.apply(ds)
    objects.settled(plane, namespace, "daemonset", "dcgm-exporter", want=len(NODES))
    workload = cluster.get_workload(namespace, "daemonset", "dcgm-exporter")
    assert (workload.replicas, workload.ready_replicas) == (len(NODES), len(NODES))


def test_the_argv_patch_keeps_the_sidecar_under_the_real_strategic_merge(plane, namespace, cluster):
    sidecar = {"name": "metrics", "image": "registry.example/metrics:1", "args": ["--port=9400"]}
    sts = objects.vllm_statefulset(namespace, replicas=1)
    sts["spec"]["template"]["spec"]["containers"].append(sidecar)
    plane.apply(sts)
    before = objects.settled(plane, namespace, "statefulset", "vllm-server")
    args = ["--model", "meta-llama/Meta-Llama-3-8B-Instruct", "--max-model-len", "6635", "--port", "8000"]
    done = cluster.set_container_argv(namespace, "statefulset", "vllm-server", "vllm", command=None, args=args)
    assert done.container("vllm").args == tuple(args)
    after = objects.settled(plane, namespace, "statefulset", "vllm-server")
    (vllm_before, metrics_before), (vllm_after, metrics_after) = (
        o["spec"]["template"]["spec"]["containers"] for o in (before, after))
    assert vllm_after == {**vllm_before, "args": args}  # command, env, ports, image and the defaults untouched
    assert metrics_after == metrics_before and metrics_after["args"] == sidecar["args"]
    (pod,) = objects.ready_pods(plane, namespace, {"app": "vllm-server"})
    assert [c["args"] for c in pod["spec"]["containers"]] == [args, sidecar["args"]]  # rolled with both


def test_a_matchexpressions_selector_is_refused_not_half_followed(plane, namespace, cluster):
    odd = objects.deployment(namespace, "odd", replicas=1)
    odd["spec"]["selector"]["matchExpressions"] = [{"key": "tier", "operator": "In", "values": ["gpu"]}]
    odd["spec"]["template"]["metadata"]["labels"]["tier"] = "gpu"  # the real apiserver insists it selects them
    plane.apply(odd)
    with pytest.raises(InvalidInput, match="matchExpressions"):
        cluster.get_workload(namespace, "deployment", "odd")
