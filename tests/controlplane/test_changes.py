"""runbook's changes on a real control plane, as the `runbook` service account of deploy/rbac.yaml:
the controllers act on them as a cluster does, and kubectl reads what runbook wrote.
"""

from __future__ import annotations

import json

import pytest

from runbook.errors import Conflict, InvalidInput, Refused, StalePlan
from tests.controlplane import objects
from tests.controlplane.identity import runbook_user
from tests.controlplane.plane import wait_for

APP = {"app": "vllm-server"}


def pod_args(plane, namespace) -> dict[str, list[str]]:
    listed = json.loads(plane.kubectl("get", "pods", "-n", namespace, "-l", "app=vllm-server", "-o", "json").stdout)
    return {p["metadata"]["name"]: p["spec"]["containers"][0]["args"] for p in listed["items"]}


def test_gpu_pods_are_scheduled_on_the_kwok_nodes_and_read_back(plane, namespace, vllm, cluster):
    pods = {p.name: p for p in cluster.list_pods(namespace, APP)}
    assert sorted(pods) == ["vllm-server-0", "vllm-server-1", "vllm-server-2"]
    for pod in pods.values():
        assert pod.ready and pod.phase == "Running" and pod.owner == "statefulset/vllm-server"
        assert pod.node.startswith("gpu-node-") and pod.ip.startswith("127.244.")
        assert pod.containers[0].container_id.startswith("containerd://")
    node = cluster.get_node(pods["vllm-server-0"].node)
    assert node.ready and not node.unschedulable
    capacity = plane.get("node", pods["vllm-server-0"].node)["status"]["capacity"]
    assert capacity["nvidia.com/gpu"] == "8"
    workload = cluster.get_workload(namespace, "statefulset", "vllm-server")
    assert (workload.replicas, workload.ready_replicas) == (3, 3)
    assert workload.container("vllm").args == tuple(objects.VLLM_ARGS)


def test_scale_down_through_the_subresource_and_the_controller_removes_the_pods(plane, namespace, vllm, cluster):
    done = cluster.scale(namespace, "statefulset", "vllm-server", 1, expected_replicas=3)
    assert done.replicas == 1
    objects.settled(plane, namespace, "statefulset", "vllm-server")
    assert sorted(pod_args(plane, namespace)) == ["vllm-server-0"]  # the StatefulSet removes the highest ordinals
    read = plane.kubectl("get", "statefulset", "vllm-server", "-n", namespace, "-o", "jsonpath={.spec.replicas}")
    assert read.stdout == "1"
    # runbook's one write was a patch of the scale subresource (the controller's pod deletes are not its).
    writes = [(e["verb"], e["objectRef"]["resource"], e["objectRef"].get("subresource", ""))
              for e in plane.audit(namespace) if e["user"]["username"] == runbook_user(namespace)
              and e["verb"] in ("create", "update", "patch", "delete")]
    assert writes == [("patch", "statefulsets", "scale")]
    with pytest.raises(InvalidInput, match="DaemonSet"):
        cluster.scale(namespace, "daemonset", "dcgm-exporter", 1)


def test_the_argv_patch_rolls_every_pod_and_keeps_the_rest_of_the_container(plane, namespace, vllm, cluster):
    before = cluster.get_workload(namespace, "statefulset", "vllm-server")
    lowered = [*objects.VLLM_ARGS]
    lowered[lowered.index("--max-model-len") + 1] = "6635"
    cluster.set_container_argv(namespace, "statefulset", "vllm-server", "vllm", command=None, args=lowered,
                               expected=before.container("vllm"), resource_version=before.resource_version)
    settled = objects.settled(plane, namespace, "statefulset", "vllm-server", timeout=120)
    assert settled["status"]["updateRevision"] == settled["status"]["currentRevision"]
    assert pod_args(plane, namespace) == {f"vllm-server-{i}": lowered for i in range(3)}  # the controller rolled them
    container = settled["spec"]["template"]["spec"]["containers"][0]
    assert container["env"] == [{"name": "HF_HOME", "value": "/models"}]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert container["command"] == objects.VLLM_COMMAND


