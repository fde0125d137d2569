"""Change one flag's value on one container's command line: the pure logic behind `k8s.set_arg`.
Handles `--flag=v`, `--flag v`, flags inside `sh -c` scripts and in an env var's value (KServe's
`VLLM_ADDITIONAL_ARGS`), and refuses rather than guess — a value computed elsewhere included."""

from __future__ import annotations

import dataclasses
import math
import re
import shlex
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction

from runbook.backends.base import EnvVar
from runbook.errors import InvalidInput

__all__ = ["FlagChange", "FlagError", "canonical_flag", "clamp_value", "find_flag", "plan_flag_change"]

Number = int | float


class FlagError(InvalidInput):
    """The flag cannot be changed as asked: absent, ambiguous, valueless, not numeric, bad request."""


@dataclasses.dataclass(frozen=True)
class FlagChange:
    command: tuple[str, ...]  # the new command (unchanged unless the flag lived there)
    args: tuple[str, ...]  # the new args
    before: str  # the flag's current value as written
    after: str  # the new value as written
    location: str  # "args" | "command" | "args:shell" | "command:shell" | "env:NAME"
    spelling: str | None = None  # the flag as the workload writes it (`--max_model_len`), when not as named
    env: tuple[tuple[str, str], ...] = ()  # (name, new value) of the env var the flag lives in, if it does


# --- numbers ---------------------------------------------------------------------------------

