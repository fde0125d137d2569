"""Previous containers' logs and the kubelet's timestamps, over HTTPS through the official client
(issue 16, item 7): what `k8s.logs` reads for OOM evidence on stock vLLM."""

from __future__ import annotations

import datetime as dt

import pytest

from runbook.errors import InvalidInput, NotFound
from runbook.parsers.log_matches import count_matches, split_lines

OOM = ["CUDA out of memory", r"torch\.(cuda\.)?OutOfMemoryError"]


def test_the_previous_container_holds_the_oom_and_the_current_one_does_not(k8s, cluster):
    at = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=90)
    k8s.kubelet.log("llm", "vllm-server-1", "vllm", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
                    at=at)
    k8s.restart_container("llm", "vllm-server-1", "vllm", reason="Error", exit_code=1)
    k8s.kubelet.log("llm", "vllm-server-1", "vllm", "INFO:     Started server process [1]")
    current = {log.pod: log for log in cluster.logs("llm", {"app": "vllm-server"}, since_seconds=600, timestamps=True)}
    previous = {log.pod: log for log in cluster.logs("llm", {"app": "vllm-server"}, since_seconds=600,
                                                     previous=True, timestamps=True)}
    assert "OutOfMemoryError" not in current["vllm-server-1"].text
    assert previous["vllm-server-1"].text.endswith(" torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    # Never restarted: the API's 400 is read as "no previous log", not as a failed read.
    assert previous["vllm-server-0"].absent and previous["vllm-server-0"].text == ""
    lines = split_lines(previous["vllm-server-1"].text)
    assert lines[0].at == at  # the kubelet's RFC 3339 time, read back
    counts = count_matches([(pod, log.text) for pod, log in previous.items()], OOM)
    assert counts.by_pod == {"vllm-server-0": 0, "vllm-server-1": 1, "vllm-server-2": 0}
    assert counts.by_pod_minute == {"vllm-server-1": {at.strftime("%Y-%m-%dT%H:%MZ"): 1}}


def test_the_api_server_answers_log_requests_as_the_real_one(k8s, cluster):
    core = cluster.api.core
    with pytest.raises(NotFound):
        cluster.api.call("read", core.read_namespaced_pod_log, "no-such-pod", "llm", max_bytes=100)
    with pytest.raises(InvalidInput, match='previous terminated container "vllm" in pod "vllm-server-0" not found'):
        cluster.api.call("read", core.read_namespaced_pod_log, "vllm-server-0", "llm", previous=True, max_bytes=100)
    with pytest.raises(InvalidInput, match="sinceSeconds: Invalid value: 0: must be greater than 0"):
        cluster.api.call("read", core.read_namespaced_pod_log, "vllm-server-0", "llm", since_seconds=0, max_bytes=100)
    with pytest.raises(InvalidInput, match="container nope is not valid"):
        cluster.api.call("read", core.read_namespaced_pod_log, "vllm-server-0", "llm", container="nope", max_bytes=100)
    seen = [s for s in k8s.seen if s.path.endswith("/log")]
    assert {s.code for s in seen} == {404, 400, 422}


def test_a_previous_log_is_asked_only_of_pods_whose_status_shows_a_restart(k8s, cluster):
    # Issue 17: a fleet's never-restarted pods cost no round trip for the previous log the API would refuse.
    k8s.kubelet.log("llm", "vllm-server-2", "vllm", "torch.OutOfMemoryError: CUDA out of memory")
    k8s.restart_container("llm", "vllm-server-2", "vllm", reason="Error", exit_code=1)
    before = len([s for s in k8s.seen if s.resource == "pods/log"])
    previous = {log.pod: log for log in cluster.logs("llm", {"app": "vllm-server"}, since_seconds=600, previous=True)}
    asked = [s.name for s in k8s.seen if s.resource == "pods/log"][before:]
    assert asked == ["vllm-server-2"]
    assert previous["vllm-server-0"].absent and previous["vllm-server-1"].absent
    assert "OutOfMemoryError" in previous["vllm-server-2"].text


def test_both_logs_come_from_one_listing_of_the_pods(k8s, cluster):
    # `read: both` (oom-in-logs): the previous and the running containers' logs of the same pods,
    # one list request, not one per kind of log.
    k8s.kubelet.log("llm", "vllm-server-1", "vllm", "torch.OutOfMemoryError: CUDA out of memory")
    k8s.restart_container("llm", "vllm-server-1", "vllm", reason="Error", exit_code=1)
    k8s.kubelet.log("llm", "vllm-server-1", "vllm", "INFO:     Started server process [1]")
    lists = len([s for s in k8s.seen if s.resource == "pods" and s.verb == "list"])
    logs = cluster.logs("llm", {"app": "vllm-server"}, since_seconds=600, with_previous=True)
    assert len([s for s in k8s.seen if s.resource == "pods" and s.verb == "list"]) == lists + 1
    assert [(log.pod, log.previous, log.absent) for log in logs] == [
        ("vllm-server-0", True, True), ("vllm-server-1", True, False), ("vllm-server-2", True, True),
        ("vllm-server-0", False, False), ("vllm-server-1", False, False), ("vllm-server-2", False, False)]
    assert "OutOfMemoryError" in logs[1].text and "OutOfMemoryError" not in logs[4].text