def test_server_side_dry_run_answers_the_plan_and_changes_nothing(plane, namespace, vllm, cluster):
    before = cluster.get_workload(namespace, "statefulset", "vllm-server")
    would = cluster.scale(namespace, "statefulset", "vllm-server", 1, dry_run=True, expected_replicas=3)
    assert would.replicas == 1
    lowered = [*objects.VLLM_ARGS]
    lowered[lowered.index("--max-model-len") + 1] = "6635"
    shown = cluster.set_container_argv(namespace, "statefulset", "vllm-server", "vllm", command=None, args=lowered,
                                       dry_run=True, expected=before.container("vllm"))
    assert shown.container("vllm").args == tuple(lowered)
    after = plane.get("statefulset", "vllm-server", namespace=namespace)
    assert after["metadata"]["resourceVersion"] == before.resource_version
    assert after["spec"]["replicas"] == 3
    assert after["spec"]["template"]["spec"]["containers"][0]["args"] == objects.VLLM_ARGS
    pods = {p.name: p.uid for p in cluster.list_pods(namespace, APP)}
    cluster.delete_pod(namespace, "vllm-server-0", uid=pods["vllm-server-0"], dry_run=True)
    cluster.delete_pod(namespace, "vllm-server-1", uid=pods["vllm-server-1"], dry_run=True, evict=True)
    assert {p.name: p.uid for p in cluster.list_pods(namespace, APP)} == pods  # no pod deleted nor evicted
    writes = [e for e in plane.audit(namespace) if e["user"]["username"] == runbook_user(namespace)
              and e["verb"] in ("create", "update", "patch", "delete")]
    assert [(e["verb"], e["objectRef"]["resource"], e["objectRef"].get("subresource", "")) for e in writes] == [
        ("patch", "statefulsets", "scale"), ("patch", "statefulsets", ""), ("delete", "pods", ""),
        ("create", "pods", "eviction")]
    assert all("dryRun=All" in e["requestURI"] for e in writes), [e["requestURI"] for e in writes]


def test_a_persons_edit_between_plan_and_apply_is_a_stale_plan(plane, namespace, vllm, cluster):
    planned = cluster.get_workload(namespace, "statefulset", "vllm-server")
    # The on-call's colleague raises the limit by hand meanwhile: that container is not the plan's.
    plane.kubectl("patch", "statefulset", "vllm-server", "-n", namespace, "--type=json", "-p", json.dumps(
        [{"op": "replace", "path": "/spec/template/spec/containers/0/args/3", "value": "8192"}]))
    with pytest.raises(StalePlan, match="changed since this change was planned .*--max-model-len 8192"):
        cluster.set_container_argv(namespace, "statefulset", "vllm-server", "vllm", command=None,
                                   args=["--max-model-len", "6635"], expected=planned.container("vllm"),
                                   resource_version=planned.resource_version)
    with pytest.raises(StalePlan, match="changed since this change was planned"):
        cluster.scale(namespace, "statefulset", "vllm-server", 1, resource_version=planned.resource_version)
    plane.kubectl("scale", "statefulset", "vllm-server", "-n", namespace, "--replicas=2")
    with pytest.raises(StalePlan, match="now has 2 replicas, not the 3"):
        cluster.scale(namespace, "statefulset", "vllm-server", 1, expected_replicas=3)
    stored = plane.get("statefulset", "vllm-server", namespace=namespace)
    assert stored["spec"]["replicas"] == 2
    assert stored["spec"]["template"]["spec"]["containers"][0]["args"][3] == "8192"


def test_an_edit_the_plan_does_not_rest_on_lets_the_change_land(plane, namespace, vllm, cluster):
    planned = cluster.get_workload(namespace, "statefulset", "vllm-server")
    plane.kubectl("annotate", "statefulset", "vllm-server", "-n", namespace, "owner=on-call-human")
    lowered = [*objects.VLLM_ARGS]
    lowered[lowered.index("--max-model-len") + 1] = "6635"
    cluster.set_container_argv(namespace, "statefulset", "vllm-server", "vllm", command=None, args=lowered,
                               expected=planned.container("vllm"), resource_version=planned.resource_version)
    stored = plane.get("statefulset", "vllm-server", namespace=namespace)
    assert stored["spec"]["template"]["spec"]["containers"][0]["args"] == lowered
    assert stored["metadata"]["annotations"]["owner"] == "on-call-human"


def test_a_pod_deleted_by_uid_is_replaced_and_a_stale_uid_touches_nothing(plane, namespace, vllm, cluster):
    pods = {p.name: p for p in cluster.list_pods(namespace, APP)}
    cluster.delete_pod(namespace, "vllm-server-1", uid=pods["vllm-server-1"].uid)

    def replaced():
        fresh = {p.name: p for p in cluster.list_pods(namespace, APP)}
        one = fresh.get("vllm-server-1")
        return one if one is not None and one.uid != pods["vllm-server-1"].uid and one.ready else None

    new = wait_for("the StatefulSet replaces vllm-server-1", replaced, timeout=60)
    with pytest.raises(Conflict, match="changed|uid|Precondition"):
        cluster.delete_pod(namespace, "vllm-server-1", uid=pods["vllm-server-1"].uid)
    assert {p.name: p.uid for p in cluster.list_pods(namespace, APP)}["vllm-server-1"] == new.uid


