"""runbook's reading of workloads and its argv patch on objects the real apiserver validated and
the real controllers own: each kind's readout, Deployment pods through their ReplicaSet, a DaemonSet's
pods on every node, the argv patch on real vLLM manifests (a sidecar, env from Secrets kept by the
real strategic merge), a selector runbook cannot follow whole.
"""

from __future__ import annotations

import pytest
import yaml

from runbook.backends.base import ContainerSpec, EnvVar
from runbook.errors import InvalidInput, NotFound
from tests.conftest import data_text, reference_text
from tests.controlplane import objects
from tests.controlplane.identity import runbook_user
from tests.controlplane.plane import NODES


def apply_manifest(plane, namespace: str, text: str) -> None:
    """A manifest as a team applies it into their namespace (`kubectl apply -n`)."""
    docs = [d for d in yaml.safe_load_all(text) if d]
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
    plane.apply(*docs)


def test_a_statefulsets_readout_and_a_missing_workload(plane, namespace, cluster):
    plane.apply(objects.vllm_statefulset(namespace, replicas=2))
    objects.settled(plane, namespace, "statefulset", "vllm-server")
    sts = cluster.get_workload(namespace, "statefulset", "vllm-server")
    assert (sts.replicas, sts.ready_replicas, dict(sts.selector)) == (2, 2, {"app": "vllm-server"})
    assert sts.container("vllm") == ContainerSpec("vllm", tuple(objects.VLLM_COMMAND), tuple(objects.VLLM_ARGS),
                                                  (EnvVar("HF_HOME", "/models"),))
    with pytest.raises(NotFound, match="vllm-missing"):
        cluster.get_workload(namespace, "statefulset", "vllm-missing")
    with pytest.raises(NotFound, match="api-gateway"):
        cluster.get_workload(namespace, "deployment", "api-gateway")


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
    outside = lambda o: {k: v for k, v in o["spec"].items() if k != "template"}  # noqa: E731
    assert outside(after) == outside(before)  # replicas, selector, strategy: only the template changed
    (pod,) = objects.ready_pods(plane, namespace, {"app": "vllm-server"})
    assert [c["args"] for c in pod["spec"]["containers"]] == [args, sidecar["args"]]  # rolled with both


def test_a_matchexpressions_selector_is_refused_not_half_followed(plane, namespace, cluster):
    odd = objects.deployment(namespace, "odd", replicas=1)
    odd["spec"]["selector"]["matchExpressions"] = [{"key": "tier", "operator": "In", "values": ["gpu"]}]
    odd["spec"]["template"]["metadata"]["labels"]["tier"] = "gpu"  # the real apiserver insists it selects them
    plane.apply(odd)
    with pytest.raises(InvalidInput, match="matchExpressions"):
        cluster.get_workload(namespace, "deployment", "odd")


def test_set_argv_on_a_vllm_serve_deployment_keeps_its_command_and_secret_env(plane, namespace, cluster):
    apply_manifest(plane, namespace, data_text("k8s/vllm-deployment-llama-3-70b-tp4.yaml"))
    objects.settled(plane, namespace, "deployment", "vllm-llama")
    server = cluster.get_workload(namespace, "deployment", "vllm-llama").container("vllm")
    at = server.args.index("--max-model-len") + 1
    assert server.args[at] == "32768"
    args = [*server.args[:at], "29491", *server.args[at + 1:]]
    cluster.set_container_argv(namespace, "deployment", "vllm-llama", "vllm", command=None, args=args)
    rolled = objects.settled(plane, namespace, "deployment", "vllm-llama", timeout=120)
    stored = rolled["spec"]["template"]["spec"]["containers"][0]
    assert stored["args"] == args and stored["command"] == ["vllm", "serve"]
    assert [e["name"] for e in stored["env"]] == ["HF_TOKEN", "VLLM_LOGGING_LEVEL"]
    assert stored["env"][0]["valueFrom"] == {"secretKeyRef": {"name": "huggingface", "key": "token"}}
    pods = objects.ready_pods(plane, namespace, {"app.kubernetes.io/name": "vllm-llama"})
    assert [p["spec"]["containers"][0]["args"] for p in pods] == [args, args]  # the real rollout replaced them


def test_set_argv_on_the_reference_vllm_deployment(plane, namespace, cluster):
    # GKE's reference manifest asks for A100 nodes: its pods stay Pending here, the spec is what is read.
    apply_manifest(plane, namespace,
                   reference_text("k8s/vllm-deployment-gke-gemma-3-27b-it-max-model-len-32768.yaml"))
    server = cluster.get_workload(namespace, "deployment", "vllm-gemma-deployment").container("inference-server")
    assert "--max-model-len=32768" in server.args
    args = [a if not a.startswith("--max-model-len=") else "--max-model-len=29491" for a in server.args]
    cluster.set_container_argv(namespace, "deployment", "vllm-gemma-deployment", "inference-server", command=None,
                               args=args)
    stored = plane.get("deployment", "vllm-gemma-deployment", namespace=namespace)
    container = stored["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == args and container["command"] == list(server.command)
    assert [e["name"] for e in container["env"]] == ["LD_LIBRARY_PATH", "MODEL_ID", "HUGGING_FACE_HUB_TOKEN"]
    assert container["env"][2]["valueFrom"] == {"secretKeyRef": {"name": "hf-secret", "key": "hf_api_token"}}


def test_set_argv_of_a_missing_container_says_which_exist(plane, namespace, cluster):
    plane.apply(objects.vllm_statefulset(namespace, replicas=1))
    with pytest.raises(NotFound, match="containers: vllm"):
        cluster.set_container_argv(namespace, "statefulset", "vllm-server", "nope", command=None, args=["x"])
    stored = plane.get("statefulset", "vllm-server", namespace=namespace)
    assert stored["metadata"]["generation"] == 1  # nothing was written
    assert plane.audited(namespace, verb="patch", resource="statefulsets",
                         user=runbook_user(namespace)) == []
