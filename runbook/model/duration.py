"""Durations as playbooks write them: `30s`, `5m`, `1h30m`, `2d`, or a number of seconds.

One parser for playbooks, flags and scenario files, so `for: 5m` means the same everywhere.
"""

from __future__ import annotations

import re
from typing import Annotated

import pydantic

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_duration(value: object) -> float:
    """Seconds in `value`; raises ValueError with the accepted forms when it is not a duration."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as 30s, 5m or 1h, found {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"expected a duration ≥ 0, found {value}")
        return float(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if re.fullmatch(r"\d+(\.\d+)?", text):
            return float(text)
        parts = _PART.findall(text)
        if parts and "".join(n + u for n, u in parts) == text:
            return sum(float(n) * _UNITS[u] for n, u in parts)
    raise ValueError(f"expected a duration such as 30s, 5m or 1h, found {value!r}")


def format_duration(seconds: float) -> str:
    seconds = float(seconds)
    if seconds < 1 and seconds != 0:
        return f"{seconds * 1000:.0f}ms"
    whole = int(round(seconds))
    out = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if whole >= size:
            out.append(f"{whole // size}{unit}")
            whole %= size
    return "".join(out) or "0s"


Duration = Annotated[float, pydantic.BeforeValidator(parse_duration)]
