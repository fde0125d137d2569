"""deploy/rbac.yaml grants exactly what the backend uses: every operation passes under it, and
every verb it grants is used by some operation."""

from __future__ import annotations

import datetime as dt

from runbook.backends.kubernetes.ledger import AppliedLedger
from runbook.record.journal import Application
from runbook.backends.kubernetes.leases import LeaseLocks, lease_name
from tests.standin import world
from tests.standin.apiserver.kubelet import ExecAnswer
from tests.standin.apiserver.rbac import load_policy
from tests.standin.apiserver.server import RBAC


def test_the_manifests_bind_the_role_to_runbooks_service_account():
    policy = load_policy(RBAC, service_account="runbook", namespace="llm")
    assert policy.user == "system:serviceaccount:llm:runbook"
    assert policy.allows("create", "", "pods/exec", "llm", "vllm-server-0")
    assert policy.allows("get", "", "nodes", None, "gpu-node-1")  # the ClusterRole, cluster-wide
    assert not policy.allows("delete", "", "pods", "kube-system", "x")  # the Role is namespaced
    assert not policy.allows("update", "apps", "statefulsets", "llm", "vllm-server")  # only patch
    assert load_policy(RBAC, service_account="someone-else", namespace="llm").rules == ()


def test_every_operation_works_under_the_role_and_every_grant_is_used(k8s, cluster):
    k8s.apply(world.workload("DaemonSet", "dcgm-exporter", labels={"app": "dcgm"}))
    k8s.kubelet.script(["true"], ExecAnswer())
    stale = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    target = "llm/statefulset/vllm-server"
    k8s.apply({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": lease_name(target), "namespace": "llm"},
               "spec": {"holderIdentity": "crashed", "leaseDurationSeconds": 15, "renewTime": stale}})

    with LeaseLocks(cluster).hold(target, holder="tour"):  # create (409), get, update (take over), delete
        pods = cluster.list_pods("llm", {"app": "vllm-server"})
        for kind, name in (("statefulset", "vllm-server"), ("deployment", "api-gateway"),
                           ("daemonset", "dcgm-exporter")):
            workload = cluster.get_workload("llm", kind, name)
            container = workload.containers[0]
            cluster.set_container_argv("llm", kind, name, container.name, command=None, args=[*container.args, "--x"],
                                       dry_run=True)
            if kind != "daemonset":
                cluster.scale("llm", kind, name, workload.replicas, dry_run=True)
        cluster.get_node("gpu-node-1")
        cluster.exec("llm", pods[0].name, "vllm", ["true"], timeout=5)
        cluster.logs("llm", {"app": "vllm-server"}, since_seconds=60)
        cluster.delete_pod("llm", pods[1].name, uid=pods[1].uid, dry_run=True)
        cluster.delete_pod("llm", pods[2].name, uid=pods[2].uid, dry_run=True, evict=True)
        from tests.standin.test_i16_3_routes import seed_routes  # the routes canary-rollback moves

        for kind, name, change in seed_routes(k8s):
            cluster.set_route("llm", kind, name, dry_run=True, **change)  # get, then patch
        from tests.standin.test_i16_8_autoscalers import seed_autoscalers  # what k8s.scale holds (item 8)

        seed_autoscalers(k8s)
        for kind, name in (("statefulset", "vllm-server"), ("deployment", "api-gateway")):
            for scaler in cluster.autoscalers("llm", kind, name):  # list both kinds
                change = ({"min_replicas": 1, "max_replicas": 1} if scaler.kind == "hpa" else {"paused_replicas": 1})
                cluster.set_autoscaler("llm", scaler.kind, scaler.name, dry_run=True, **change)  # get, then patch
        ledger = AppliedLedger(cluster)  # the record cooldowns count: get (404), create, then get, update
        for incident in ("tour-1", "tour-2"):
            ledger.record(target, Application(incident, "k8s.scale", dt.datetime.now(dt.timezone.utc)))

    user = k8s.policy.user
    used = {(group, resource, verb) for who, group, resource, verb in k8s.state.authorized if who == user}
    refused = [s for s in k8s.seen if s.code == 403]
    assert not refused, refused
    assert used == k8s.policy.grants(), ("granted but unused", k8s.policy.grants() - used,
                                         "used but not granted", used - k8s.policy.grants())
