"""Issue 15, item 6: the world a playbook needs is checked before an incident opens, for `run` and `serve`."""

from __future__ import annotations

import os

import pytest

from tests.cli.helpers import runbook

CLUSTER = ("  - a Kubernetes cluster, for steps {steps}: pass --kubeconfig FILE (and --context NAME when it "
           "holds several), set KUBECONFIG, or pass --in-cluster inside a pod (or the config file's kubernetes: "
           "section)\n")
PROMETHEUS = ("  - Prometheus, for {what}: pass --prometheus-url URL, set RUNBOOK_PROMETHEUS_URL, or put "
              "prometheus: {{url: …}} in the config file\n")
NODES = ("  - the GPU nodes over SSH, for steps {steps}: a nodes: inventory in the config file (--config, "
         "$RUNBOOK_CONFIG, ./runbook.yaml)\n")


@pytest.fixture
def nothing_configured(monkeypatch, tmp_path):
    for name in ("KUBECONFIG", "RUNBOOK_PROMETHEUS_URL", "RUNBOOK_CONFIG", "RUNBOOK_KUBE_CONTEXT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no ./runbook.yaml
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.config/runbook/config.yaml
    return tmp_path


def _incidents(state) -> list[str]:
    folder = state / "incidents"
    return sorted(os.listdir(folder)) if folder.is_dir() else []


def test_item6_run_without_cluster_or_prometheus_opens_no_incident(nothing_configured):
    result = runbook("run", "zombie-process", "--dry-run")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        "Error: playbook zombie-process needs what is not configured, so no incident was opened:\n"
        + CLUSTER.format(steps="pods, listening, processes, health, delete-hung, ready-again")
        + PROMETHEUS.format(what="steps errors, errors-trend, errors-stopped and the re-check before each change"))
    assert _incidents(nothing_configured / "state") == []


def test_item6_run_names_only_what_is_missing(nothing_configured):
    result = runbook("run", "lingering-cuda-context", "--dry-run", "--prometheus-url", "http://127.0.0.1:9")
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: playbook lingering-cuda-context needs what is not configured, so no incident was opened:\n"
        + NODES.format(steps="holders, kill-holders, reset-gpu"))
    assert _incidents(nothing_configured / "state") == []


def test_item6_json_output_gets_the_same_refusal_and_no_document(nothing_configured):
    result = runbook("run", "oom-surge", "--output", "json")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("Error: playbook oom-surge needs what is not configured")


def _never_listen(*args, **kwargs):
    raise AssertionError("runbook serve started listening without the world its playbooks need")


def test_item6_serve_refuses_to_start_without_the_world_its_playbooks_need(nothing_configured, monkeypatch):
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", _never_listen)  # a refusal must come before the server listens
    monkeypatch.setenv("RUNBOOK_ALERTMANAGER_TOKEN", "am-token-0123456789abcdef")
    result = runbook("serve", "--prometheus-url", "http://127.0.0.1:9")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        "Error: runbook serve would accept alerts it cannot run; not configured:\n"
        "  - a Kubernetes cluster, for playbooks canary-rollback, disconnect-storm, latency-creep, oom-surge, prompt-truncation, "
        "waiting-queue, zombie-process: "
        "pass --kubeconfig FILE (and --context NAME when it holds several), set KUBECONFIG, or pass --in-cluster "
        "inside a pod (or the config file's kubernetes: section)\n"
        "  - the GPU nodes over SSH, for playbooks lingering-cuda-context, oom-surge-compose, zombie-process-compose: "
        "a nodes: inventory in the config file "
        "(--config, $RUNBOOK_CONFIG, ./runbook.yaml)\n"
        "Configure them, or serve only the playbooks this server can run with --playbooks.\n")
