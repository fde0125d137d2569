"""Values `advise` cannot read are said, never guessed: a model set from a Secret, a flag computed from a
ConfigMap; and the by-name capacity function a --max-model-len floor could use."""

from __future__ import annotations

import json

import pytest

from runbook.advise.capacity import safe_max_model_len_for
from tests.cli.helpers import runbook

MANIFEST = """\
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: vllm, namespace: llm}
spec:
  template:
    spec:
      nodeSelector: {cloud.google.com/gke-accelerator: nvidia-h100-80gb}
      containers:
        - name: vllm
          command: [python3, -m, vllm.entrypoints.openai.api_server]
          args: [--model=$(MODEL_ID), --max-model-len=$(MAX_LEN), --gpu-memory-utilization=0.82, --max-num-seqs=64,
                 --block-size=32]
          env:
            - name: MODEL_ID
              valueFrom: {secretKeyRef: {name: model, key: id}}
            - name: MAX_LEN
              valueFrom: {configMapKeyRef: {name: vllm, key: max-len}}
"""


def test_a_model_from_a_secret_needs_model(tmp_path):
    path = tmp_path / "sts.yaml"
    path.write_text(MANIFEST)
    result = runbook("advise", "-f", str(path))
    assert result.exit_code == 3
    assert "the model is '$(MODEL_ID)' (args[0]), which runbook cannot read; give the model with --model NAME" \
        in result.stderr

    result = runbook("advise", "-f", str(path), "--model", "Qwen/Qwen2.5-72B-Instruct", "-o", "json")
    [advice] = json.loads(result.stdout)["workloads"]
    assert advice["model"] == "Qwen/Qwen2.5-72B-Instruct"
    # 72.7B params in bf16 do not fit one H100: the length check says so, with no value to suggest.
    [finding] = advice["findings"]
    assert (finding["check"], finding["severity"], finding["suggested"]) == ("max-model-len", "error", None)
    assert "leave no KV cache room on one H100-80" in finding["reason"]
    assert advice["unchecked"][0] == ("--max-model-len '$(MAX_LEN)' (args[1]) is not a number written in place "
                                      "(computed elsewhere?): not checked")
    assert result.exit_code == 10


def test_the_safe_length_by_name():
    # Llama-3.1-8B on an L4: 25716 (tests/advise/test_manifests.py has the arithmetic).
    assert safe_max_model_len_for("meta-llama/Llama-3.1-8B-Instruct", "L4-24") == 25716
    assert safe_max_model_len_for("example/unknown", "L4-24") is None
    assert safe_max_model_len_for("meta-llama/Llama-3.1-8B-Instruct", "B300") is None


MIG = """\
kind: Deployment
metadata: {name: small}
spec:
  template:
    spec:
      nodeSelector: {cloud.google.com/gke-accelerator: nvidia-a100-80gb}
      containers:
        - name: vllm
          command: [vllm, serve, Qwen/Qwen2.5-7B-Instruct, --max-model-len, "32768", --gpu-memory-utilization,
                    "0.82", --max-num-seqs, "16", --block-size, "32"]
          resources: {limits: {nvidia.com/mig-2g.20gb: 1}}
"""


def test_a_mig_slice_is_all_the_container_gets(tmp_path):
    path = tmp_path / "mig.yaml"
    path.write_text(MIG)
    result = runbook("advise", "-f", str(path), "-o", "json")
    [advice] = json.loads(result.stdout)["workloads"]
    # Not the node's A100 80GB: the 2g.20gb slice, counted as its nominal 20 GB (the real slice is a little more).
    assert (advice["gpu"], advice["gpu_source"]) == ("MIG 2g.20gb", "resources.limits nvidia.com/mig-2g.20gb")
    # 20000000000 x 0.82 = 16400000000; weights 7.62e9 x 2 = 15240000000; KV 2 x 28 x 4 x 128 x 2 = 57344 B/token;
    # 1160000000 / 57344 = 20228 tokens; 90% = 18205.
    [finding] = advice["findings"]
    assert (finding["check"], finding["current"], finding["suggested"]) == ("max-model-len-too-large", "32768", "18205")
    assert result.exit_code == 10


def test_flags_from_a_config_file_or_an_env_var_are_said_not_read(tmp_path):
    path = tmp_path / "kserve.yaml"
    path.write_text(MIG.replace('          resources: {limits: {nvidia.com/mig-2g.20gb: 1}}\n',
                                '          args: [--config, /etc/vllm/config.yaml]\n'
                                '          env: [{name: VLLM_ADDITIONAL_ARGS, value: "--max_model_len 4096"}]\n'))
    result = runbook("advise", "-f", str(path), "-o", "json")
    [advice] = json.loads(result.stdout)["workloads"]
    assert advice["unchecked"][-2:] == [
        "--config /etc/vllm/config.yaml (args[1]): flags in that file are not read; only the command line is checked",
        "env VLLM_ADDITIONAL_ARGS holds launch flags (as KServe's VLLM_ADDITIONAL_ARGS does), which are not read; "
        "only the command line is checked",
    ]


UNSET = """\
kind: Deployment
metadata: {name: llama}
spec:
  template:
    spec:
      nodeSelector: {cloud.google.com/gke-accelerator: GPU}
      containers:
        - name: vllm
          command: [vllm, serve, meta-llama/Llama-3.1-8B-Instruct, --gpu-memory-utilization, "0.82", --max-num-seqs,
                    "16", --block-size, "32"]
"""


@pytest.mark.parametrize("gpu, findings", [
    # H100: (70127306014 - 16060000000) / 131072 = 412500 tokens, 90% = 371250 > 131072 positions: the default fits.
    ("nvidia-h100-80gb", []),
    # L4: 25716 is the SOP's line (test_manifests.py); at 0.82 not even one 131072-token sequence fits (28574).
    ("nvidia-l4", [("max-model-len-unset", None, "25716", "error")]),
])
def test_no_max_model_len_is_a_finding_only_where_the_whole_context_does_not_fit(tmp_path, gpu, findings):
    path = tmp_path / "llama.yaml"
    path.write_text(UNSET.replace("GPU", gpu))
    result = runbook("advise", "-f", str(path), "-o", "json")
    [advice] = json.loads(result.stdout)["workloads"]
    assert [(f["check"], f["current"], f["suggested"], f["severity"]) for f in advice["findings"]] == findings
    assert result.exit_code == (10 if findings else 0)
