"""Tests for runbook.commandline.flags: one flag's value changes, and nothing else on the command line does.
Hypothesis properties cover the `=`, separate and `sh -c` forms; examples pin the known cases."""

from __future__ import annotations

import dataclasses
import decimal
import math
import shlex

import pytest
import yaml
from hypothesis import assume, given
from hypothesis import strategies as st

from runbook.errors import InvalidInput
from runbook.commandline.flags import FlagChange, FlagError, clamp_value, find_flag, plan_flag_change
from tests.conftest import data_text, reference_text

GKE_MANIFEST = "k8s/vllm-deployment-gke-gemma-3-27b-it-max-model-len-32768.yaml"
OUR_MANIFEST = "k8s/vllm-deployment-llama-3-70b-tp4.yaml"
VLLM = ("python3", "-m", "vllm.entrypoints.openai.api_server")
MML = "--max-model-len"


# --- strategies ------------------------------------------------------------------------------

flag_names = st.from_regex(r"--[a-z]{2,8}(-[a-z]{2,6}){0,3}", fullmatch=True)
plain_values = st.one_of(
    st.integers(0, 10**9).map(str),
    st.sampled_from(["0.95", "0.0.0.0", "auto", "google/gemma-3-27b-it", "$(MODEL_ID)", "bfloat16", "-1"]),
)
# Shell forms: (command, args) around a script, and how the script is found.
SHELLS = (
    (lambda s: (("sh", "-c", s), ()), "command:shell"),
    (lambda s: (("/bin/bash", "-lc", s), ()), "command:shell"),
    (lambda s: (("sh",), ("-c", s)), "args:shell"),
    (lambda s: (("/bin/sh", "-c"), (s,)), "args:shell"),
)


@dataclasses.dataclass(frozen=True)
class Case:
    """A container with `flag` set once to `current`, and where exactly that value was written."""

    command: tuple[str, ...]
    args: tuple[str, ...]
    flag: str
    current: str
    form: str  # "=", "separate", "shell"
    location: str
    index: int = -1  # argv forms: index in command+args of the element holding the value
    before_value: str = ""  # shell form: the script up to the value ...
    after_value: str = ""  # ... and after it

    def expected_argv(self, after: str) -> tuple[str, ...]:
        """command+args as they must be after the change: every other byte as it was."""
        argv = list(self.command + self.args)
        if self.form == "=":
            argv[self.index] = f"{self.flag}={after}"
        elif self.form == "separate":
            argv[self.index] = after
        else:
            script_index = next(i for i, a in enumerate(argv) if self.before_value in a and self.after_value in a)
            argv[script_index] = self.before_value + after + self.after_value
        return tuple(argv)


def _other_flags(flag: str) -> st.SearchStrategy[list[tuple[str, str, bool]]]:
    # Other flags, including the prefix-confusion neighbours of the target.
    names = st.one_of(flag_names, st.sampled_from([flag + "-extra", flag + "s", "--max-seq-len", "--port"]))
    other = st.tuples(names, plain_values, st.booleans()).filter(
        lambda t: t[0] != flag and t[0].replace("_", "-") != flag.replace("_", "-")
    )
    return st.lists(other, max_size=6)


