"""runbook's reads on a real control plane, as the `runbook` service account: pods and their status,
nodes, selectors, the apiserver's pagination, and pod logs through kwok's log server.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from runbook.errors import InvalidInput, NotFound
from runbook.parsers.log_matches import count_matches, split_lines
from tests.controlplane import objects
from tests.controlplane.identity import runbook_user
from tests.controlplane.plane import gpu_node, wait_for

APP = {"app": "vllm-server"}
GATEWAY = {"app": "api-gateway"}
OOM = ["CUDA out of memory", r"torch\.(cuda\.)?OutOfMemoryError"]


def stamp(at: dt.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def restarted_after_an_oom(plane, namespace: str, pod: str, now: dt.datetime) -> None:
    """`pod`'s vllm container restarted 29 s before `now`, its previous log ending in a CUDA OOM."""
    plane.write_log(namespace, [(stamp(now - dt.timedelta(seconds=30)), "torch.OutOfMemoryError: CUDA out of memory")],
                    pod=pod, previous=True)
    plane.container_restarted(namespace, pod, "vllm", reason="Error", exit_code=1,
                              finished_at=stamp(now - dt.timedelta(seconds=29))[:19] + "Z")


def report_unready(plane, namespace: str, pod: str) -> None:
    """The pod's status as its kubelet reports a container whose readiness probe fails."""
    current = plane.get("pod", pod, namespace=namespace)["status"]
    for status in current["containerStatuses"]:
        status["ready"] = False
    for condition in current["conditions"]:
        if condition["type"] in ("Ready", "ContainersReady"):
            condition["status"] = "False"
    plane.kubectl("patch", "pod", pod, "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(
        {"status": {"containerStatuses": current["containerStatuses"], "conditions": current["conditions"]}}))


def test_pods_by_selector_with_readiness_restarts_node_and_last_termination(plane, namespace, vllm, cluster):
    plane.container_restarted(namespace, "vllm-server-1", "vllm", reason="OOMKilled", exit_code=137,
                              finished_at="2026-03-14T03:10:00Z", restarts=4)
    report_unready(plane, namespace, "vllm-server-1")
    pods = {p.name: p for p in cluster.list_pods(namespace, APP)}
    assert sorted(pods) == ["vllm-server-0", "vllm-server-1", "vllm-server-2"]
    stored = plane.get("pod", "vllm-server-1", namespace=namespace)
    one = pods["vllm-server-1"]
    assert (one.ready, one.restarts, one.last_termination_reason) == (False, 4, "OOMKilled")
    assert one.containers[0].last_termination_at == dt.datetime(2026, 3, 14, 3, 10, tzinfo=dt.timezone.utc)
    assert one.uid == stored["metadata"]["uid"] and one.node == stored["spec"]["nodeName"]
    assert one.containers[0].container_id == stored["status"]["containerStatuses"][0]["containerID"]
    assert one.owner == "statefulset/vllm-server" and one.phase == "Running"
    assert pods["vllm-server-0"].ready and pods["vllm-server-0"].last_termination_reason is None


def test_an_empty_selector_is_refused_before_any_list(plane, namespace, cluster):
    with pytest.raises(InvalidInput, match="empty label selector"):
        cluster.list_pods(namespace, {})
    with pytest.raises(InvalidInput, match="not a valid label selector"):
        cluster.list_pods(namespace, {"app": "x,y"})
    assert plane.audited(namespace, verb="list", resource="pods", user=runbook_user(namespace)) == []
    cluster.list_pods(namespace, APP)  # the audit log would show a list: the check above can fail
    assert len(plane.audited(namespace, verb="list", resource="pods", user=runbook_user(namespace))) == 1


def test_listing_pages_through_a_large_namespace(plane, namespace, cluster):
    # 501 pods no node can take (no node has the label): Pending, listed all the same, and no
    # kubelet work for the 2 cores.
    pods = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"many-{i}", "namespace": namespace,
                                                              "labels": {"app": "many"}},
             "spec": {"nodeSelector": {"runbook.test/none": "true"}, "terminationGracePeriodSeconds": 0,
                      "containers": [{"name": "main", "image": "registry.example/app:1"}]}} for i in range(501)]
    plane.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}),
                  timeout=300)
    listed = cluster.list_pods(namespace, {"app": "many"})
    assert sorted(p.name for p in listed) == sorted(f"many-{i}" for i in range(501))
    assert {p.phase for p in listed} == {"Pending"}
    uris = [e["requestURI"] for e in plane.audited(namespace, verb="list", resource="pods", user=runbook_user(namespace))]
    assert len(uris) == 2, uris  # 500, then the rest by the first page's continue token
    assert all("limit=500" in uri for uri in uris)
    assert "continue=" not in uris[0] and "continue=" in uris[1]


