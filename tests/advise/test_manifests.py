"""`runbook advise -f` over manifests the project wrote (tests/advise/data): a clean one exits 0, one
with every mistake gets each finding in order and exits 10; JSON, options and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.helpers import runbook

DATA = Path(__file__).resolve().parent / "data"


def advise(*args: str, env: dict[str, str] | None = None):
    return runbook("advise", *args, env=env)


def test_a_manifest_that_follows_the_sop_is_clean():
    result = advise("-f", str(DATA / "clean-llama-h100.yaml"))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("statefulset/vllm-server container vllm (")
    assert "model meta-llama/Llama-3.1-8B-Instruct (bundled table)" in lines[0]
    assert "GPU H100-80 (nodeSelector nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3)" in lines[0]
    assert "  every flag checked agrees with the SOP" in lines
    assert lines[-1] == "No findings."
    # The gateway runs no vLLM and the Service is no workload: neither is reported.
    assert "api-gateway" not in result.stdout


def test_every_mistake_is_found_in_order():
    result = advise("-f", str(DATA / "everything-wrong.yaml"), "-o", "json")
    assert result.exit_code == 10, result.output
    doc = json.loads(result.stdout)
    first, second = doc["workloads"]
    assert first["workload"] == "deployment/llama-l4" and first["gpu"] == "L4-24"
    assert [(f["check"], f["flag"], f["current"], f["suggested"]) for f in first["findings"]] == [
        ("max-seq-len", "--max-seq-len", "30000", "--max-model-len=30000"),
        ("gpu-memory-utilization", "--gpu-memory-utilization", None, "0.82"),
        # L4: 23034 MiB = 24152899584 B x 0.82 = 19805377658; Llama-3.1-8B bf16 weights 16060000000;
        # KV 2 x 32 x 8 x 128 x 2 = 131072 B/token; 3745377658 / 131072 = 28574; 90% = 25716.
        ("max-model-len", "--max-seq-len", "30000", "25716"),
        ("max-num-seqs", "--max-num-seqs", "512", "128"),
        ("enforce-eager", "--enforce-eager", None, None),
        ("block-size", "--block-size", "16", "32"),
    ]
    # Read out of `sh -c`, its `_` spelling taken as vLLM's parser takes it.
    assert first["findings"][0]["where"] == "args[0] (shell script)"
    assert second["workload"] == "statefulset/mistral-a100"
    # nvidia-tesla-a100 (40 GB) from a required node affinity with one value.
    assert second["gpu_source"] == "nodeSelector cloud.google.com/gke-accelerator=nvidia-tesla-a100"
    assert [(f["check"], f["current"], f["suggested"], f["severity"]) for f in second["findings"]] == [
        ("tensor-parallel-size", "2", "1", "error"),
        # TP 2 leaves room for 426768 tokens, but the model knows only 32768 positions.
        ("max-position-embeddings", "65536", "32768", "error"),
    ]
    assert doc["findings"] == 8


def test_batch_sizes_and_chunked_prefill_from_the_traffic():
    result = advise("-f", str(DATA / "everything-wrong.yaml"), "--avg-concurrency", "20",
                    "--p95-prompt-tokens", "1000", "-o", "json")
    assert result.exit_code == 10
    first = json.loads(result.stdout)["workloads"][0]
    found = {f["check"]: f for f in first["findings"]}
    # min(128, 2 x 20) = 40; 1.5 x 1000 x 40 = 60000 < 65536.
    assert (found["max-num-seqs"]["suggested"], found["max-num-seqs"]["arithmetic"]) == ("40", ["min(128, 2 x 20) = 40"])
    assert (found["max-num-batched-tokens"]["current"], found["max-num-batched-tokens"]["suggested"]) == ("65536", "60000")
    assert found["max-num-batched-tokens"]["arithmetic"] == ["1.5 x 1000 x 40 = 60000"]
    # P95 1000 tokens is under the SOP's 2048: chunked prefill off.
    assert (found["chunked-prefill"]["flag"], found["chunked-prefill"]["suggested"]) == ("--enable-chunked-prefill", None)
    assert first["unchecked"] == []


def test_gpu_given_on_the_command_line_wins():
    result = advise("-f", str(DATA / "clean-llama-h100.yaml"), "--gpu", "L4-24", "-o", "json")
    assert result.exit_code == 10
    [advice] = json.loads(result.stdout)["workloads"]
    assert (advice["gpu"], advice["gpu_source"]) == ("L4-24", "--gpu L4-24")
    # 32768 tokens do not fit once at 0.82 (28574) nor at the manifest's 0.82: vLLM would not start.
    [finding] = advice["findings"]
    assert (finding["check"], finding["suggested"], finding["severity"]) == ("max-model-len-too-large", "25716", "error")


def test_an_unknown_model_needs_its_config_json():
    result = advise("-f", str(DATA / "unknown-model.yaml"))
    assert result.exit_code == 3
    assert "model '/models/tiny-llama' (command[2]) is not in runbook's table" in result.stderr
    assert "give its config.json with --model-config PATH" in result.stderr
    assert "Traceback" not in result.stderr

    result = advise("-f", str(DATA / "unknown-model.yaml"), "--model-config", str(DATA / "tiny-llama-config.json"),
                    "-o", "json")
    assert result.exit_code == 10
    [advice] = json.loads(result.stdout)["workloads"]
    assert advice["model"] == "example/tiny-llama"
    [finding] = advice["findings"]
    # head dim = 2048 / 32 = 64; KV 2 x 22 x 4 x 64 x 2 = 22528 B/token; 4096 > max_position_embeddings 2048.
    assert (finding["check"], finding["suggested"]) == ("max-position-embeddings", "2048")
    assert "KV per token = 2 x 22 layers x 4 KV heads per GPU x 64 head dim x 2 B = 22528 B" in finding["arithmetic"]


@pytest.mark.parametrize("text, message", [
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
     "no vLLM container (looked at no Deployment, StatefulSet, DaemonSet or Pod)"),
    ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n"
     "      containers: [{name: nginx, image: nginx}]\n",
     "no vLLM container (looked at deployment/web (containers: nginx))"),
    ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: v}\nspec:\n  template:\n    spec:\n"
     "      containers: [{name: v, command: [vllm, serve, google/gemma-3-27b-it]}]\n",
     "cannot tell which GPU deployment/v runs on"),
    ("kind: Deployment\nmetadata: {name: v}\nspec: {}\n", "Deployment/v has no spec.template.spec"),
    ("kind: [unclosed\n", "deploy.yaml"),
])
def test_bad_input_says_where_and_how_to_fix(tmp_path, text, message):
    path = tmp_path / "deploy.yaml"
    path.write_text(text)
    result = advise("-f", str(path))
    assert result.exit_code == 3, result.output
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_a_missing_file_and_missing_arguments(tmp_path):
    result = advise("-f", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 3
    assert f"cannot read {tmp_path / 'nope.yaml'}: No such file or directory" in result.stderr
    assert advise().exit_code == 2
    result = advise("-f", str(DATA / "clean-llama-h100.yaml"), "--gpu", "B300")
    assert result.exit_code == 3 and "--gpu B300: not a GPU runbook knows" in result.stderr