@st.composite
def cases(draw: st.DrawFn, current: st.SearchStrategy[str] | None = None, forms=("=", "separate", "shell")) -> Case:
    flag = draw(st.one_of(st.just(MML), flag_names))
    value = draw(current if current is not None else st.integers(1, 10**7).map(str))
    others = draw(_other_flags(flag))
    form = draw(st.sampled_from(forms))
    at = draw(st.integers(0, len(others)))
    if form in ("=", "separate"):
        elements: list[str] = []
        for name, v, joined in others:
            elements += [f"{name}={v}"] if joined else [name, v]
        before = [e for name, v, joined in others[:at] for e in ([f"{name}={v}"] if joined else [name, v])]
        target = [f"{flag}={value}"] if form == "=" else [flag, value]
        after = elements[len(before):]
        in_command = draw(st.booleans())
        command = (*VLLM, *before, *target, *after) if in_command else VLLM
        args = () if in_command else (*before, *target, *after)
        index = len(VLLM) + len(before) + (0 if form == "=" else 1)
        return Case(command, args, flag, value, form, "command" if in_command else "args", index=index)

    def word(name: str, v: str, joined: bool) -> str:
        return f"{name}={shlex.quote(v)}" if joined else f"{name} {shlex.quote(v)}"

    head = "exec vllm serve google/gemma-3-27b-it " + "".join(word(*o) + " " for o in others[:at])
    tail = "".join(" " + word(*o) for o in others[at:])
    style = draw(st.sampled_from(['{f}={v}', '{f} {v}', '{f} "{v}"', "'{f}={v}'", '{f}="{v}"', "{f} \\\n  {v}"]))
    left, right = style.split("{v}")
    before_value = head + left.format(f=flag)
    after_value = right + tail + draw(st.sampled_from(["", " 2>&1 | tee /tmp/log", "; echo done"]))
    make, location = draw(st.sampled_from(SHELLS))
    command, args = make(before_value + value + after_value)
    return Case(command, args, flag, value, "shell", location, before_value=before_value, after_value=after_value)


factors = st.floats(0.01, 4.0, allow_nan=False, allow_infinity=False)


def expected_scaled(current: int, factor: float) -> int:
    # Independent of the module: exact decimal arithmetic, ROUND_HALF_UP is half away from zero.
    with decimal.localcontext() as ctx:
        ctx.prec = 80
        product = decimal.Decimal(current) * decimal.Decimal(repr(factor))
        return int(product.quantize(decimal.Decimal(1), rounding=decimal.ROUND_HALF_UP))


@st.composite
def bounds(draw: st.DrawFn) -> tuple[float | None, float | None]:
    low = draw(st.none() | st.integers(0, 10**7) | st.floats(0, 1e7))
    high = draw(st.none() | st.integers(0, 10**7) | st.floats(0, 1e7))
    if low is not None and high is not None:
        low, high = min(low, high), max(low, high)
        # An int result needs an integer between the bounds.
        assume(math.ceil(low) <= math.floor(high))
    return low, high


# --- properties --------------------------------------------------------------------------------


@given(cases(), factors, bounds())
def test_factor_never_leaves_the_bounds(case: Case, factor: float, limits: tuple) -> None:
    floor, ceiling = limits
    change = plan_flag_change(case.command, case.args, case.flag, factor=factor, floor=floor, ceiling=ceiling)
    result = int(change.after)
    if floor is not None:
        assert result >= floor
    if ceiling is not None:
        assert result <= ceiling


@given(cases(), factors)
def test_factor_then_parse_back_gives_the_rounded_value(case: Case, factor: float) -> None:
    change = plan_flag_change(case.command, case.args, case.flag, factor=factor)
    expected = expected_scaled(int(case.current), factor)
    assert find_flag(change.command, change.args, case.flag) == str(expected)
    assert change.before == case.current
    assert change.after == str(expected)
    assert change.location == case.location


@given(cases(), factors, bounds())
def test_nothing_but_the_value_changes(case: Case, factor: float, limits: tuple) -> None:
    floor, ceiling = limits
    change = plan_flag_change(case.command, case.args, case.flag, factor=factor, floor=floor, ceiling=ceiling)
    assert change.command + change.args == case.expected_argv(change.after)
    # The split between command and args is kept as well.
    assert len(change.command) == len(case.command)
    assert len(change.args) == len(case.args)


new_values = st.one_of(
    st.integers(-(10**6), 10**9),
    st.floats(-1e6, 1e9, allow_nan=False, allow_infinity=False),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), min_size=1, max_size=20),
)


@given(cases(), new_values)
def test_setting_a_value_is_idempotent(case: Case, value: object) -> None:
    if case.form == "separate" and isinstance(value, str):
        # Written as its own word, "-x" would be the next option; the planner refuses it.
        assume(not value.startswith("-"))
    try:
        first = plan_flag_change(case.command, case.args, case.flag, value=value)
    except FlagError as exc:
        # Two refusals are legitimate: a separate-word value that would read as an option, and a value
        # that would read back as computed by the shell.
        computed = isinstance(value, str) and ("$" in value or "`" in value)
        assert (case.form != "=" and "read as an option" in str(exc)) or (computed and "computed" in str(exc))
        return
    second = plan_flag_change(first.command, first.args, case.flag, value=value)
    assert (second.command, second.args) == (first.command, first.args)
    assert second.before == first.after == second.after
    assert find_flag(first.command, first.args, case.flag) == first.after