@pytest.fixture
def cordoned(plane, namespace):
    """A kwok node of this test's own, cordoned; tainted too, so no other test's DaemonSet puts a pod on it."""
    node = gpu_node(f"gpu-cordoned-{namespace}")
    node["spec"] = {"unschedulable": True, "taints": [{"key": "runbook.test/own", "value": namespace,
                                                        "effect": "NoSchedule"}]}
    plane.apply(node)
    name = node["metadata"]["name"]
    wait_for(f"{name} turns Ready", lambda: any(c["type"] == "Ready" and c["status"] == "True" for c in (
        plane.get("node", name).get("status") or {}).get("conditions", [])), timeout=60)
    yield name
    plane.kubectl("delete", "node", name, "--ignore-not-found", "--wait=false")


def test_nodes_ready_and_cordoned(plane, namespace, cluster, cordoned):
    one = cluster.get_node("gpu-node-1")
    assert one.ready and not one.unschedulable
    fenced = cluster.get_node(cordoned)
    assert fenced.unschedulable and fenced.ready
    with pytest.raises(NotFound, match="gpu-node-9"):
        cluster.get_node("gpu-node-9")


# -- logs ----------------------------------------------------------------------------------------------


@pytest.fixture
def gateway(plane, namespace) -> list[str]:
    """Two api-gateway pods of a Deployment, named by its ReplicaSet, each with a log of its own."""
    plane.apply(objects.deployment(namespace, "api-gateway", replicas=2, container="gateway"))
    objects.settled(plane, namespace, "deployment", "api-gateway")
    names = sorted(p["metadata"]["name"] for p in objects.ready_pods(plane, namespace, GATEWAY))
    plane.name_pods(namespace, names)
    return names


def test_logs_by_selector_with_since_tail_and_size_cap(plane, namespace, cluster, gateway):
    now = dt.datetime.now(dt.timezone.utc)
    plane.write_log(namespace, [(stamp(now - dt.timedelta(minutes=10)), "old 503"),
                                *((stamp(now - dt.timedelta(seconds=5 - i)), f"GET /v1/completions 503 {i}")
                                  for i in range(5))], pod=gateway[0])
    plane.write_log(namespace, [(stamp(now), "GET /v1/completions 200")], pod=gateway[1])

    def read(**asked):
        return {log.pod: log for log in cluster.logs(namespace, GATEWAY, **asked)}

    logs = wait_for("kwok serves the pods' own logs", lambda: (got := read(since_seconds=300))
                    and got[gateway[1]].text and got, timeout=30)
    assert logs[gateway[0]].text.count(" 503 ") == 5 and "old" not in logs[gateway[0]].text
    assert logs[gateway[1]].text == "GET /v1/completions 200\n" and not logs[gateway[1]].truncated
    tail = read(since_seconds=300, tail_lines=2)
    assert tail[gateway[0]].text.splitlines() == ["GET /v1/completions 503 3", "GET /v1/completions 503 4"]
    capped = read(since_seconds=3600, limit_bytes=20)
    assert capped[gateway[0]].truncated and capped[gateway[0]].text == "old 503\nGET /v1/comp"


def test_logs_of_a_multi_container_pod_need_a_container(plane, namespace, cluster):
    two = objects.deployment(namespace, "two", replicas=1)
    two["spec"]["template"]["spec"]["containers"] = [{"name": "a", "image": "registry.example/a:1"},
                                                     {"name": "b", "image": "registry.example/b:1"}]
    plane.apply(two)
    objects.settled(plane, namespace, "deployment", "two")
    with pytest.raises(InvalidInput, match="a container name must be specified"):
        cluster.logs(namespace, {"app": "two"}, since_seconds=60)
    assert [log.text for log in cluster.logs(namespace, {"app": "two"}, since_seconds=60, container="b")] == [""]


