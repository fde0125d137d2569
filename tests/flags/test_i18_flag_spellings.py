"""Issue 18, item 3: `--max_model_len` and `--max-model-len` are one flag, as vLLM reads them.

vLLM's argument parser turns every `_` of a long option's name into `-`, so a workload may spell the
flag either way; runbook finds it whichever way it is written and rewrites it in that spelling.
"""

from __future__ import annotations

import pytest

from runbook.commandline.flags import FlagError, find_flag, plan_flag_change

VLLM = ("vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct")


@pytest.mark.parametrize(("command", "args", "new_command", "new_args"), [
    (VLLM, ("--max_model_len=8192", "--port=8000"), VLLM, ("--max_model_len=7373", "--port=8000")),
    (VLLM, ("--max_model_len", "8192"), VLLM, ("--max_model_len", "7373")),
    (("sh", "-c", "exec vllm serve m --max_model_len 8192 --port 8000"), (),
     ("sh", "-c", "exec vllm serve m --max_model_len 7373 --port 8000"), ()),
    (VLLM, ("--max-model_len=8192",), VLLM, ("--max-model_len=7373",)),  # vLLM reads any mix
])
def test_max_model_len_underscore_spelling_is_lowered_in_its_own_spelling(command, args, new_command, new_args):
    change = plan_flag_change(command, args, "--max-model-len", factor=0.9, floor=2048)
    dashed = plan_flag_change(command, tuple(a.replace("_", "-") if a.startswith("--") else a for a in args),
                              "--max-model-len", factor=0.9, floor=2048) if args else None
    assert (change.command, change.args) == (new_command, new_args)
    assert (change.before, change.after) == ("8192", "7373")
    if dashed is not None:
        assert (dashed.before, dashed.after) == (change.before, change.after)
    assert change.spelling.replace("_", "-") == "--max-model-len" and "_" in change.spelling


def test_max_model_len_named_with_underscores_finds_the_dashed_flag():
    change = plan_flag_change(VLLM, ("--max-model-len=8192",), "--max_model_len", factor=0.9)
    assert change.args == ("--max-model-len=7373",) and change.spelling == "--max-model-len"
    assert find_flag(VLLM, ("--max_model_len", "8192"), "--max-model-len") == "8192"


def test_max_model_len_both_spellings_at_once_is_ambiguous():
    with pytest.raises(FlagError, match=r"--max-model-len is set 2 times \(args\[0\], args\[1\]\)"):
        plan_flag_change(VLLM, ("--max_model_len=8192", "--max-model-len=4096"), "--max-model-len", factor=0.9)


def test_max_model_len_spellings_keep_their_bounds():
    for args in [("--max_model_len_extra=5",), ("--max-model-len-x=1",), ("--xmax_model_len=1",)]:
        with pytest.raises(FlagError, match="not set"):
            plan_flag_change(VLLM, args, "--max-model-len", factor=0.9)
    # A single-dash option is not a vLLM long option: its spelling is taken as written.
    with pytest.raises(FlagError, match="not set"):
        plan_flag_change(("tool",), ("-max_len=5",), "-max-len", factor=0.9)
