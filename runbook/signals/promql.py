"""Safe pieces of PromQL: checked names and values, matchers, placeholders, durations.

Every value that reaches a query passes one of these patterns first, so a label value from an
alert or a template can never close a string and add PromQL of its own.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping

LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# The same alphabet the actions' params allow: no quote, backslash or brace can reach PromQL.
LABEL_VALUE = re.compile(r"^[A-Za-z0-9_.:/@+-]{0,253}$")
SIGNAL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_:]{0,127}$")
DURATION = re.compile(r"^(?:\d+(?:ms|s|m|h|d|w|y))+$")
NUMBER = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")
_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\\n]|\\[^\n])*)"\s*')
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
AGGREGATIONS = ("sum", "max", "min", "avg")
# Prometheus refuses range queries with more points per series than this.
MAX_RANGE_POINTS = 11_000


def check_label_name(name: str, what: str = "label name") -> str:
    if not isinstance(name, str) or not LABEL_NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a valid Prometheus {what} (letters, digits and '_', not first a digit)")
    return name


def check_label_value(name: str, value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"label {name}={value!r} must be a string")
    text = str(value)
    if not LABEL_VALUE.fullmatch(text):
        raise ValueError(f"label {name}={text!r} has characters not allowed in a matcher value "
                         f"(letters, digits and . _ : / @ + - only)")
    return text


def quote(value: str) -> str:
    """A PromQL string literal; values are checked first, so this only adds the quotes."""
    return json.dumps(value)


def regex_literal(name: str, value: object) -> str:
    """A checked label value as an RE2 pattern matching exactly it: of the characters a value may
    hold, only `.` and `+` mean something in a regular expression, so those are escaped."""
    return re.sub(r"([.+])", r"\\\1", check_label_value(name, value))


def matchers(labels: Mapping[str, str]) -> str:
    """`a="x",b="y",` — each matcher followed by a comma, which PromQL accepts before `}`."""
    return "".join(f"{check_label_name(k)}={quote(check_label_value(k, v))}," for k, v in labels.items())


def parse_matchers(text: str) -> str:
    """A user's matcher list (`job="vllm", model_name=~"llama.*"`) normalised to `a="x",…,`.

    Raises ValueError when it is anything but a comma-separated list of matchers.
    """
    text = text.strip()
    if not text:
        return ""
    parts, position = [], 0
    while position < len(text):
        found = _MATCHER.match(text, position)
        if not found:
            raise ValueError(f"{text!r} is not a list of label matchers such as job=\"vllm\", model_name=~\"llama.*\"")
        # Regular expressions are RE2, checked by Prometheus itself (its message is shown).
        name, op, value = found.groups()
        parts.append(f'{name}{op}"{value}",')
        position = found.end()
        if position < len(text):
            if text[position] != ",":
                raise ValueError(f"{text!r}: expected ',' between matchers at character {position + 1}")
            position += 1
    return "".join(parts)


def grouping(names: Iterable[str]) -> str:
    """`pod,gpu,` for a `by (…)` clause that may continue with more labels (`by ({by}le)`)."""
    return "".join(f"{check_label_name(n)}," for n in names)


def reads_metric(expr: str, metric: str) -> bool:
    """Whether `expr` names the metric `metric` (as a whole name, not a prefix of another)."""
    return re.search(rf"(?<![A-Za-z0-9_:]){re.escape(metric)}(?![A-Za-z0-9_:])", expr) is not None


def placeholders(template: str) -> list[str]:
    return list(dict.fromkeys(PLACEHOLDER.findall(template)))


def substitute(template: str, values: Mapping[str, str]) -> str:
    """Replace each `{name}`; a name not in `values` is a KeyError (checked at load time)."""
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def prom_duration(seconds: float) -> str:
    """Seconds as a Prometheus duration (`2m`, `1m30s`, `500ms`), exact to the millisecond."""
    if seconds < 0 or math.isnan(seconds):
        raise ValueError(f"a duration must be ≥ 0, found {seconds}")
    millis = round(seconds * 1000)
    if millis == 0:
        return "0s"
    out = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        if millis >= size:
            out.append(f"{millis // size}{unit}")
            millis %= size
    return "".join(out)


def tidy(expr: str) -> str:
    """Drop what templates leave outside strings: empty `{}`, `by ()`, a `,` before `}` or `)`."""
    out: list[str] = []
    quote_char = ""
    i = 0
    while i < len(expr):
        c = expr[i]
        if quote_char:
            out.append(c)
            if c == "\\" and quote_char != "`" and i + 1 < len(expr):
                out.append(expr[i + 1])
                i += 1
            elif c == quote_char:
                quote_char = ""
        elif c in "\"'`":
            quote_char = c
            out.append(c)
        elif c == "," and expr[i + 1:i + 2] in ("}", ")"):
            pass
        elif expr.startswith(" by () ", i):
            i += 6  # `sum by () (x)` is `sum(x)`
        elif c == "{" and expr[i + 1:i + 2] == "}" and out and (out[-1].isalnum() or out[-1] in "_:"):
            i += 1  # `name{}` is `name`
        else:
            out.append(c)
        i += 1
    return "".join(out)


def format_number(value: float) -> str:
    """A threshold as PromQL writes it: `0`, `0.85`, `50`, never `50.0` or `1e-05` surprises."""
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))
