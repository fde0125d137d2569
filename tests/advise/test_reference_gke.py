"""`runbook advise -f` over Google's GKE vLLM manifest (gemma-3-27b-it on one A100 80GB, --max-model-len 32768):
the findings a person can check by hand against the SOP's numbers, with the arithmetic written out here."""

from __future__ import annotations

import json

from tests.cli.helpers import runbook
from tests.conftest import reference_path

GKE = "k8s/vllm-deployment-gke-gemma-3-27b-it-max-model-len-32768.yaml"


def test_the_gke_gemma_manifest_gets_the_sops_findings():
    result = runbook("advise", "-f", str(reference_path(GKE)), "-o", "json")
    assert result.exit_code == 10, result.output
    document = json.loads(result.stdout)
    [advice] = document["workloads"]
    assert (advice["workload"], advice["container"], advice["form"]) == (
        "deployment/vllm-gemma-deployment", "inference-server", "vllm.entrypoints.openai.api_server")
    # --model=$(MODEL_ID): Kubernetes expands it from the env written beside it.
    assert advice["model"] == "google/gemma-3-27b-it"
    # nodeSelector cloud.google.com/gke-accelerator: nvidia-a100-80gb
    assert (advice["gpu"], advice["gpu_source"]) == (
        "A100-80", "nodeSelector cloud.google.com/gke-accelerator=nvidia-a100-80gb")

    found = {f["check"]: f for f in advice["findings"]}
    assert list(found) == ["gpu-memory-utilization", "max-model-len", "block-size"]
    assert document["findings"] == 3

    # SOP §5: --gpu-memory-utilization 0.82; the manifest has 0.95.
    assert (found["gpu-memory-utilization"]["current"], found["gpu-memory-utilization"]["suggested"]) == ("0.95", "0.82")
    assert found["gpu-memory-utilization"]["where"] == "args[5]"
    assert found["gpu-memory-utilization"]["location"].endswith(".yaml:54:11")  # `- --gpu-memory-utilization=0.95`

    # --max-model-len by hand, GQA-aware (gemma-3-27b: 62 layers, 16 KV heads, head dim 128, bf16, 27.4B params):
    gpu = 81920 * 2**20  # an A100 80GB: nvidia-smi's 81920 MiB = 85899345920 B
    budget = gpu * 82 // 100  # x 0.82 = 70437463654 B
    weights = 27_400_000_000 * 2  # bf16 = 54800000000 B
    per_token = 2 * 62 * 16 * 128 * 2  # K and V x layers x KV heads x head dim x 2 B = 507904 B
    ceiling = (budget - weights) // per_token  # 15637463654 / 507904 = 30788 tokens
    safe = ceiling * 9 // 10  # the SOP deploys 90%: 27709
    assert (budget, per_token, ceiling, safe) == (70437463654, 507904, 30788, 27709)
    length = found["max-model-len"]
    assert (length["current"], length["suggested"], length["severity"]) == ("32768", "27709", "warning")
    assert length["arithmetic"][:5] == [
        "GPU memory 85899345920 B x 0.82 = 70437463654 B",
        "weights 27400000000 params x 2 B / TP 1 = 54800000000 B per GPU",
        "KV per token = 2 x 62 layers x 16 KV heads per GPU x 128 head dim x 2 B = 507904 B",
        "(70437463654 - 54800000000) / 507904 = 30788 tokens",
        "90% of 30788 = 27709",
    ]
    # Only a warning: at the manifest's own 0.95, (81604378624 - 54800000000) / 507904 = 52774 tokens still hold
    # one 32768-token sequence, so vLLM starts; the SOP's headroom is what is missing.
    assert (gpu * 95 // 100 - weights) // per_token == 52774

    # --block-size not set: vLLM's 16; the SOP's 32.
    assert (found["block-size"]["current"], found["block-size"]["suggested"], found["block-size"]["where"]) == (
        None, "32", "not set")
    # --max-num-seqs=4 is within min(128, …); no --enforce-eager, --max-seq-len or chunked prefill flags.
    assert advice["unchecked"] == ["--max-num-batched-tokens: give --p95-prompt-tokens N (the P95 prompt length) "
                                   "to size it as 1.5 x P95 x --max-num-seqs"]


def test_the_gke_manifest_in_words():
    path = reference_path(GKE)
    result = runbook("advise", "-f", str(path), env={"NO_COLOR": "1"})
    assert result.exit_code == 10
    lines = result.stdout.splitlines()
    # Each finding points at the line of the manifest that holds the flag (the list item, after its "- ").
    written = path.read_text(encoding="utf-8").splitlines()

    def at(text: str) -> str:
        number = next(i for i, line in enumerate(written, start=1) if line.strip() == f"- {text}")
        return f"{path}:{number}:{written[number - 1].index(text) + 1}"

    assert lines[0] == (f"deployment/vllm-gemma-deployment container inference-server ({path}:16 (document 1) "
                        "containers[0]): model google/gemma-3-27b-it (bundled table), GPU A100-80 (nodeSelector "
                        "cloud.google.com/gke-accelerator=nvidia-a100-80gb)")
    assert f"  warning: --max-model-len 32768 -> 27709  [max-model-len] ({at('--max-model-len=32768')} args[6])" in lines
    assert (f"  warning: --gpu-memory-utilization 0.95 -> 0.82  [gpu-memory-utilization] "
            f"({at('--gpu-memory-utilization=0.95')} args[5])") in lines
    assert lines[-1] == "3 findings"
    assert "\x1b[" not in result.stdout