def test_an_eviction_the_pdb_forbids_is_refused_naming_the_budget(plane, namespace, vllm, cluster):
    plane.apply(objects.pdb(namespace, "vllm-server", APP, min_available=3))
    wait_for("the disruption controller counts the budget",
             lambda: (plane.get("pdb", "vllm-server", namespace=namespace).get("status") or {}).get("currentHealthy") == 3,
             timeout=60)
    pod = next(p for p in cluster.list_pods(namespace, APP) if p.name == "vllm-server-2")
    with pytest.raises(Refused, match="PodDisruptionBudget.*needs 3 healthy pods and has 3") as refused:
        cluster.delete_pod(namespace, pod.name, uid=pod.uid, evict=True)
    assert refused.value.guard == "pdb"
    assert pod.uid in {p.uid for p in cluster.list_pods(namespace, APP)}
    plane.apply(objects.pdb(namespace, "vllm-server", APP, min_available=2))
    wait_for("the budget allows one disruption",
             lambda: (plane.get("pdb", "vllm-server", namespace=namespace)["status"]).get("disruptionsAllowed") == 1,
             timeout=60)
    cluster.delete_pod(namespace, pod.name, uid=pod.uid, evict=True)
    wait_for("the evicted pod goes", lambda: pod.uid not in {p.uid for p in cluster.list_pods(namespace, APP)},
             timeout=60)
    evictions = plane.audited(namespace, verb="create", resource="pods/eviction", user=runbook_user(namespace))
    assert [e["responseStatus"]["code"] for e in evictions] == [429, 201]  # the budget's 429 is not retried


def test_the_controllers_status_writes_between_plan_and_apply_are_not_a_persons_edit(plane, namespace, vllm, cluster):
    """The StatefulSet controller writes the status (and so the resourceVersion) while it rolls or
    scales: a change planned from the spec before is still the plan, and lands as planned."""
    planned = cluster.get_workload(namespace, "statefulset", "vllm-server")
    pod = next(p for p in cluster.list_pods(namespace, APP) if p.name == "vllm-server-2")
    cluster.delete_pod(namespace, pod.name, uid=pod.uid)  # the controller counts it out, then back in
    wait_for("the controller writes the status",
             lambda: plane.get("statefulset", "vllm-server", namespace=namespace)["metadata"]["resourceVersion"]
             != planned.resource_version, timeout=30)
    lowered = [*objects.VLLM_ARGS]
    lowered[lowered.index("--max-model-len") + 1] = "6635"
    cluster.set_container_argv(namespace, "statefulset", "vllm-server", "vllm", command=None, args=lowered,
                               expected=planned.container("vllm"), resource_version=planned.resource_version)
    assert objects.settled(plane, namespace, "statefulset", "vllm-server", timeout=120)
    assert pod_args(plane, namespace) == {f"vllm-server-{i}": lowered for i in range(3)}
    again = cluster.get_workload(namespace, "statefulset", "vllm-server")
    pod = next(p for p in cluster.list_pods(namespace, APP) if p.name == "vllm-server-1")
    cluster.delete_pod(namespace, pod.name, uid=pod.uid)
    wait_for("the controller writes the status",
             lambda: plane.get("statefulset", "vllm-server", namespace=namespace)["metadata"]["resourceVersion"]
             != again.resource_version, timeout=30)
    assert cluster.scale(namespace, "statefulset", "vllm-server", 1, expected_replicas=3,
                         resource_version=again.resource_version).replicas == 1


def test_a_plan_resting_on_its_version_alone_is_never_applied_once_the_workload_moved(plane, namespace, vllm, cluster):
    """Without the planned container to compare, any edit since the plan read (an annotation here) is
    a StalePlan; with only the planned container, its own comparison refuses a changed command line."""
    planned = cluster.get_workload(namespace, "statefulset", "vllm-server")
    plane.kubectl("annotate", "statefulset", "vllm-server", "-n", namespace, "x=1")
    with pytest.raises(StalePlan, match="changed since this change was planned"):
        cluster.set_container_argv(namespace, "statefulset", "vllm-server", "vllm", command=None, args=["--x"],
                                   resource_version=planned.resource_version)
    assert plane.get("statefulset", "vllm-server", namespace=namespace)["spec"]["template"]["spec"]["containers"][0][
        "args"] == objects.VLLM_ARGS
    fresh = cluster.get_workload(namespace, "statefulset", "vllm-server")
    lowered = [*objects.VLLM_ARGS]
    lowered[lowered.index("--max-model-len") + 1] = "6635"
    done = cluster.set_container_argv(namespace, "statefulset", "vllm-server", "vllm", command=None, args=lowered,
                                      resource_version=fresh.resource_version)
    assert done.container("vllm").args == tuple(lowered)
    with pytest.raises(StalePlan, match="changed since this change was planned .*--max-model-len 6635"):
        cluster.set_container_argv(namespace, "statefulset", "vllm-server", "vllm", command=None,
                                   args=["--max-model-len", "4096"], expected=planned.container("vllm"))
    stored = plane.get("statefulset", "vllm-server", namespace=namespace)["spec"]["template"]["spec"]["containers"][0]
    assert stored["args"] == lowered
    assert [("dryRun=All" in e["requestURI"], e["responseStatus"]["code"]) for e in plane.audited(
        namespace, verb="patch", resource="statefulsets", user=runbook_user(namespace))] == [
        (False, 409), (False, 200)]  # the stale one refused by the apiserver, the second never sent
