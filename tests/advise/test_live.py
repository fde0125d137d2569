"""`runbook advise statefulset/vllm-server -n llm` reads the live workload from the test API server (the
official client, over loopback) and lints it like a manifest; a workload that is not there is a clear error."""

from __future__ import annotations

import json

from tests.cli.helpers import runbook

# The seeded StatefulSet (tests/standin/world.py): Meta-Llama-3-8B-Instruct, --max-model-len 7372,
# --gpu-memory-utilization=0.9, no nodeSelector, so the GPU is given here.


def test_a_live_statefulset_is_read_and_linted(kubeconfig):
    result = runbook("advise", "statefulset/vllm-server", "-n", "llm", "--kubeconfig", str(kubeconfig),
                     "--context", "runbook-test", "--gpu", "A10G-24", "-o", "json")
    assert result.exit_code == 10, result.output
    [advice] = json.loads(result.stdout)["workloads"]
    assert (advice["workload"], advice["container"], advice["model"]) == (
        "statefulset/vllm-server", "vllm", "meta-llama/Meta-Llama-3-8B-Instruct")
    assert advice["where"] == "statefulset/vllm-server in llm (live) containers[0]"
    assert [(f["check"], f["current"], f["suggested"]) for f in advice["findings"]] == [
        ("gpu-memory-utilization", "0.9", "0.82"),
        ("max-num-seqs", None, "128"),
        ("block-size", None, "32"),
    ]
    # 7372 fits: A10G 23028 MiB x 0.82 = 19800218664 B, less 16060000000 B of weights, / 131072 B per token
    # = 28535 tokens; 90% is 25681, above the model's 8192 positions, so the SOP's line is 8192.


def test_the_gpu_is_needed_when_the_workload_does_not_say(kubeconfig):
    result = runbook("advise", "statefulset/vllm-server", "-n", "llm", "--kubeconfig", str(kubeconfig),
                     "--context", "runbook-test")
    assert result.exit_code == 3
    assert "cannot tell which GPU statefulset/vllm-server runs on" in result.stderr
    assert "give --gpu NAME" in result.stderr


def test_a_workload_that_is_not_there_and_one_without_vllm(kubeconfig):
    base = ("-n", "llm", "--kubeconfig", str(kubeconfig), "--context", "runbook-test", "--gpu", "L4-24")
    missing = runbook("advise", "statefulset/nope", *base)
    assert missing.exit_code == 1
    assert "statefulset/nope" in missing.stderr and "Traceback" not in missing.stderr
    gateway = runbook("advise", "deployment/api-gateway", *base)
    assert gateway.exit_code == 3
    assert "deployment/api-gateway in llm: no vLLM container (looked at deployment/api-gateway (containers: gateway))" \
        in gateway.stderr


def test_a_bad_reference_is_refused_before_any_connection():
    result = runbook("advise", "vllm-server")
    assert result.exit_code == 3
    assert "'vllm-server' is not a workload: give KIND/NAME" in result.stderr
    result = runbook("advise", "statefulset/vllm-server", "-n", "llm", env={"KUBECONFIG": ""})
    assert result.exit_code == 2
    assert "no cluster to read the workload from" in result.stderr


def test_without_n_the_kubeconfig_contexts_namespace_is_read(k8s, tmp_path):
    """As kubectl: the context's namespace (llm in this kubeconfig), and `default` where it names none."""
    llm = k8s.kubeconfig(tmp_path / "llm")
    result = runbook("advise", "statefulset/vllm-server", "--kubeconfig", str(llm), "--gpu", "A10G-24", "-o", "json")
    assert result.exit_code == 10, result.output
    [advice] = json.loads(result.stdout)["workloads"]
    assert advice["where"] == "statefulset/vllm-server in llm (live) containers[0]"
    unset = k8s.kubeconfig(tmp_path / "unset", namespace="")
    result = runbook("advise", "statefulset/vllm-server", "--kubeconfig", str(unset), "--gpu", "A10G-24")
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    assert "in default" in result.stderr, result.stderr
