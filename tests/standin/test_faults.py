"""Injected faults give the documented behaviour within their deadlines: retry, re-plan, or a clear error."""

from __future__ import annotations

import time

import pytest

from runbook.errors import StalePlan, BackendUnavailable
from tests.standin.conftest import connect_cluster

STS = "/apis/apps/v1/namespaces/llm/statefulsets/vllm-server"


def test_429_is_retried_after_retry_after(k8s, cluster):
    fault = k8s.inject(method="GET", path=r"/pods$", status=429, retry_after=1)
    started = time.monotonic()
    pods = cluster.list_pods("llm", {"app": "vllm-server"})
    elapsed = time.monotonic() - started
    assert len(pods) == 3 and fault.hits == 1
    assert 1.0 <= elapsed < 2.0  # waited the Retry-After second, not the backoff's guess
    assert [s.code for s in k8s.seen if s.resource == "pods"] == [429, 200]


def test_500_on_a_write_is_retried_and_the_write_lands_once(k8s, cluster):
    k8s.inject(method="PATCH", path=r"/scale$", status=500, times=1)
    assert cluster.scale("llm", "statefulset", "vllm-server", 2).replicas == 2
    patches = [s.code for s in k8s.seen if s.resource == "statefulsets/scale" and s.verb == "patch"]
    assert patches == [500, 200]


def test_a_write_whose_answer_was_lost_is_recognised_as_done(k8s, cluster):
    """The PATCH lands but its answer is lost (500); the retry meets 409, the re-read shows the
    change made: done, not "someone else scaled it"."""
    k8s.inject(method="PATCH", path=r"/scale$", status=500, after=True)
    assert cluster.scale("llm", "statefulset", "vllm-server", 1).replicas == 1
    k8s.inject(method="PATCH", path=STS + "$", status=500, after=True)
    done = cluster.set_container_argv("llm", "statefulset", "vllm-server", "vllm", command=None, args=["--y"])
    assert done.container("vllm").args == ("--y",)
    codes = [(s.resource, s.code) for s in k8s.seen if s.method == "PATCH"]
    assert codes == [("statefulsets/scale", 500), ("statefulsets/scale", 409),
                     ("statefulsets", 500), ("statefulsets", 409)]


def test_retries_are_bounded_and_the_error_says_what_happened(k8s, kubeconfig):
    cluster = connect_cluster(kubeconfig, retries=2)
    try:
        k8s.inject(method="GET", path=r"/nodes/", status=503, times=100)
        started = time.monotonic()
        with pytest.raises(BackendUnavailable, match=r"HTTP 503 \(after 3 attempts\)"):
            cluster.get_node("gpu-node-1")
        assert time.monotonic() - started < 3
    finally:
        cluster.close()


def test_a_retry_after_longer_than_the_budget_fails_at_once(k8s, kubeconfig):
    cluster = connect_cluster(kubeconfig, max_retry_wait=5)
    try:
        k8s.inject(method="GET", path=r"/nodes/", status=429, retry_after=60, times=1)
        started = time.monotonic()
        with pytest.raises(BackendUnavailable, match=r"throttling.*asked to wait 60s"):
            cluster.get_node("gpu-node-1")
        assert time.monotonic() - started < 1
    finally:
        cluster.close()


def test_latency_past_the_request_timeout_is_unavailable_not_empty(k8s, kubeconfig):
    cluster = connect_cluster(kubeconfig, request_timeout=0.5, retries=1)
    try:
        k8s.inject(method="GET", path=r"/pods$", status=None, delay=3, times=2)
        started = time.monotonic()
        with pytest.raises(BackendUnavailable, match="cannot reach the Kubernetes API.*after 2 attempts"):
            cluster.list_pods("llm", {"app": "vllm-server"})
        assert time.monotonic() - started < 2.5
    finally:
        cluster.close()


def test_an_unreachable_api_server_is_unavailable(tmp_path, k8s):
    path = k8s.kubeconfig(tmp_path / "kubeconfig")
    path.write_text(path.read_text().replace(k8s.url, "https://127.0.0.1:9"))
    cluster = connect_cluster(path, retries=1)
    try:
        with pytest.raises(BackendUnavailable, match="cannot reach the Kubernetes API at https://127.0.0.1:9"):
            cluster.get_workload("llm", "statefulset", "vllm-server")
    finally:
        cluster.close()