# Only plain decimal text counts as a number: `float()` would also accept "nan", "inf" and
# "1_000", none of which a scaled value may silently become.
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_FLOAT_TEXT = re.compile(r"[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _parse_number(text: str) -> Number | None:
    if _INT_TEXT.fullmatch(text):
        return int(text)
    if _FLOAT_TEXT.fullmatch(text):
        number = float(text)
        return number if math.isfinite(number) else None
    return None


def _exact(number: Number) -> Fraction:
    # Through the shortest repr, so a factor of 0.9 means nine tenths as the operator wrote it,
    # not the binary float just above it; ints stay exact however large they are.
    return Fraction(number) if isinstance(number, int) else Fraction(repr(number))


def _round_half_away(q: Fraction) -> int:
    magnitude = math.floor(abs(q) + Fraction(1, 2))
    return magnitude if q >= 0 else -magnitude


def _format_number(number: Number) -> str:
    # repr keeps a float a float ("2.0", not "2"), so the flag keeps the type it was written with.
    return str(number) if isinstance(number, int) else repr(number)


def _check_real(name: str, number: object, *, positive: bool = False) -> None:
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        raise FlagError(f"{name} must be a number, got {number!r}")
    if not math.isfinite(number):
        raise FlagError(f"{name} must be finite, got {number!r}")
    if positive and number <= 0:
        raise FlagError(f"{name} must be greater than 0, got {number!r}")


def _check_request(factor: object, value: object, floor: object, ceiling: object) -> None:
    if (factor is None) == (value is None):
        raise FlagError("give exactly one of factor= or value=")
    if factor is not None:
        _check_real("factor", factor, positive=True)
    if value is not None:
        if isinstance(value, str):
            if not value or "\0" in value:
                raise FlagError(f"value must be a non-empty string without NUL, got {value!r}")
        else:
            _check_real("value", value)
    if floor is not None:
        _check_real("floor", floor)
    if ceiling is not None:
        _check_real("ceiling", ceiling)
    if floor is not None and ceiling is not None and floor > ceiling:
        raise FlagError(f"floor {floor!r} is above ceiling {ceiling!r}")


def clamp_value(
    current: Number | str | None,
    *,
    factor: float | None = None,
    value: Number | str | None = None,
    floor: Number | None = None,
    ceiling: Number | None = None,
) -> Number:
    """The new numeric value: `current * factor` or `value`, kept within [floor, ceiling].

    An int stays an int (rounded half away from zero, so 6634.5 -> 6635); a float stays a float.
    A str `current`/`value` is parsed as a number first. Raises FlagError when that is impossible.
    """
    _check_request(factor, value, floor, ceiling)
    if factor is not None:
        number = _as_number("current value", current)
        product = _exact(number) * _exact(factor)
        result: Number = _round_half_away(product) if isinstance(number, int) else float(product)
    else:
        result = _as_number("value", value)
    if isinstance(result, int):
        # Round the bounds inwards: an int result must still sit inside a fractional bound.
        if floor is not None and result < floor:
            result = math.ceil(floor)
        if ceiling is not None and result > ceiling:
            result = math.floor(ceiling)
        if floor is not None and result < floor:
            raise FlagError(f"no integer lies between floor {floor!r} and ceiling {ceiling!r}")
        return result
    if floor is not None and result < floor:
        result = float(floor)
    if ceiling is not None and result > ceiling:
        result = float(ceiling)
    return result


def _as_number(what: str, raw: object) -> Number:
    if isinstance(raw, str):
        number = _parse_number(raw)
        if number is None:
            raise FlagError(f"{what} {raw!r} is not a number")
        return number
    if raw is None:
        raise FlagError(f"{what} is missing")
    _check_real(what, raw)
    return raw  # type: ignore[return-value]


# --- where the flag lives ----------------------------------------------------------------------

_FLAG_NAME = re.compile(r"--?[A-Za-z0-9][A-Za-z0-9_.\-]*")
_SHELLS = frozenset({"sh", "bash", "dash", "ash", "ksh", "mksh", "zsh"})


@dataclasses.dataclass(frozen=True)
class _Occurrence:
    where: str  # for messages: "args[6]", "command[2] (shell script)"
    location: str  # FlagChange.location
    value: str | None  # None: the flag is there but carries no value
    index: int  # in command+args: the element rewritten (the value's, or the script's)
    prefix: str = ""  # text kept before the value in that element: "--flag=" for the `=` form
    word: int = -1  # shell: index of the value's word in the lexed script
    spelling: str = ""  # the flag as written there
    env: str = ""  # the env var whose value holds the flag
    span: tuple[int, int] = (0, 0)  # env: where the value sits in the env var's value


def canonical_flag(flag: str) -> str:
    """The flag as vLLM's parser reads it: `--max_model_len` → `--max-model-len` (long options only)."""
    return "--" + flag[2:].replace("_", "-") if flag.startswith("--") else flag


def _spellings(flag: str) -> str:
    """A pattern for every way the flag may be written: vLLM's parser turns each `_` of a long
    option's name into `-`, so --max_model_len (or --max-model_len) is --max-model-len."""
    if not flag.startswith("--"):
        return re.escape(flag)
    return "--" + "".join("[-_]" if c in "-_" else re.escape(c) for c in flag[2:])


def _mention(flag: str) -> re.Pattern[str]:
    # Bounded on both sides so --max-model-len-extra and ---max-model-len are other flags.
    return re.compile(r"(?<![\w\-])" + _spellings(flag) + r"(?![\w\-])")


def _written(flag: str) -> re.Pattern[str]:
    """A whole word that is the flag (group 1: its spelling), with `=value` (group 2) or without."""
    return re.compile("(" + _spellings(flag) + ")(?:=(.*))?", re.S)


def _is_value(token: str) -> bool:
    # As argparse sees it: a following "-x" is the next option, unless it is a negative number.
    return token != "" and (not token.startswith("-") or _parse_number(token) is not None)


def _shell_script_index(argv: Sequence[str]) -> int | None:
    """Index of the script in `sh -c SCRIPT ...` (any of -c, -lc, -ec, --login -c, ...)."""
    start = 0
    if len(argv) > 1 and argv[0].rsplit("/", 1)[-1] == "env":  # /usr/bin/env bash -c ...
        start = 1
    if start >= len(argv) or argv[start].rsplit("/", 1)[-1] not in _SHELLS:
        return None
    has_c = False
    i = start + 1
    while i < len(argv):
        token = argv[i]
        if token == "--":
            i += 1
            break
        if any(c in _BLANKS for c in token):  # an option has no blanks: this is the script
            break
        if token.startswith("--"):  # --login, --norc, ...
            i += 1
            continue
        if len(token) > 1 and token[0] in "-+":
            if token[0] == "-" and "c" in token[1:]:
                has_c = True
            # -o/-O take the next word as their argument (`-o pipefail`, `-euo pipefail`).
            i += 2 if token[-1] in "oO" else 1
            continue
        break
    return i if has_c and i < len(argv) else None


class _Scan:
    """Every occurrence of the flag in command+args, plus anything we saw but could not parse."""

    def __init__(self, command: tuple[str, ...], args: tuple[str, ...], flag: str, container: str | None,
                 env: tuple[EnvVar, ...] = ()):
        self.command, self.args, self.flag = command, args, flag
        self.argv = command + args
        self.container = container
        self.env = env
        self.found: list[_Occurrence] = []
        self.unparsed: list[str] = []  # "where" of mentions that are not a standalone flag
        self._mention = _mention(flag)
        self._written = _written(flag)

        script = _shell_script_index(self.argv)
        if script is None:
            self._scan_argv(range(len(self.argv)))
        else:
            self._scan_script(script)
            # Words after the script become $0, $1, ... and may reach the program via "$@".
            self._scan_argv(range(script + 1, len(self.argv)))
        self._scan_env()

    def place(self, index: int) -> tuple[str, int]:
        n = len(self.command)
        return ("command", index) if index < n else ("args", index - n)

    def describe(self, where: str) -> str:
        return f"container {self.container!r} {where}" if self.container else where

    def _scan_argv(self, indices: range) -> None:
        argv = self.argv
        for i in indices:
            element = argv[i]
            name, idx = self.place(i)
            where = f"{name}[{idx}]"
            written = self._written.fullmatch(element)
            if written is not None and written[2] is None:
                nxt = i + 1
                if nxt in indices and _is_value(argv[nxt]):
                    vname, vidx = self.place(nxt)
                    self.found.append(_Occurrence(f"{vname}[{vidx}]", vname, argv[nxt], nxt, spelling=written[1]))
                else:
                    self.found.append(_Occurrence(where, name, None, i, spelling=written[1]))
            elif written is not None:
                self.found.append(_Occurrence(where, name, written[2] or None, i, prefix=written[1] + "=",
                                              spelling=written[1]))
            elif self._mention.search(element):
                self.unparsed.append(where)

    def _scan_script(self, index: int) -> None:
        flag, script = self.flag, self.argv[index]
        name, idx = self.place(index)
        where = f"{name}[{idx}] (shell script)"
        try:
            words = _lex(script)
        except ValueError as exc:
            if self._mention.search(script):
                raise FlagError(f"{flag}: cannot tokenize the shell script in {self.describe(where)}: {exc}") from None
            return
        for k, word in enumerate(words):
            if word.operator:
                continue
            recognised = 0
            text = word.text
            written = self._written.fullmatch(text) if text is not None else None
            if written is not None and written[2] is None:
                recognised = 1
                nxt = words[k + 1] if k + 1 < len(words) else None
                if nxt is not None and not nxt.operator and nxt.text is not None and _is_value(nxt.text):
                    self.found.append(_Occurrence(where, f"{name}:shell", nxt.text, index, word=k + 1,
                                                  spelling=written[1]))
                else:
                    self.found.append(_Occurrence(where, f"{name}:shell", None, index, word=k, spelling=written[1]))
            elif written is not None:
                recognised = 1
                self.found.append(_Occurrence(where, f"{name}:shell", written[2] or None, index,
                                              prefix=written[1] + "=", word=k, spelling=written[1]))
            # A mention we did not recognise (inside VAR="--flag 5", "$(...)", a quoted blob) may
            # be what the program really reads: never rewrite one copy and leave the other.
            if len(self._mention.findall(word.raw)) > recognised:
                self.unparsed.append(where)

    def _scan_env(self) -> None:
        """Env vars whose value holds the flag, read as `$VAR` unquoted in a shell reads them (KServe's
        `vllm serve … $VLLM_ADDITIONAL_ARGS`): split at blanks, quotes kept."""
        defined = Counter(var.name for var in self.env)
        for var in self.env:
            if var.value is None or not self._mention.search(var.value):
                continue
            where, location = f"env {var.name}", f"env:{var.name}"
            if defined[var.name] > 1:
                raise FlagError(f"{self.flag} is in {self.describe(where)}, and {var.name} is defined "
                                f"{defined[var.name]} times in the env; ambiguous, refusing")
            words = [(m.start(), m.end(), m.group()) for m in _ENV_WORD.finditer(var.value)]
            found = []
            for k, (start, end, word) in enumerate(words):
                written = self._written.fullmatch(word)
                if written is None:
                    continue
                if written[2] is not None:
                    found.append(_Occurrence(where, location, written[2] or None, -1, prefix=written[1] + "=",
                                             spelling=written[1], env=var.name, span=(start + len(written[1]) + 1, end)))
                elif k + 1 < len(words) and _is_value(words[k + 1][2]):
                    found.append(_Occurrence(where, location, words[k + 1][2], -1, spelling=written[1], env=var.name,
                                             span=words[k + 1][:2]))
                else:
                    found.append(_Occurrence(where, location, None, -1, spelling=written[1], env=var.name))
            if len(self._mention.findall(var.value)) > len(found):
                self.unparsed.append(where)
                continue
            if _shell_reading(var.value, self._written) != [(o.spelling, o.value) for o in found]:
                # Read by `eval` or a shell-like splitter, quotes would group words differently.
                raise FlagError(f"{self.flag} in {self.describe(where)} is quoted or escaped, so the value "
                                "the program gets depends on how that env var is split (as $VAR, or by eval); "
                                "runbook cannot tell which, refusing")
            self.found.extend(found)

    def env_source(self, name: str) -> str:
        """Where the env var `name` gets its value, for messages; never the value itself."""
        var = next((v for v in reversed(self.env) if v.name == name), None)
        if var is None:
            return (f"{name} is not in the container's env (the image, an envFrom or the script itself sets it)")
        if var.value is None:
            return f"{name} comes from {var.source or 'a valueFrom'}"
        return f"{name} is set in the env of {f'container {self.container!r}' if self.container else 'the container'}"

    def single(self) -> _Occurrence | None:
        flag = self.flag
        if self.unparsed:
            raise FlagError(
                f"{flag} is mentioned in {self.describe(', '.join(self.unparsed))} but not as a standalone "
                "flag runbook can rewrite; refusing to guess which copy the program reads"
            )
        if len(self.found) > 1:
            places = ", ".join(o.where for o in self.found)
            raise FlagError(f"{flag} is set {len(self.found)} times ({self.describe(places)}); ambiguous, refusing")
        if not self.found:
            return None
        occurrence = self.found[0]
        if occurrence.value is None:
            raise FlagError(f"{flag} has no value in {self.describe(occurrence.where)}")
        return occurrence


def _strings(what: str, items: Sequence[str]) -> tuple[str, ...]:
    if isinstance(items, str):
        raise FlagError(f"{what} must be a list of strings, not one string")
    out = tuple(items)
    for i, item in enumerate(out):
        if not isinstance(item, str):
            raise FlagError(f"{what}[{i}] is {item!r}, not a string")
    return out


# An env var's value as an unquoted `$VAR` expansion splits it: at blanks (the default IFS).
_ENV_WORD = re.compile(r"[^ \t\n]+")


def _shell_reading(value: str, written: re.Pattern[str]) -> list[tuple[str, str | None]] | None:
    """(spelling, value) of each occurrence when the shell's quoting rules split `value`, or None."""
    lexer = shlex.shlex(value, posix=True)
    lexer.whitespace_split, lexer.commenters = True, ""
    try:
        words = list(lexer)
    except ValueError:
        return None
    out: list[tuple[str, str | None]] = []
    for k, word in enumerate(words):
        m = written.fullmatch(word)
        if m is not None and m[2] is not None:
            out.append((m[1], m[2] or None))
        elif m is not None:
            out.append((m[1], words[k + 1] if k + 1 < len(words) and _is_value(words[k + 1]) else None))
    return out


def _scan(command: Sequence[str], args: Sequence[str], flag: str, container: str | None,
          env: Sequence[EnvVar] = ()) -> _Scan:
    if not isinstance(flag, str) or not _FLAG_NAME.fullmatch(flag):
        raise FlagError(f"{flag!r} is not a flag name like --max-model-len")
    return _Scan(_strings("command", command), _strings("args", args), flag, container, tuple(env))


def find_flag(command: Sequence[str], args: Sequence[str], flag: str, *, container: str | None = None,
              env: Sequence[EnvVar] = ()) -> str | None:
    """The flag's current value as written, in argv or an env var's value, or None when it is not set.

    Raises FlagError when the answer would be a guess: set twice, set without a value, or
    mentioned somewhere we cannot parse.
    """
    occurrence = _scan(command, args, flag, container, env).single()
    return None if occurrence is None else occurrence.value


# A value taken from elsewhere: ${NAME}, $NAME (shell) and $(NAME) (Kubernetes, in args and env).
_SHELL_REFERENCE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
_KUBERNETES_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _refuse_computed(scan: _Scan, occurrence: _Occurrence, before: str) -> None:
    """Refuse a value that is a template: writing a number over it would cut it off from its source."""
    if "$" not in before and "`" not in before:
        return
    shell = occurrence.location.endswith(":shell")
    names = list(dict.fromkeys(_SHELL_REFERENCE.findall(before) +
                               ([] if shell else _KUBERNETES_REFERENCE.findall(before))))
    where = scan.describe(occurrence.where)
    if not names:
        raise FlagError(f"{scan.flag} in {where} is computed by the shell ({before!r}), not a number written in "
                        "place; runbook changes only a value written out")
    listed = ", ".join(names)
    origins = "; ".join(scan.env_source(name) for name in names)
    raise FlagError(f"{scan.flag} in {where} is {before!r}, not a number written in place: it is computed from the "
                    f"environment variable {listed}. runbook changes only a value written out; {origins}: change it "
                    "there, or write the value into the command line")


def plan_flag_change(
    command: Sequence[str],
    args: Sequence[str],
    flag: str,
    *,
    factor: float | None = None,
    value: str | int | float | None = None,
    floor: float | None = None,
    ceiling: float | None = None,
    container: str | None = None,
    env: Sequence[EnvVar] = (),
) -> FlagChange:
    """The container's new command/args (or the value of the env var holding the flag) with only
    `flag`'s value changed.

    `factor` scales a numeric value; `value` sets one (a str is written verbatim unless bounds are
    given). `floor`/`ceiling` clamp numeric results. `container` only names it in error messages.
    """
    _check_request(factor, value, floor, ceiling)
    scan = _scan(command, args, flag, container, env)
    occurrence = scan.single()
    if occurrence is None:
        elsewhere = [f"{v.name} ({v.source or 'valueFrom'})" for v in scan.env if v.value is None]
        hint = (f"; env {', '.join(elsewhere)} {'is' if len(elsewhere) == 1 else 'are'} set from elsewhere and "
                "may hold it: change it there" if elsewhere else "")
        searched = "command/args or env" if scan.env else "command/args"
        raise FlagError(f"{flag} is not set in {scan.describe(searched)}; runbook never adds a flag{hint}")
    before = occurrence.value
    assert before is not None  # single() refuses a flag without a value
    _refuse_computed(scan, occurrence, before)
    if factor is not None:
        if _parse_number(before) is None:
            raise FlagError(
                f"{flag} in {scan.describe(occurrence.where)} is {before!r}, not a number; cannot scale it by {factor!r}"
            )
        after = _format_number(clamp_value(before, factor=factor, floor=floor, ceiling=ceiling))
    elif isinstance(value, str) and floor is None and ceiling is None:
        after = value
    else:
        after = _format_number(clamp_value(before, value=value, floor=floor, ceiling=ceiling))

    if "$" in after or "`" in after:
        # Written out, it would read back as computed elsewhere (and be refused from then on).
        raise FlagError(f"{flag}: the new value {after!r} holds `$` or a backtick and would read as computed "
                        "by the shell; write the value out")
    if not occurrence.prefix and not _is_value(after):
        # Written as its own word, "-x" would be read back as the next option, not as the value.
        raise FlagError(
            f"{flag} in {scan.describe(occurrence.where)} takes its value as a separate word, "
            f"and {after!r} would be read as an option"
        )
    if occurrence.env:
        return _change_env(scan, occurrence, before, after)
    argv = list(scan.argv)
    # An unchanged value writes nothing, so a shell value keeps however it was quoted.
    if after != before and occurrence.word < 0:
        argv[occurrence.index] = occurrence.prefix + after
    elif after != before:
        argv[occurrence.index] = _rewrite_script(argv[occurrence.index], occurrence, after, flag, scan)
    n = len(scan.command)
    return FlagChange(
        command=tuple(argv[:n]),
        args=tuple(argv[n:]),
        before=before,
        after=after,
        location=occurrence.location,
        spelling=occurrence.spelling if occurrence.spelling != flag else None,
    )


def _change_env(scan: _Scan, occurrence: _Occurrence, before: str, after: str) -> FlagChange:
    """Only the env var's value changes, and in it only the flag's value; command and args stay."""
    spelling = occurrence.spelling if occurrence.spelling != scan.flag else None
    unchanged = FlagChange(scan.command, scan.args, before, after, occurrence.location, spelling)
    if after == before:
        return unchanged
    if not _PLAIN.fullmatch(after):
        raise FlagError(f"{scan.flag} in {scan.describe(occurrence.where)}: {after!r} cannot be written into that "
                        "env var as one word that every reader splits the same way")
    text = next(v.value for v in scan.env if v.name == occurrence.env)
    assert text is not None  # only written values are scanned
    start, end = occurrence.span
    return dataclasses.replace(unchanged, env=((occurrence.env, text[:start] + after + text[end:]),))


# --- shell scripts -----------------------------------------------------------------------------

# Words are split here only to know where each one starts and ends; what a word *means* (its
# quotes removed) is always shlex's reading, and a rewrite must leave shlex's reading of every
# other word unchanged.
_BLANKS = " \t\r\n\f\v"
_OPERATORS = ";&|<>()"


@dataclasses.dataclass(frozen=True)
class _Word:
    start: int
    end: int
    raw: str
    text: str | None  # shlex's reading; None for an operator or a word shlex reads as several
    operator: bool = False


def _decode(raw: str) -> str | None:
    lexer = shlex.shlex(raw, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError:
        return None
    return tokens[0] if len(tokens) == 1 else None


def _lex(script: str) -> list[_Word]:
    words: list[_Word] = []
    i, n = 0, len(script)
    while i < n:
        c = script[i]
        if c in _BLANKS:
            i += 1
        elif script.startswith("\\\n", i):  # line continuation: just a blank
            i += 2
        elif c == "#":  # a comment runs to the end of the line
            end = script.find("\n", i)
            i = n if end < 0 else end
        elif c in _OPERATORS:
            j = i
            while j < n and script[j] in _OPERATORS:
                j += 1
            words.append(_Word(i, j, script[i:j], None, operator=True))
            i = j
        else:
            j = _word_end(script, i)
            raw = script[i:j]
            words.append(_Word(i, j, raw, _decode(raw)))
            i = j
    return words


def _word_end(s: str, i: int) -> int:
    n = len(s)
    while i < n:
        c = s[i]
        if c in _BLANKS or c in _OPERATORS:
            return i
        if c == "\\":
            i += 2
        elif c == "'":
            end = s.find("'", i + 1)
            if end < 0:
                raise ValueError("unterminated single quote")
            i = end + 1
        elif c == '"':
            i = _double_quoted_end(s, i + 1)
        elif c == "`":
            i = _backquoted_end(s, i + 1)
        elif c == "$" and i + 1 < n and s[i + 1] in "({":
            i = _balanced_end(s, i + 1)
        else:
            i += 1
    return min(i, n)


def _double_quoted_end(s: str, i: int) -> int:
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
        elif c == '"':
            return i + 1
        elif c == "`":
            i = _backquoted_end(s, i + 1)
        elif c == "$" and i + 1 < len(s) and s[i + 1] in "({":
            i = _balanced_end(s, i + 1)
        else:
            i += 1
    raise ValueError("unterminated double quote")


def _backquoted_end(s: str, i: int) -> int:
    while i < len(s):
        if s[i] == "\\":
            i += 2
        elif s[i] == "`":
            return i + 1
        else:
            i += 1
    raise ValueError("unterminated backquote")


def _balanced_end(s: str, i: int) -> int:
    """End of `(...)` or `{...}` starting at s[i], for $(...), $((...)) and ${...}."""
    opening = s[i]
    closing = ")" if opening == "(" else "}"
    depth = 0
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == "'":
            end = s.find("'", i + 1)
            if end < 0:
                raise ValueError("unterminated single quote")
            i = end + 1
            continue
        if c == '"':
            i = _double_quoted_end(s, i + 1)
            continue
        if c == opening:
            depth += 1
        elif c == closing:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError(f"unterminated ${opening}")


_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./\-]+")


def _char_positions(raw: str) -> list[tuple[int, str | None, int]] | None:
    """For each character of the word as shlex reads it: (index in raw, quote it sits in, index
    where that quoting began). Mirrors shlex's POSIX rules; the caller checks it agrees."""
    out: list[tuple[int, str | None, int]] = []
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c == "\\":
            if i + 1 >= n:
                return None
            out.append((i + 1, None, i))
            i += 2
        elif c == "'":
            end = raw.find("'", i + 1)
            if end < 0:
                return None
            out.extend((j, "'", i) for j in range(i + 1, end))
            i = end + 1
        elif c == '"':
            j = i + 1
            while j < n and raw[j] != '"':
                # Inside double quotes shlex unescapes only \" and \\, as the shell mostly does.
                if raw[j] == "\\" and j + 1 < n and raw[j + 1] in '"\\':
                    j += 1
                out.append((j, '"', i))
                j += 1
            if j >= n:
                return None
            i = j + 1
        else:
            out.append((i, None, i))
            i += 1
    return out


def _quoted_for(context: str | None, text: str) -> str | None:
    """`text` written to sit where `context` quoting is open; None when it cannot sit there."""
    if context is None:
        return text if _PLAIN.fullmatch(text) else shlex.quote(text)
    if context == "'":
        return text.replace("'", "'\"'\"'")  # close, add a double-quoted quote, reopen
    if re.search(r"[$`!]", text):
        return None  # the shell would expand these inside double quotes, whatever shlex says
    return re.sub(r'(["\\])', r"\\\1", text)


def _rewrite_script(script: str, occurrence: _Occurrence, after: str, flag: str, scan: _Scan) -> str:
    words = _lex(script)
    word = words[occurrence.word]
    raw, text = word.raw, word.text or ""
    positions = _char_positions(raw)
    candidates: list[tuple[int, str]] = []
    if positions is not None and "".join(raw[p] for p, _, _ in positions) == text:
        # The value is the tail of its word, so everything from its first character to the end
        # of the word is value or closing quotes: rewrite just that stretch.
        k = len(occurrence.prefix)
        start, context, opened = positions[k]
        closing = context or ""
        in_place = _quoted_for(context, after)
        if in_place is not None:
            candidates.append((start, in_place + closing))
        if context is not None:
            if opened == start - 1 and (k == 0 or positions[k - 1][0] < opened):
                # The quotes wrap the value alone: requote the value as a whole.
                candidates.append((opened, shlex.quote(after)))
            # Close the quote the value sat in and quote the new value afresh.
            candidates.append((start, closing + shlex.quote(after)))
    expected = [(w.operator, w.text) for w in words]
    expected[occurrence.word] = (False, occurrence.prefix + after)
    for start, replacement in candidates:
        new_script = script[: word.start + start] + replacement + script[word.end:]
        try:
            relexed = _lex(new_script)
        except ValueError:
            continue
        if [(w.operator, w.text) for w in relexed] == expected:
            return new_script
    raise FlagError(
        f"{flag} in {scan.describe(occurrence.where)} is written as {raw!r}; "
        "runbook cannot rewrite that value without touching the rest of the script"
    )


def factor_refusal(flag: str, before: str, after: str, factor: float | None, floor: float | None,
                   ceiling: float | None) -> tuple[str, str] | None:
    """(guard, reason) when moving `flag` by `factor` would change nothing or move it the wrong way
    (a clamp must never turn "lower by 10%" into a raise); None when the factor moves it."""
    if factor is None:
        return None
    before_n, after_n = float(before), float(after)
    wrong_way = (factor < 1 and after_n > before_n) or (factor > 1 and after_n < before_n)
    if after_n != before_n and not wrong_way:
        return None
    limit = "floor" if factor < 1 else "ceiling"
    bound = floor if factor < 1 else ceiling
    return (limit, f"{flag} is {before}, already at or past its {limit} {bound:g}; moving it by ×{factor:g} is refused"
            if bound is not None else f"{flag} is {before} and ×{factor:g} leaves it unchanged")