@given(cases(), st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), min_size=1))
def test_a_string_value_reads_back_and_leaves_every_other_word_alone(case: Case, value: str) -> None:
    assume(not value.startswith("-"))
    assume("$" not in value and "`" not in value)  # refused: it would read back as computed (tested below)
    change = plan_flag_change(case.command, case.args, case.flag, value=value)
    assert find_flag(change.command, change.args, case.flag) == value
    old, new = list(case.command + case.args), list(change.command + change.args)
    assert len(old) == len(new)
    if case.form != "shell":
        assert [a for i, a in enumerate(old) if i != case.index] == [a for i, a in enumerate(new) if i != case.index]
    else:
        # The script may requote the value, but the bytes before and after it are identical and
        # every other shell word reads exactly as before.
        [i] = [i for i, (a, b) in enumerate(zip(old, new)) if a != b]
        assert [a for k, a in enumerate(old) if k != i] == [a for k, a in enumerate(new) if k != i]
        assert new[i].startswith(case.before_value.rstrip("'\""))
        assert new[i].endswith(case.after_value.lstrip("'\""))
        old_words, new_words = _words(old[i]), _words(new[i])
        assert len(old_words) == len(new_words)
        changed = [(a, b) for a, b in zip(old_words, new_words) if a != b]
        assert len(changed) <= 1
        if changed:
            assert changed[0][1] in (value, f"{case.flag}={value}")


def _words(script: str) -> list[str]:
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


# --- examples ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "args", "location", "new"),
    [
        (VLLM, ("--model=m", "--max-model-len=7372", "--port=8000"), "args",
         (*VLLM, "--model=m", "--max-model-len=6635", "--port=8000")),
        (("vllm", "serve", "m"), ("--max-model-len", "7372", "--port", "8000"), "args",
         ("vllm", "serve", "m", "--max-model-len", "6635", "--port", "8000")),
        (("sh", "-c", "vllm serve m --max-model-len 7372 --port 8000"), (), "command:shell",
         ("sh", "-c", "vllm serve m --max-model-len 6635 --port 8000")),
        (("/bin/bash", "-lc", "vllm serve m --max-model-len=7372"), (), "command:shell",
         ("/bin/bash", "-lc", "vllm serve m --max-model-len=6635")),
        (("sh",), ("-c", "exec python3 -m vllm.entrypoints.openai.api_server --max-model-len=7372"), "args:shell",
         ("sh", "-c", "exec python3 -m vllm.entrypoints.openai.api_server --max-model-len=6635")),
    ],
)
def test_lowering_max_model_len_by_ten_percent(command, args, location, new) -> None:
    change = plan_flag_change(command, args, MML, factor=0.9)
    assert change == FlagChange(
        command=new[: len(command)], args=new[len(command):], before="7372", after="6635", location=location
    )