def test_the_previous_container_holds_the_oom_with_its_time_and_the_current_one_does_not(
        plane, namespace, vllm, cluster):
    at = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=90)).replace(microsecond=250000)
    plane.write_log(namespace, [(stamp(at), "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")],
                    pod="vllm-server-1", previous=True)
    plane.container_restarted(namespace, "vllm-server-1", "vllm", reason="Error", exit_code=1,
                              finished_at=stamp(at + dt.timedelta(seconds=1))[:19] + "Z")
    plane.write_log(namespace, [(stamp(at + dt.timedelta(seconds=5)), "INFO:     Started server process [1]")],
                    pod="vllm-server-1")
    current = {log.pod: log for log in cluster.logs(namespace, APP, since_seconds=600, timestamps=True)}
    previous = {log.pod: log for log in cluster.logs(namespace, APP, since_seconds=600, previous=True,
                                                     timestamps=True)}
    assert "Started server process" in current["vllm-server-1"].text
    assert "OutOfMemoryError" not in current["vllm-server-1"].text
    assert previous["vllm-server-1"].text.endswith(
        " torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert previous["vllm-server-0"].absent and previous["vllm-server-0"].text == ""
    lines = split_lines(previous["vllm-server-1"].text)
    assert lines[0].at == at  # the runtime's RFC 3339 time, read back
    counts = count_matches([(pod, log.text) for pod, log in previous.items()], OOM)
    assert counts.by_pod == {"vllm-server-0": 0, "vllm-server-1": 1, "vllm-server-2": 0}
    assert counts.by_pod_minute == {"vllm-server-1": {at.strftime("%Y-%m-%dT%H:%MZ"): 1}}


def test_the_apiserver_refuses_log_requests_as_runbook_reads_them(plane, namespace, vllm, cluster):
    # A kubelet's 400 for the previous log of a never-restarted container is not kwok's (it answers
    # that its log file is missing), so that one stays on the stand-in.
    core, call = cluster.api.core, cluster.api.call
    with pytest.raises(NotFound):
        call("read", core.read_namespaced_pod_log, "no-such-pod", namespace, max_bytes=100)
    with pytest.raises(InvalidInput, match="sinceSeconds: Invalid value: 0: must be greater than 0"):
        call("read", core.read_namespaced_pod_log, "vllm-server-0", namespace, since_seconds=0, max_bytes=100)
    with pytest.raises(InvalidInput, match="container nope is not valid"):
        call("read", core.read_namespaced_pod_log, "vllm-server-0", namespace, container="nope", max_bytes=100)
    answered = [e["responseStatus"]["code"] for e in plane.audited(namespace, verb="get", resource="pods/log",
                                                                    user=runbook_user(namespace))]
    assert len(answered) == 3 and answered[0] == 404 and set(answered) <= {404, 400, 422}, answered


def test_a_previous_log_is_asked_only_of_pods_whose_status_shows_a_restart(plane, namespace, vllm, cluster):
    now = dt.datetime.now(dt.timezone.utc)
    restarted_after_an_oom(plane, namespace, "vllm-server-2", now)
    previous = {log.pod: log for log in cluster.logs(namespace, APP, since_seconds=600, previous=True)}
    asked = [e["objectRef"]["name"] for e in plane.audited(namespace, verb="get", resource="pods/log",
                                                            user=runbook_user(namespace))]
    assert asked == ["vllm-server-2"]
    assert previous["vllm-server-0"].absent and previous["vllm-server-1"].absent
    assert "OutOfMemoryError" in previous["vllm-server-2"].text


def test_both_logs_come_from_one_listing_of_the_pods(plane, namespace, vllm, cluster):
    # `read: both` (oom-in-logs): the previous and the running containers' logs of the same pods,
    # one list request, not one per kind of log.
    now = dt.datetime.now(dt.timezone.utc)
    restarted_after_an_oom(plane, namespace, "vllm-server-1", now)
    plane.write_log(namespace, [(stamp(now - dt.timedelta(seconds=5)), "INFO:     Started server process [1]")],
                    pod="vllm-server-1")
    logs = cluster.logs(namespace, APP, since_seconds=600, with_previous=True)
    assert len(plane.audited(namespace, verb="list", resource="pods", user=runbook_user(namespace))) == 1
    assert [(log.pod, log.previous, log.absent) for log in logs] == [
        ("vllm-server-0", True, True), ("vllm-server-1", True, False), ("vllm-server-2", True, True),
        ("vllm-server-0", False, False), ("vllm-server-1", False, False), ("vllm-server-2", False, False)]
    assert "OutOfMemoryError" in logs[1].text and "OutOfMemoryError" not in logs[4].text
    assert "Started server process" in logs[4].text
