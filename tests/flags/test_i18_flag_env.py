"""Issue 18, item 4: flags that live elsewhere than `args`/`command`.

KServe's LLMInferenceService runs `vllm serve /mnt/models … $VLLM_ADDITIONAL_ARGS` in a shell, so
the flags sit in that env var's value; other manifests compute a flag's value from an env var
(`--max-model-len=${MAX_SEQ_LEN}`). The first is changed in the env var, with the guarantees of
argv; the second is refused, naming the variable.
"""

from __future__ import annotations

import pytest

from runbook.backends.base import EnvVar
from runbook.commandline.flags import FlagError, find_flag, plan_flag_change

MML = "--max-model-len"
# KServe's LLMInferenceService template: the main container's script expands the env var unquoted.
KSERVE_COMMAND = ("/bin/bash", "-c")
KSERVE_ARGS = ("vllm serve /mnt/models --served-model-name 'llama-3-8b' --port 8000 "
               "--disable-uvicorn-access-log $VLLM_ADDITIONAL_ARGS",)
HF = EnvVar("HF_HOME", "/mnt/models/.cache")
TOKEN = EnvVar("HF_TOKEN", None, "secretKeyRef huggingface/token")


def extra(value: str) -> tuple[EnvVar, ...]:
    return (HF, EnvVar("VLLM_ADDITIONAL_ARGS", value), TOKEN)


@pytest.mark.parametrize(("value", "changed"), [
    ("--max-model-len 8192 --enforce-eager", "--max-model-len 7373 --enforce-eager"),
    ("--enforce-eager --max-model-len=8192", "--enforce-eager --max-model-len=7373"),
    ("  --max_model_len  8192\n--enforce-eager ", "  --max_model_len  7373\n--enforce-eager "),
    ("--speculative-config '{\"method\": \"ngram\"}' --max-model-len 8192",
     "--speculative-config '{\"method\": \"ngram\"}' --max-model-len 7373"),
])
def test_vllm_additional_args_env_var_is_changed_and_only_it(value, changed):
    change = plan_flag_change(KSERVE_COMMAND, KSERVE_ARGS, MML, factor=0.9, floor=2048, env=extra(value),
                              container="main")
    assert (change.command, change.args) == (KSERVE_COMMAND, KSERVE_ARGS)
    assert change.env == (("VLLM_ADDITIONAL_ARGS", changed),)
    assert (change.before, change.after, change.location) == ("8192", "7373", "env:VLLM_ADDITIONAL_ARGS")
    assert find_flag(KSERVE_COMMAND, KSERVE_ARGS, MML, env=extra(value)) == "8192"


def test_vllm_additional_args_set_value_and_argv_unchanged_when_the_flag_is_in_args():
    change = plan_flag_change(("vllm", "serve", "m"), ("--max-model-len=8192",), MML, value=4096,
                              env=extra("--enforce-eager"))
    assert change.args == ("--max-model-len=4096",) and change.env == () and change.location == "args"


@pytest.mark.parametrize(("args", "value", "message"), [
    (("--max-model-len=8192",), "--max-model-len 8192", r"set 2 times \(container 'main' args\[0\], env VLLM_ADDITIONAL_ARGS\)"),
    ((), "--max-model-len 8192 --max_model_len=4096", r"set 2 times \(container 'main' env VLLM_ADDITIONAL_ARGS, env VLLM"),
    ((), "--max-model-len", "no value in container 'main' env VLLM_ADDITIONAL_ARGS"),
    ((), "--x='--max-model-len 8192'", "mentioned in container 'main' env VLLM_ADDITIONAL_ARGS"),
    ((), "--max-model-len '8192'", "env VLLM_ADDITIONAL_ARGS.*split"),
])
def test_vllm_additional_args_refusals_name_the_env_var(args, value, message):
    with pytest.raises(FlagError, match=message):
        plan_flag_change(("vllm", "serve", "m"), args, MML, factor=0.9, env=extra(value), container="main")


def test_vllm_additional_args_defined_twice_is_refused():
    env = (EnvVar("VLLM_ADDITIONAL_ARGS", "--max-model-len 8192"), EnvVar("VLLM_ADDITIONAL_ARGS", "--enforce-eager"))
    with pytest.raises(FlagError, match="VLLM_ADDITIONAL_ARGS is defined 2 times"):
        plan_flag_change(KSERVE_COMMAND, KSERVE_ARGS, MML, factor=0.9, env=env)


