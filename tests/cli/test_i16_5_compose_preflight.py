"""Issue 16, item 5: a Docker Compose playbook needs Prometheus and the SSH inventory, never a cluster;
without them `runbook run` opens no incident and names what to configure."""

from __future__ import annotations

import pytest

from tests.cli.helpers import runbook
from tests.cli.test_i15_6_world_check import NODES, PROMETHEUS, _incidents


@pytest.fixture
def bare(monkeypatch, tmp_path):
    for name in ("KUBECONFIG", "RUNBOOK_PROMETHEUS_URL", "RUNBOOK_CONFIG", "RUNBOOK_KUBE_CONTEXT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no ./runbook.yaml
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.config/runbook/config.yaml
    return tmp_path


def test_run_of_a_compose_playbook_names_prometheus_and_the_nodes_not_a_cluster(bare):
    result = runbook("run", "oom-surge-compose", "--dry-run")
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: playbook oom-surge-compose needs what is not configured, so no incident was opened:\n"
        + PROMETHEUS.format(what="steps oom-now, oom-trend, kv-cache, observe and the re-check before each change")
        + NODES.format(steps="containers, oom-logs, gpu-memory, lower-max-model-len"))
    assert _incidents(bare / "state") == []
