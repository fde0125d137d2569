"""A vLLM server's command line read out of a container: which container runs vLLM, and its flags.
Both forms (`vllm serve MODEL …`, `python -m vllm.entrypoints.openai.api_server …`), also inside `sh -c`."""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from runbook.errors import InvalidInput

ENTRYPOINTS = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")
_SHELLS = {"sh", "bash", "dash", "ash", "zsh"}
# Flags that take no value (argparse store_true); `--flag=false` and `--flag false` are still read.
BOOLEAN_FLAGS = {"--enforce-eager", "--enable-chunked-prefill", "--no-enable-chunked-prefill", "--trust-remote-code",
                 "--enable-prefix-caching", "--no-enable-prefix-caching", "--disable-log-requests",
                 "--disable-log-stats", "--disable-custom-all-reduce", "--enable-auto-tool-choice",
                 "--disable-frontend-multiprocessing", "--enable-lora", "--no-enforce-eager"}
_TRUTH = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
_KUBERNETES_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)")


@dataclasses.dataclass(frozen=True)
class Flag:
    name: str  # canonical: --max-model-len
    value: str | None  # None: given without a value (a boolean flag)
    where: str  # "args[6]", "command[2] (shell script)"
    spelling: str  # as written: --max_model_len


@dataclasses.dataclass(frozen=True)
class Launch:
    container: str
    form: str  # "vllm serve" or the module run with `python -m`
    flags: Mapping[str, Flag]  # the last of each name, as argparse keeps it
    model: str | None  # the model as written, $(VAR) resolved from the container's env where written there
    model_where: str

    def value(self, name: str) -> str | None:
        flag = self.flags.get(name)
        return None if flag is None else flag.value

    def on(self, name: str) -> bool:
        """A boolean flag given (and not set to false)."""
        flag = self.flags.get(name)
        return flag is not None and (flag.value is None or _TRUTH.get(flag.value.lower(), True))


def canonical(flag: str) -> str:
    return "--" + flag[2:].replace("_", "-")


def _words(command: Sequence[str], args: Sequence[str]) -> list[tuple[str, str]] | None:
    """(word, where) of the argv that runs vLLM, or None when this container does not run it."""
    argv = [(w, f"command[{i}]") for i, w in enumerate(command)] + [(w, f"args[{i}]") for i, w in enumerate(args)]
    found = _invocation(argv)
    if found is not None:
        return found
    # `sh -c "… vllm serve …"`: the script is the first word after an option holding c.
    for i, (word, _) in enumerate(argv):
        if word.rsplit("/", 1)[-1] not in _SHELLS:
            continue
        options = i + 1
        while options < len(argv) and argv[options][0].startswith("-") and " " not in argv[options][0]:
            options += 1
        if options >= len(argv) or not any("c" in w[1:] for w, _ in argv[i + 1:options] if not w.startswith("--")):
            continue
        script, where = argv[options]
        try:
            words = shlex.split(script, comments=True)
        except ValueError:
            raise InvalidInput(f"{where}: the shell script cannot be split into words; runbook advise reads "
                               "the vLLM command line out of it") from None
        return _invocation([(w, f"{where} (shell script)") for w in words])
    return None


def _invocation(argv: list[tuple[str, str]]) -> list[tuple[str, str]] | None:
    for i, (word, _) in enumerate(argv):
        base = word.rsplit("/", 1)[-1]
        if base == "vllm" and i + 1 < len(argv) and argv[i + 1][0] == "serve":
            return [("vllm serve", argv[i][1]), *argv[i + 2:]]
        if word == "-m" and i + 1 < len(argv) and argv[i + 1][0] in ENTRYPOINTS:
            return [(argv[i + 1][0], argv[i + 1][1]), *argv[i + 2:]]
    return None


def _resolve(value: str, env: Mapping[str, str | None]) -> str:
    """Kubernetes expands $(VAR) in command and args from the container's env: do the same, where written."""
    return _KUBERNETES_REFERENCE.sub(lambda m: env[m[1]] if env.get(m[1]) is not None else m[0], value)


def read_launch(container: Mapping[str, Any]) -> Launch | None:
    """The container's vLLM launch, or None when its command and args run no vLLM server."""
    command, args = container.get("command") or [], container.get("args") or []
    if not all(isinstance(w, str) for w in [*command, *args]):
        raise InvalidInput(f"container {container.get('name')!r}: command and args must be lists of strings")
    words = _words(command, args)
    if words is None:
        return None
    env: dict[str, str | None] = {}
    for entry in container.get("env") or []:
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            env[entry["name"]] = None if entry.get("valueFrom") else str(entry.get("value") or "")
    form, rest = words[0][0], words[1:]
    flags: dict[str, Flag] = {}
    positionals: list[tuple[str, str]] = []
    i = 0
    while i < len(rest):
        word, where = rest[i]
        if word in (";", "&&", "||", "|"):
            break  # the shell's next command: no longer vLLM's arguments
        if not word.startswith("--"):
            positionals.append((word, where))
            i += 1
            continue
        spelling, has_value, value = word.partition("=")
        name = canonical(spelling)
        if not has_value:
            nxt = rest[i + 1][0] if i + 1 < len(rest) else None
            if name in BOOLEAN_FLAGS:
                if nxt is not None and nxt.lower() in _TRUTH:
                    value, where, i = nxt, rest[i + 1][1], i + 1
                else:
                    value = None
            elif nxt is not None and (not nxt.startswith("-") or _NUMBER.fullmatch(nxt)):
                value, where, i = nxt, rest[i + 1][1], i + 1
            else:
                value = None
        flags[name] = Flag(name, None if value is None else _resolve(value, env), where, spelling)
        i += 1
    model, model_where = None, ""
    if "--model" in flags:
        model, model_where = flags["--model"].value, flags["--model"].where
    elif form == "vllm serve" and positionals:
        model, model_where = _resolve(positionals[0][0], env), positionals[0][1]
    else:
        model_where = "no --model on the command line: vLLM would serve its own default model"
    return Launch(str(container.get("name") or ""), form, flags, model, model_where)