def test_vllm_additional_args_new_value_that_cannot_sit_in_the_env_var_is_refused():
    with pytest.raises(FlagError, match="VLLM_ADDITIONAL_ARGS"):
        plan_flag_change(KSERVE_COMMAND, KSERVE_ARGS, "--served-model-name", value="two words",
                         env=extra("--served-model-name one"))


@pytest.mark.parametrize(("command", "args"), [
    (("sh", "-c", "exec vllm serve m --max-model-len=${MAX_SEQ_LEN} --port 8000"), ()),
    (("sh", "-c", 'exec vllm serve m --max-model-len "$MAX_SEQ_LEN"'), ()),
    (("sh", "-c", "exec vllm serve m --max-model-len=${MAX_SEQ_LEN:-8192}"), ()),
    (("vllm", "serve", "m"), ("--max-model-len=$(MAX_SEQ_LEN)",)),  # Kubernetes expands $(VAR) in args
])
@pytest.mark.parametrize("request_", [{"factor": 0.9, "floor": 2048}, {"value": 4096}])
def test_max_seq_len_template_is_refused_naming_the_env_var(command, args, request_):
    env = (EnvVar("MAX_SEQ_LEN", "8192"),)
    with pytest.raises(FlagError) as info:
        plan_flag_change(command, args, MML, env=env, container="vllm", **request_)
    message = str(info.value)
    assert "computed from the environment variable MAX_SEQ_LEN" in message
    assert "MAX_SEQ_LEN is set in the env of container 'vllm'" in message
    assert "8192" not in message.split("MAX_SEQ_LEN is set", 1)[1]  # an env value is never quoted


def test_max_seq_len_from_a_config_map_or_the_image_says_where_it_comes_from():
    script = ("sh", "-c", "vllm serve m --max-model-len=${MAX_SEQ_LEN}")
    with pytest.raises(FlagError, match="MAX_SEQ_LEN comes from configMapKeyRef llm-config/max-seq-len"):
        plan_flag_change(script, (), MML, factor=0.9,
                         env=(EnvVar("MAX_SEQ_LEN", None, "configMapKeyRef llm-config/max-seq-len"),))
    with pytest.raises(FlagError, match="MAX_SEQ_LEN is not in the container's env"):
        plan_flag_change(script, (), MML, factor=0.9)


def test_a_value_computed_by_the_shell_is_refused_naming_the_template():
    with pytest.raises(FlagError, match=r"computed by the shell \('\$\(cat /etc/len\)'\)"):
        plan_flag_change(("sh", "-c", 'vllm serve m --max-model-len "$(cat /etc/len)"'), (), MML, factor=0.9)


def test_a_flag_nowhere_in_argv_names_env_vars_set_from_elsewhere():
    env = (HF, EnvVar("VLLM_ADDITIONAL_ARGS", None, "configMapKeyRef vllm-args/extra"))
    with pytest.raises(FlagError, match=r"not set in command/args or env.*VLLM_ADDITIONAL_ARGS "
                                        r"\(configMapKeyRef vllm-args/extra\)"):
        plan_flag_change(KSERVE_COMMAND, KSERVE_ARGS, MML, factor=0.9, env=env)


# vllm production-stack's chart renders `vllm serve`, its vllmConfig and each `extraArgs` item into
# the container's `command`, one list item each (and no `args`).
PRODUCTION_STACK = ("vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--host", "0.0.0.0", "--port", "8000",
                    "--no-enable-prefix-caching", "--max-model-len", "8192", "--max_num_seqs=32")


def test_production_stack_extra_args_rendered_into_command_are_lowered_there():
    change = plan_flag_change(PRODUCTION_STACK, (), MML, factor=0.9, env=(HF,))
    at = PRODUCTION_STACK.index("8192")
    assert change.command == PRODUCTION_STACK[:at] + ("7373",) + PRODUCTION_STACK[at + 1:]
    assert (change.args, change.env, change.location) == ((), (), "command")


def test_production_stack_extra_arg_with_flag_and_value_in_one_item_is_refused():
    # `extraArgs: ["--max-model-len 8192"]` reaches vLLM as one word, which argparse does not read as the flag.
    with pytest.raises(FlagError, match=r"mentioned in command\[3\]"):
        plan_flag_change(PRODUCTION_STACK[:3] + ("--max-model-len 8192",), (), MML, factor=0.9)