def test_f1_a_409_is_a_stale_plan_for_the_engine_to_plan_again(k8s, cluster):
    """The object changed between our read and our patch: the engine re-plans and re-runs the guards
    (finding 1), the backend never re-sends on its own."""
    def status_churn():
        k8s.edit("StatefulSet", "llm", "vllm-server", lambda o: o["metadata"].setdefault("annotations", {}).update(x="1"))

    k8s.inject(method="PATCH", path=r"/scale$", status=None, before=status_churn)
    with pytest.raises(StalePlan, match="changed since this change was planned"):
        cluster.scale("llm", "statefulset", "vllm-server", 1)
    codes = [(s.method, s.code) for s in k8s.seen if s.resource == "statefulsets/scale"]
    assert codes == [("GET", 200), ("PATCH", 409), ("GET", 200)]
    assert k8s.get("StatefulSet", "llm", "vllm-server")["spec"]["replicas"] == 3


def test_409_from_someone_else_scaling_is_a_conflict_not_an_overwrite(k8s, cluster):
    def someone_scales():
        k8s.edit("StatefulSet", "llm", "vllm-server", lambda o: o["spec"].update(replicas=5))

    k8s.inject(method="PATCH", path=r"/scale$", status=None, before=someone_scales)
    with pytest.raises(StalePlan, match="it has 5 replicas now"):
        cluster.scale("llm", "statefulset", "vllm-server", 1)
    assert k8s.get("StatefulSet", "llm", "vllm-server")["spec"]["replicas"] == 5


def test_409_on_an_args_patch_re_plans_against_the_new_args(k8s, cluster):
    def someone_edits_args():
        k8s.edit("StatefulSet", "llm", "vllm-server", lambda o: o["spec"]["template"]["spec"]["containers"][0]
                 .update(args=["--max-model-len", "4096"]))

    k8s.inject(method="PATCH", path=STS + "$", status=None, before=someone_edits_args)
    with pytest.raises(StalePlan, match="changed since this change was planned"):
        cluster.set_container_argv("llm", "statefulset", "vllm-server", "vllm", command=None,
                                   args=["--max-model-len", "6635"])
    args = k8s.get("StatefulSet", "llm", "vllm-server")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["--max-model-len", "4096"]


def test_a_retried_delete_never_deletes_the_replacement(k8s, cluster):
    """The first DELETE is carried out but its answer is lost (500); the retry meets the
    replacement pod of the same name and its uid precondition spares it."""
    pod = next(p for p in cluster.list_pods("llm", {"app": "vllm-server"}) if p.name == "vllm-server-0")
    k8s.inject(method="DELETE", path=r"/pods/vllm-server-0$", status=500, after=True)
    cluster.delete_pod("llm", "vllm-server-0", uid=pod.uid)
    deletes = [(s.code) for s in k8s.seen if s.method == "DELETE"]
    assert deletes == [500, 409]  # carried out once; the retry was refused by the precondition
    replacement = k8s.get("Pod", "llm", "vllm-server-0")
    assert replacement["metadata"]["uid"] != pod.uid
    assert len([p for p in k8s.pods() if p["metadata"]["labels"].get("app") == "vllm-server"]) == 3


def test_closing_the_cluster_closes_every_connection_it_opened(k8s, kubeconfig):
    """After a refused request too: its error keeps the response (and so its pool) alive, and urllib3's
    PoolManager.clear() alone left such a pool's connection open until the garbage collector ran."""
    cluster = connect_cluster(kubeconfig, retries=0)
    try:
        k8s.inject(method="GET", path=r"/pods$", status=503, times=1)
        with pytest.raises(BackendUnavailable) as refused:
            cluster.list_pods("llm", {"app": "vllm-server"})
        assert cluster.list_pods("llm", {"app": "vllm-server"})
        manager = cluster.api.client.rest_client.pool_manager
        opened = [conn for key in manager.pools.keys() for conn in list(manager.pools.get(key).pool.queue) if conn]
        assert opened and all(conn.sock is not None for conn in opened)
    finally:
        cluster.close()
    assert all(conn.sock is None for conn in opened), "a connection to the API server is still open"
    assert "503" in str(refused.value) or "unavailable" in str(refused.value).lower()
