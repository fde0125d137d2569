"""Each Cluster operation over real HTTPS to the test API server, through the official client."""

from __future__ import annotations

import datetime as dt

import pytest

from runbook.backends.base import ContainerSpec, EnvVar
from runbook.errors import Conflict, InvalidInput, NotFound, Refused
from tests.conftest import data_text, reference_text
from tests.kubernetes import world


def test_pods_by_selector_with_readiness_restarts_node_and_last_termination(k8s, cluster):
    finished = "2026-03-14T03:10:00Z"
    k8s.set_pod("llm", "vllm-server-1", ready=False, restarts={"vllm": 4},
                last_terminated={"vllm": {"reason": "OOMKilled", "exitCode": 137, "finishedAt": finished}})
    pods = {p.name: p for p in cluster.list_pods("llm", {"app": "vllm-server"})}
    assert sorted(pods) == ["vllm-server-0", "vllm-server-1", "vllm-server-2"]
    stored = {p["metadata"]["name"]: p for p in k8s.pods()}
    one = pods["vllm-server-1"]
    assert (one.ready, one.restarts, one.last_termination_reason) == (False, 4, "OOMKilled")
    assert one.containers[0].last_termination_at == dt.datetime(2026, 3, 14, 3, 10, tzinfo=dt.timezone.utc)
    assert one.uid == stored["vllm-server-1"]["metadata"]["uid"]
    assert one.node == stored["vllm-server-1"]["spec"]["nodeName"]
    assert one.containers[0].container_id == stored["vllm-server-1"]["status"]["containerStatuses"][0]["containerID"]
    assert one.owner == "statefulset/vllm-server" and one.phase == "Running"
    assert pods["vllm-server-0"].ready and pods["vllm-server-0"].last_termination_reason is None


def test_deployment_pods_name_their_deployment_as_owner(k8s, cluster):
    pods = cluster.list_pods("llm", {"app": "api-gateway"})
    assert len(pods) == 2 and {p.owner for p in pods} == {"deployment/api-gateway"}


def test_an_empty_selector_is_refused_not_all_pods(k8s, cluster):
    with pytest.raises(InvalidInput, match="empty label selector"):
        cluster.list_pods("llm", {})
    with pytest.raises(InvalidInput, match="not a valid label selector"):
        cluster.list_pods("llm", {"app": "x,y"})
    assert not [s for s in k8s.seen if s.resource == "pods" and s.verb == "list"]


def test_listing_pages_through_a_large_namespace(k8s, cluster):
    k8s.apply(world.workload("Deployment", "many", replicas=501, labels={"app": "many"}))
    assert len(cluster.list_pods("llm", {"app": "many"})) == 501
    assert len([s for s in k8s.seen if s.resource == "pods" and s.verb == "list"]) == 2  # 500 + 1


def test_workloads_of_each_kind(k8s, cluster):
    k8s.apply(world.workload("DaemonSet", "dcgm-exporter", labels={"app": "dcgm"}))
    sts = cluster.get_workload("llm", "statefulset", "vllm-server")
    assert (sts.replicas, sts.ready_replicas, dict(sts.selector)) == (3, 3, {"app": "vllm-server"})
    assert sts.container("vllm") == ContainerSpec("vllm", tuple(world.VLLM_COMMAND), tuple(world.VLLM_ARGS),
                                                  (EnvVar("HF_HOME", "/models"),))
    deploy = cluster.get_workload("llm", "deployment", "api-gateway")
    assert (deploy.replicas, deploy.ready_replicas) == (2, 2)
    ds = cluster.get_workload("llm", "daemonset", "dcgm-exporter")
    assert (ds.replicas, ds.ready_replicas) == (3, 3)  # one per node: cordoned gpu-node-3 too, as a real cluster does
    with pytest.raises(NotFound, match="vllm-missing"):
        cluster.get_workload("llm", "statefulset", "vllm-missing")


def test_nodes_ready_and_cordoned(k8s, cluster):
    assert cluster.get_node("gpu-node-1").ready and not cluster.get_node("gpu-node-1").unschedulable
    assert cluster.get_node("gpu-node-3").unschedulable
    with pytest.raises(NotFound):
        cluster.get_node("gpu-node-9")


def test_scale_goes_through_the_scale_subresource(k8s, cluster):
    done = cluster.scale("llm", "statefulset", "vllm-server", 1)
    assert done.replicas == 1
    assert k8s.get("StatefulSet", "llm", "vllm-server")["spec"]["replicas"] == 1
    assert [p["metadata"]["name"] for p in k8s.pods() if p["metadata"]["labels"].get("app") == "vllm-server"] == ["vllm-server-0"]
    writes = [s for s in k8s.seen if s.method not in ("GET",)]
    assert [(s.verb, s.resource, s.content_type) for s in writes] == [
        ("patch", "statefulsets/scale", "application/merge-patch+json")]
    with pytest.raises(InvalidInput, match="DaemonSet"):
        cluster.scale("llm", "daemonset", "x", 1)