def _container(manifest: str, name: str) -> dict:
    docs = [d for d in yaml.safe_load_all(manifest) if d and d.get("kind") == "Deployment"]
    [container] = [c for c in docs[0]["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return container


def test_vllm_serve_manifest_with_separate_values() -> None:
    container = _container(data_text(OUR_MANIFEST), "vllm")
    command, args = tuple(container["command"]), tuple(container["args"])
    assert find_flag(command, args, MML) == "32768"
    change = plan_flag_change(command, args, MML, factor=0.9, container=container["name"])
    assert (change.before, change.after, change.location, change.command) == ("32768", "29491", "args", command)
    at = args.index(MML) + 1
    assert change.args == args[:at] + ("29491",) + args[at + 1:]


def test_real_gke_manifest() -> None:
    container = _container(reference_text(GKE_MANIFEST), "inference-server")
    command, args = tuple(container["command"]), tuple(container["args"])
    assert find_flag(command, args, MML) == "32768"
    change = plan_flag_change(command, args, MML, factor=0.9, container=container["name"])
    assert change.after == "29491" and change.before == "32768" and change.location == "args"
    assert change.command == command
    assert change.args == tuple("--max-model-len=29491" if a == "--max-model-len=32768" else a for a in args)


def test_rounding_is_half_away_from_zero() -> None:
    assert clamp_value(7372, factor=0.9) == 6635  # 6634.8
    assert clamp_value(13269, factor=0.5) == 6635  # 6634.5
    assert clamp_value(5, factor=0.5) == 3  # 2.5
    assert clamp_value(-5, factor=0.5) == -3  # -2.5
    assert clamp_value("7372", factor=0.9) == 6635


def test_floats_stay_floats_and_ints_stay_ints() -> None:
    assert plan_flag_change((), ("--gpu-memory-utilization=0.95",), "--gpu-memory-utilization", factor=0.9).after == "0.855"
    assert plan_flag_change((), ("--swap-space=16",), "--swap-space", factor=1.0).after == "16"
    assert plan_flag_change((), ("--x=2.0",), "--x", factor=1.0).after == "2.0"
    assert isinstance(clamp_value(10, factor=0.33), int)


def test_floor_and_ceiling() -> None:
    assert clamp_value(7372, factor=0.1, floor=2048) == 2048
    assert clamp_value(7372, factor=10, ceiling=32768) == 32768
    assert clamp_value(100, factor=0.5, floor=1024.5) == 1025  # an int result rounds the bound inwards
    assert clamp_value(0.5, factor=0.1, floor=0.2) == 0.2
    assert clamp_value(None, value=4096, ceiling=2048) == 2048
    assert plan_flag_change((), ("--max-model-len", "4096"), MML, value="99999", ceiling=8192).after == "8192"
    with pytest.raises(FlagError, match="floor"):
        clamp_value(10, factor=0.5, floor=10, ceiling=5)
    with pytest.raises(FlagError, match="no integer"):
        clamp_value(10, factor=0.5, floor=1.2, ceiling=1.8)
    with pytest.raises(FlagError, match="not a number"):
        plan_flag_change((), ("--dtype", "auto"), "--dtype", value="half", floor=1)


def test_value_sets_strings_and_numbers() -> None:
    args = ("--dtype", "auto", "--max-model-len=7372")
    assert plan_flag_change((), args, "--dtype", value="bfloat16").args == ("--dtype", "bfloat16", "--max-model-len=7372")
    assert plan_flag_change((), args, MML, value=4096).args == ("--dtype", "auto", "--max-model-len=4096")
    assert plan_flag_change((), args, MML, value=4096).after == "4096"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one"),
        ({"factor": 0.9, "value": 5}, "exactly one"),
        ({"factor": 0}, "greater than 0"),
        ({"factor": -0.5}, "greater than 0"),
        ({"factor": float("nan")}, "finite"),
        ({"factor": True}, "number"),
        ({"value": ""}, "non-empty"),
        ({"factor": 0.9, "floor": 10, "ceiling": 5}, "floor"),
    ],
)
def test_bad_requests(kwargs: dict, message: str) -> None:
    with pytest.raises(FlagError, match=message):
        plan_flag_change((), ("--max-model-len=7372",), MML, **kwargs)


