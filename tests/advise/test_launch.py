"""Reading vLLM's command line out of a container: both forms, `sh -c`, `_` spellings, boolean flags,
$(VAR) from the env; and the capacity arithmetic on the SOP's own example."""

from __future__ import annotations

from fractions import Fraction

from runbook.advise.capacity import capacity, safe_max_model_len
from runbook.advise.launch import read_launch
from runbook.advise.tables import bundled_model, gpu_by_name


def test_vllm_serve_with_the_model_as_its_first_word():
    launch = read_launch({"name": "v", "command": ["vllm", "serve"],
                          "args": ["/models/Llama-3.1-8B-Instruct", "--max_model_len", "8192", "--enforce-eager",
                                   "--block-size=32", "--enable-chunked-prefill", "false"]})
    assert launch.form == "vllm serve"
    assert (launch.model, launch.model_where) == ("/models/Llama-3.1-8B-Instruct", "args[0]")
    assert launch.value("--max-model-len") == "8192" and launch.flags["--max-model-len"].where == "args[2]"
    assert launch.flags["--max-model-len"].spelling == "--max_model_len"
    assert launch.on("--enforce-eager") and launch.value("--block-size") == "32"
    assert not launch.on("--enable-chunked-prefill")
    # A local path ending in the table's name is that model.
    assert bundled_model(launch.model).name == "meta-llama/Llama-3.1-8B-Instruct"


def test_the_api_server_module_and_env_references():
    launch = read_launch({"name": "v", "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
                          "args": ["--model=$(MODEL_ID)", "--max-model-len=$(LEN)"],
                          "env": [{"name": "MODEL_ID", "value": "google/gemma-3-27b-it"},
                                  {"name": "LEN", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "len"}}}]})
    assert launch.form == "vllm.entrypoints.openai.api_server"
    assert launch.model == "google/gemma-3-27b-it"
    # Set from elsewhere: left as written, so the check says it cannot read it rather than guess.
    assert launch.value("--max-model-len") == "$(LEN)"


def test_a_shell_script_and_a_container_without_vllm():
    launch = read_launch({"name": "v", "command": ["bash", "-ec"],
                          "args": ["nvidia-smi; exec vllm serve Qwen/Qwen2.5-7B-Instruct --max-num-seqs 64 && echo done"]})
    assert launch.model == "Qwen/Qwen2.5-7B-Instruct"
    assert launch.value("--max-num-seqs") == "64" and launch.flags["--max-num-seqs"].where == "args[0] (shell script)"
    assert "--echo" not in launch.flags
    assert read_launch({"name": "nginx", "image": "nginx", "args": ["-g", "daemon off;"]}) is None


def test_the_sops_a10_example_gqa_aware():
    # The SOP's A10 + Llama-3-8B: the article's hidden-size formula gave 8192 (deployed 7372). Counting KV heads
    # (8, not 32 heads' worth of hidden size), one A10 holds 28535 tokens after the weights at 0.82; 90% is
    # 25681, above the model's 8192 positions, so the SOP's line is the model's own limit.
    model, gpu = bundled_model("meta-llama/Meta-Llama-3-8B-Instruct"), gpu_by_name("A10-24")
    room = capacity(model, gpu, weight_bytes=Fraction(2), kv_dtype_bytes=2)
    assert (room.kv_bytes_per_token_per_gpu, room.ceiling, room.safe) == (131072, 28535, 8192)
    assert 2 * 32 * 4096 * 2 == 4 * room.kv_bytes_per_token_per_gpu  # the article's estimate: 4x the real KV
    # Llama-3.1-70B on H100s: TP 4 splits weights and the 8 KV heads (2 per GPU).
    big = bundled_model("meta-llama/Llama-3.1-70B-Instruct")
    h100 = gpu_by_name("h100-80")
    assert safe_max_model_len(big, h100, tp=1) == 0  # 141.2 GB of weights on one 80 GB GPU: no room at all
    four = capacity(big, h100, weight_bytes=Fraction(2), kv_dtype_bytes=2, tp=4)
    assert four.kv_bytes_per_token_per_gpu == 2 * 80 * 2 * 128 * 2
    assert four.weight_bytes_per_gpu == 70_600_000_000 * 2 // 4


def test_no_model_on_the_command_line_is_said(tmp_path):
    from tests.cli.helpers import runbook

    path = tmp_path / "d.yaml"
    path.write_text("kind: Pod\nmetadata: {name: p}\nspec:\n  nodeSelector: {nvidia.com/gpu.product: NVIDIA-L4}\n"
                    "  containers: [{name: v, command: [python3, -m, vllm.entrypoints.openai.api_server]}]\n")
    result = runbook("advise", "-f", str(path))
    assert result.exit_code == 3
    assert "pod/p container v: no --model on the command line: vLLM would serve its own default model; give the " \
           "model with --model NAME" in result.stderr


def test_gpu_names_complete():
    from runbook.cli.advise import _gpu_names

    assert [item.value for item in _gpu_names("a1")] == ["A10G-24", "A10-24", "A100-40", "A100-80"]