def test_dry_runs_change_nothing(k8s, cluster):
    before = {name: k8s.get("StatefulSet", "llm", name)["metadata"]["resourceVersion"] for name in ["vllm-server"]}
    pods_before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in k8s.pods()}
    planned = cluster.scale("llm", "statefulset", "vllm-server", 1, dry_run=True)
    assert planned.replicas == 1  # what the server accepted, not what it stored
    args = list(world.VLLM_ARGS)
    args[args.index("--max-model-len") + 1] = "6635"
    patched = cluster.set_container_argv("llm", "statefulset", "vllm-server", "vllm", command=None, args=args,
                                         dry_run=True)
    assert patched.container("vllm").args == tuple(args)
    pod = cluster.list_pods("llm", {"app": "vllm-server"})[0]
    cluster.delete_pod("llm", pod.name, uid=pod.uid, dry_run=True)
    cluster.delete_pod("llm", pod.name, uid=pod.uid, dry_run=True, evict=True)
    sts = k8s.get("StatefulSet", "llm", "vllm-server")
    assert sts["spec"]["replicas"] == 3 and sts["metadata"]["resourceVersion"] == before["vllm-server"]
    assert sts["spec"]["template"]["spec"]["containers"][0]["args"] == world.VLLM_ARGS
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in k8s.pods()} == pods_before
    assert all(s.dry_run for s in k8s.seen if s.method != "GET")


def test_set_argv_replaces_exactly_that_containers_args(k8s, cluster):
    sidecar = {"name": "metrics", "image": "registry.example/metrics:1", "args": ["--port=9400"]}
    k8s.edit("StatefulSet", "llm", "vllm-server",
             lambda o: o["spec"]["template"]["spec"]["containers"].append(sidecar))
    before = k8s.get("StatefulSet", "llm", "vllm-server")
    args = ["--model", "meta-llama/Meta-Llama-3-8B-Instruct", "--max-model-len", "6635", "--port", "8000"]
    done = cluster.set_container_argv("llm", "statefulset", "vllm-server", "vllm", command=None, args=args)
    after = k8s.get("StatefulSet", "llm", "vllm-server")
    assert done.container("vllm").args == tuple(args)
    vllm_before, vllm_after = before["spec"]["template"]["spec"]["containers"][0], after["spec"]["template"]["spec"]["containers"][0]
    assert vllm_after == {**vllm_before, "args": args}  # command, env, ports, image untouched
    assert after["spec"]["template"]["spec"]["containers"][1] == sidecar
    assert {k: v for k, v in after["spec"].items() if k != "template"} == {k: v for k, v in before["spec"].items() if k != "template"}
    # The pods were replaced with the new template, as a rollout does.
    pod = next(p for p in k8s.pods() if p["metadata"]["name"] == "vllm-server-0")
    assert pod["spec"]["containers"][0]["args"] == args


def test_set_argv_on_a_vllm_serve_deployment(k8s, cluster):
    k8s.apply(data_text("k8s/vllm-deployment-llama-3-70b-tp4.yaml"))
    server = cluster.get_workload("llm", "deployment", "vllm-llama").container("vllm")
    at = server.args.index("--max-model-len") + 1
    assert server.args[at] == "32768"
    args = [*server.args[:at], "29491", *server.args[at + 1:]]
    cluster.set_container_argv("llm", "deployment", "vllm-llama", "vllm", command=None, args=args)
    stored = k8s.get("Deployment", "llm", "vllm-llama")["spec"]["template"]["spec"]["containers"][0]
    assert stored["args"] == args and stored["command"] == ["vllm", "serve"]
    assert [e["name"] for e in stored["env"]] == ["HF_TOKEN", "VLLM_LOGGING_LEVEL"]
    assert stored["env"][0]["valueFrom"] == {"secretKeyRef": {"name": "huggingface", "key": "token"}}


def test_set_argv_on_the_reference_vllm_deployment(k8s, cluster):
    k8s.apply(reference_text("k8s/vllm-deployment-gke-gemma-3-27b-it-max-model-len-32768.yaml"))
    workload = cluster.get_workload("llm", "deployment", "vllm-gemma-deployment")
    server = workload.container("inference-server")
    assert "--max-model-len=32768" in server.args
    args = [a if not a.startswith("--max-model-len=") else "--max-model-len=29491" for a in server.args]
    cluster.set_container_argv("llm", "deployment", "vllm-gemma-deployment", "inference-server", command=None, args=args)
    stored = k8s.get("Deployment", "llm", "vllm-gemma-deployment")["spec"]["template"]["spec"]["containers"][0]
    assert stored["args"] == args and stored["command"] == list(server.command)
    assert [e["name"] for e in stored["env"]] == ["LD_LIBRARY_PATH", "MODEL_ID", "HUGGING_FACE_HUB_TOKEN"]


