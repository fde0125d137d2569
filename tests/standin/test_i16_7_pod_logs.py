"""The previous log of a container that never restarted, as a real kubelet refuses it (issue 16, item 7):
kwok's log server answers otherwise, so this check stays on the stand-in (the rest is on tests/controlplane)."""

from __future__ import annotations

import pytest

from runbook.errors import InvalidInput


def test_a_kubelet_refuses_the_previous_log_of_a_container_that_never_restarted(k8s, cluster):
    core = cluster.api.core
    with pytest.raises(InvalidInput, match='previous terminated container "vllm" in pod "vllm-server-0" not found'):
        cluster.api.call("read", core.read_namespaced_pod_log, "vllm-server-0", "llm", previous=True, max_bytes=100)
    assert [s.code for s in k8s.seen if s.path.endswith("/log")] == [400]
