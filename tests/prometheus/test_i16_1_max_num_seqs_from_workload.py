"""Issue 16, item 1: the running-batch line (> 95% of --max-num-seqs) is the server's own. With a
cluster, `runbook rules --workload KIND/NAME` reads the flag from the workload's containers (the
test API server, through the official client); a workload that does not set it is refused, never
given vLLM's default, which depends on the GPU.
"""

from __future__ import annotations

import yaml
from click.testing import CliRunner

from runbook.cli import main
from tests.standin import world
from tests.standin.conftest import apiserver, k8s, kubeconfig

SERVER_FIXTURES = (apiserver, k8s, kubeconfig)  # the test API server's fixtures, used here by name


def rules(*args: str):
    return CliRunner().invoke(main, ["rules", *args], catch_exceptions=False)


def batch_rule(text: str) -> dict | None:
    found = [r for g in yaml.safe_load(text)["groups"] for r in g["rules"] if r["alert"] == "VllmRunningBatchFull"]
    return found[0] if found else None


def test_the_flag_is_read_from_the_workload(k8s, kubeconfig):
    k8s.apply(world.workload("StatefulSet", "vllm-big", labels={"app": "vllm-big"}, containers=[
        {"name": "vllm", "image": "docker.io/vllm/vllm-openai:v0.10.0", "command": list(world.VLLM_COMMAND),
         "args": [*world.VLLM_ARGS, "--max-num-seqs", "128"]}]))
    result = rules("-n", "llm", "--workload", "statefulset/vllm-big", "--kubeconfig", str(kubeconfig),
                   "--context", "runbook-test")
    assert result.exit_code == 0, result.output
    rule = batch_rule(result.stdout)
    assert rule is not None
    assert rule["expr"] == 'max by (namespace, pod) (vllm:num_requests_running{namespace="llm"} / 128) > 0.95'
    assert "max_num_seqs 128: read from statefulset/vllm-big's --max-num-seqs in namespace llm" in result.stderr


def test_a_workload_without_the_flag_is_refused_not_guessed(k8s, kubeconfig):
    result = rules("-n", "llm", "--workload", "statefulset/vllm-server", "--kubeconfig", str(kubeconfig),
                   "--context", "runbook-test")
    assert result.exit_code == 3
    assert "does not set --max-num-seqs" in result.output and "-p max_num_seqs=N" in result.output


def test_workload_needs_a_namespace_and_a_well_formed_name(kubeconfig):
    assert "needs --namespace" in rules("--workload", "statefulset/x", "--kubeconfig", str(kubeconfig)).output
    bad = rules("-n", "llm", "--workload", "vllm-server", "--kubeconfig", str(kubeconfig), "--context", "runbook-test")
    assert bad.exit_code == 3 and "give KIND/NAME, e.g. statefulset/vllm-server" in bad.output
    both = rules("-n", "llm", "-p", "max_num_seqs=8", "--workload", "statefulset/x", "--kubeconfig", str(kubeconfig))
    assert both.exit_code == 2 and "not both" in both.output


def test_triage_reads_it_from_the_workload_for_the_running_batch_line(k8s, kubeconfig, prometheus):
    import json

    from tests.prometheus.data import SCENARIOS

    k8s.apply(world.workload("StatefulSet", "vllm-small", labels={"app": "vllm-small"}, containers=[
        {"name": "vllm", "image": "docker.io/vllm/vllm-openai:v0.10.0", "command": list(world.VLLM_COMMAND),
         "args": [*world.VLLM_ARGS, "--max-num-seqs=16"]}]))
    result = CliRunner().invoke(main, ["triage", "--prometheus-url", prometheus.url, "-o", "json", "-n", "llm",
                                       "--workload", "statefulset/vllm-small", "--kubeconfig", str(kubeconfig),
                                       "--context", "runbook-test", "--at", SCENARIOS["oom-surge"].at.isoformat()],
                                catch_exceptions=False)
    doc = json.loads(result.stdout)
    batch = next(w for w in doc["warnings"] if w["alert"] == "VllmRunningBatchFull")
    assert batch["state"] != "skipped" and batch["labels"]["namespace"] == "llm"
    assert "max_num_seqs 16: read from statefulset/vllm-small's --max-num-seqs" in result.stderr