def test_set_argv_of_a_missing_container_says_which_exist(k8s, cluster):
    with pytest.raises(NotFound, match="containers: vllm"):
        cluster.set_container_argv("llm", "statefulset", "vllm-server", "nope", command=None, args=["x"])


def test_delete_pod_carries_the_uid_precondition(k8s, cluster):
    pod = next(p for p in cluster.list_pods("llm", {"app": "vllm-server"}) if p.name == "vllm-server-1")
    cluster.delete_pod("llm", "vllm-server-1", uid=pod.uid)
    replacement = k8s.get("Pod", "llm", "vllm-server-1")
    assert replacement["metadata"]["uid"] != pod.uid  # the StatefulSet recreated it under the same name
    # Deleting "vllm-server-1" again with the inspected uid must spare the replacement.
    with pytest.raises(Conflict, match="replaced"):
        cluster.delete_pod("llm", "vllm-server-1", uid=pod.uid)
    assert k8s.get("Pod", "llm", "vllm-server-1")["metadata"]["uid"] == replacement["metadata"]["uid"]


def test_eviction_honours_the_pod_disruption_budget(k8s, cluster):
    k8s.apply({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "vllm"},
               "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "vllm-server"}}}})
    pods = {p.name: p for p in cluster.list_pods("llm", {"app": "vllm-server"})}
    cluster.delete_pod("llm", "vllm-server-2", uid=pods["vllm-server-2"].uid, evict=True)  # 3 ready, 2 needed
    assert k8s.get("Pod", "llm", "vllm-server-2")["metadata"]["uid"] != pods["vllm-server-2"].uid
    k8s.set_pod("llm", "vllm-server-1", ready=False)
    with pytest.raises(Refused, match="PodDisruptionBudget.*needs 2 healthy pods and has 2") as refused:
        cluster.delete_pod("llm", "vllm-server-0", uid=pods["vllm-server-0"].uid, evict=True)
    assert refused.value.guard == "pdb"
    assert k8s.get("Pod", "llm", "vllm-server-0")["metadata"]["uid"] == pods["vllm-server-0"].uid
    evictions = [s for s in k8s.seen if s.resource == "pods/eviction"]
    assert [s.code for s in evictions] == [201, 429]  # a PDB's 429 is not retried


def test_logs_by_selector_with_since_tail_and_size_cap(k8s, cluster):
    now = dt.datetime.now(dt.timezone.utc)
    gateway = sorted(p["metadata"]["name"] for p in k8s.pods() if p["metadata"]["labels"]["app"] == "api-gateway")
    k8s.kubelet.log("llm", gateway[0], "gateway", "old 503", at=now - dt.timedelta(minutes=10))
    for i in range(5):
        k8s.kubelet.log("llm", gateway[0], "gateway", f"GET /v1/completions 503 {i}")
    k8s.kubelet.log("llm", gateway[1], "gateway", "GET /v1/completions 200")
    logs = {log.pod: log for log in cluster.logs("llm", {"app": "api-gateway"}, since_seconds=300)}
    assert logs[gateway[0]].text.count(" 503 ") == 5 and "old" not in logs[gateway[0]].text
    assert logs[gateway[1]].text == "GET /v1/completions 200\n" and not logs[gateway[1]].truncated
    tail = {log.pod: log for log in cluster.logs("llm", {"app": "api-gateway"}, since_seconds=300, tail_lines=2)}
    assert tail[gateway[0]].text.splitlines() == ["GET /v1/completions 503 3", "GET /v1/completions 503 4"]
    capped = {log.pod: log for log in cluster.logs("llm", {"app": "api-gateway"}, since_seconds=3600, limit_bytes=20)}
    assert capped[gateway[0]].truncated and capped[gateway[0]].text == "old 503\nGET /v1/comp"


def test_logs_of_a_multi_container_pod_need_a_container(k8s, cluster):
    k8s.apply(world.workload("Deployment", "two", replicas=1, labels={"app": "two"},
                             containers=[{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]))
    with pytest.raises(InvalidInput, match="a container name must be specified"):
        cluster.logs("llm", {"app": "two"}, since_seconds=60)
    assert [log.text for log in cluster.logs("llm", {"app": "two"}, since_seconds=60, container="b")] == [""]


def test_matchexpressions_selectors_are_not_half_followed(k8s, cluster):
    odd = world.workload("Deployment", "odd", replicas=1, labels={"app": "odd"})
    odd["spec"]["selector"]["matchExpressions"] = [{"key": "tier", "operator": "In", "values": ["gpu"]}]
    k8s.apply(odd)
    with pytest.raises(InvalidInput, match="matchExpressions"):
        cluster.get_workload("llm", "deployment", "odd")