@pytest.mark.parametrize(
    ("command", "args", "message"),
    [
        (VLLM, ("--port=8000",), "not set"),
        (VLLM, ("--max-model-len-extra=5",), "not set"),  # prefix confusion
        (VLLM, ("--max-seq-len=7372",), "not set"),  # a different flag
        (("sh", "-c", "vllm serve m --max-model-len-extra 5"), (), "not set"),
        (VLLM, ("--max-model-len=7372", "--max-model-len", "4096"), "2 times"),
        (("sh", "-c", "vllm serve m --max-model-len 1"), ("--max-model-len=2",), "2 times"),
        (VLLM, ("--max-model-len",), "no value"),
        (VLLM, ("--max-model-len", "--port", "8000"), "no value"),
        (VLLM, ("--max-model-len=",), "no value"),
        (("sh", "-c", "vllm serve m --max-model-len; echo"), (), "no value"),
        (VLLM, ("--max-model-len=auto",), "not a number"),
        (VLLM, ("--max-model-len=$(MAX_LEN)",), "not a number"),
        (VLLM, ("--max-model-len=nan",), "not a number"),
        (VLLM, ("--max_model_len=7372", "--max-model-len=7372"), "2 times"),  # one flag, two spellings
        (("sh", "-c", 'ARGS="--max-model-len 5"; vllm serve m --max-model-len 7372 $ARGS'), (), "mentioned"),
        (("/usr/bin/python3", "-c", "run('--max-model-len 7372')"), (), "mentioned"),
        (("sh", "-c", "vllm serve m --max-model-len 'unterminated"), (), "tokenize"),
    ],
)
def test_refusals_name_the_flag(command, args, message) -> None:
    with pytest.raises(FlagError, match=message) as info:
        plan_flag_change(command, args, MML, factor=0.9, container="inference-server")
    assert MML in str(info.value)
    assert isinstance(info.value, InvalidInput)


def test_error_names_the_container_location() -> None:
    with pytest.raises(FlagError, match=r"container 'inference-server' args\[0\], args\[1\]"):
        plan_flag_change((), ("--max-model-len=1", "--max-model-len=2"), MML, factor=0.9, container="inference-server")


def test_find_flag() -> None:
    assert find_flag(VLLM, ("--max-model-len=7372",), MML) == "7372"
    assert find_flag(VLLM, ("--max-model-len", "7372"), MML) == "7372"
    assert find_flag(("sh", "-c", "vllm serve m --max-model-len '7372'"), (), MML) == "7372"
    assert find_flag(VLLM, ("--max-model-len-extra=5",), MML) is None
    assert find_flag(VLLM, ("--max-model-len", "-1"), MML) == "-1"  # a negative number is a value
    with pytest.raises(FlagError, match="2 times"):
        find_flag(VLLM, ("--max-model-len=1", "--max-model-len=2"), MML)
    with pytest.raises(FlagError, match="not a flag name"):
        find_flag(VLLM, (), "max-model-len")


def test_shell_script_keeps_every_other_byte() -> None:
    script = (
        "set -e\n"
        "# raise --max-model-len once the pool is bigger\n"
        'exec vllm serve "$MODEL" \\\n'
        "  --max-model-len \"7372\" \\\n"
        "  --port=8000 2>&1 | tee -a /tmp/vllm.log  # tail it\n"
    )
    change = plan_flag_change(("/bin/bash", "-ec", script), (), MML, factor=0.9)
    assert change.command == ("/bin/bash", "-ec", script.replace('"7372"', '"6635"'))
    assert change.location == "command:shell"


def test_shell_flag_after_the_script_is_a_positional_parameter() -> None:
    change = plan_flag_change(("sh", "-c", 'exec vllm serve m "$@"', "sh"), ("--max-model-len=7372",), MML, factor=0.9)
    assert change.args == ("--max-model-len=6635",)
    assert change.location == "args"


def test_shell_value_requoted_only_where_needed() -> None:
    change = plan_flag_change(("sh", "-c", "vllm serve --chat-template x.jinja --port 1"), (), "--chat-template",
                              value="/etc/my templates/t.jinja")
    assert change.command[2] == "vllm serve --chat-template '/etc/my templates/t.jinja' --port 1"


def test_separate_value_that_looks_like_an_option_is_refused() -> None:
    with pytest.raises(FlagError, match="read as an option"):
        plan_flag_change((), ("--dtype", "auto"), "--dtype", value="--oops")
    assert plan_flag_change((), ("--dtype=auto",), "--dtype", value="--fine").args == ("--dtype=--fine",)


def test_non_string_elements_are_refused() -> None:
    with pytest.raises(FlagError, match="not a string"):
        plan_flag_change((), ("--port", 8000), "--port", factor=2)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["`", "$HOME", "${MAX}", "a$(b)"])
def test_a_new_value_that_would_read_as_computed_is_refused(value):
    with pytest.raises(FlagError, match="computed by the shell"):
        plan_flag_change(["vllm", "serve"], ["--max-model-len=8192"], "--max-model-len", value=value)
