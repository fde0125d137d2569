"""compose.set_arg's text edit of a Compose file: only the flag's value changes, every other byte stays;
forms it cannot rewrite safely are refused, naming the line (issue 16, item 5)."""

from __future__ import annotations

import pytest

from runbook.commandline.compose_file import ComposeFileError, plan_compose_flag, service_command, sha256
from runbook.commandline.flags import FlagError

LIST_FORM = """\
# vLLM on one host (SOP section 6)
services:
  vllm:
    image: vllm/vllm-openai:v0.6.4   # pinned
    command: ["--model", "meta-llama/Meta-Llama-3-8B-Instruct", "--max-model-len", "8192",
              "--gpu-memory-utilization=0.82"]
    ports: ["8000:8000"]
  nginx:
    image: nginx:1.27
    command: [nginx, -g, "daemon off;", --max-model-len, "8192"]
"""

BLOCK_FORM = """\
services:
  vllm:
    command:
      - --model=meta-llama/Meta-Llama-3-8B-Instruct
      - --max-model-len=8192   # lowered by hand on 03-12
      - '--port=8000'
"""

STRING_FORM = """\
services:
  vllm:
    command: --model meta-llama/Meta-Llama-3-8B-Instruct --max-model-len 8192 --port 8000
"""


def test_a_list_item_is_rewritten_and_nothing_else():
    edit = plan_compose_flag(LIST_FORM, "vllm", "--max-model-len", factor=0.9, floor=2048)
    assert (edit.before, edit.after) == ("8192", "7373")
    assert edit.text == LIST_FORM.replace('"8192",\n', '"7373",\n', 1)
    assert service_command(edit.text, "nginx")[-1] == "8192"  # the other service keeps its own


def test_a_block_item_keeps_its_comment():
    edit = plan_compose_flag(BLOCK_FORM, "vllm", "--max-model-len", factor=0.9, floor=2048)
    assert edit.text == BLOCK_FORM.replace("--max-model-len=8192", "--max-model-len=7373")


def test_a_string_command_changes_one_word():
    edit = plan_compose_flag(STRING_FORM, "vllm", "--max-model-len", value=4096)
    assert edit.text == STRING_FORM.replace("8192", "4096")
    assert edit.location == "command (string)"


def test_the_floor_holds():
    edit = plan_compose_flag(BLOCK_FORM.replace("8192", "2100"), "vllm", "--max-model-len", factor=0.9, floor=2048)
    assert edit.after == "2048"


def test_the_hash_is_of_the_text():
    assert sha256("a\n") == "87428fc522803d31065e7bce3cf03fe475096631e5e07bbd7a0fde60c4cf25c7"


@pytest.mark.parametrize("text, service, message", [
    (LIST_FORM, "vllm-server", "no service 'vllm-server' (services: vllm, nginx)"),
    ("services:\n  vllm:\n    image: x\n", "vllm", "has no `command:`"),
    ("services:\n  vllm:\n    command: >\n      --max-model-len 8192\n      --port 8000\n", "vllm", "folded, multi-line"),
    ("services:\n  vllm:\n    command: [\"--max-model-len\", \"81\\x392\"]\n", "vllm", "form runbook does not rewrite"),
    ("x: [", "vllm", "not valid YAML"),
    ("- a\n", "vllm", "no top-level mapping"),
])
def test_refused_with_where_and_why(text, service, message):
    with pytest.raises(ComposeFileError, match=None) as caught:
        plan_compose_flag(text, service, "--max-model-len", factor=0.9, floor=2048)
    assert message in str(caught.value)


def test_a_shared_anchor_is_refused():
    text = ("x-cmd: &cmd [\"--max-model-len\", \"8192\"]\nservices:\n  a:\n    command: *cmd\n  b:\n    command: *cmd\n")
    with pytest.raises(ComposeFileError, match="more than the command of 'a'"):
        plan_compose_flag(text, "a", "--max-model-len", value=4096)


def test_a_missing_flag_is_never_added():
    with pytest.raises(FlagError, match="never adds a flag"):
        plan_compose_flag(STRING_FORM, "vllm", "--max-num-seqs", value=64)
