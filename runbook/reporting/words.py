"""How the report words a journal value: plain text, never a Python repr, numbers with their unit.

`inline` turns an event's dicts and lists into `replicas 3` and `[vllm-server-0, vllm-server-1]`;
`meaning` and `with_unit` say what a signal is and what its number counts, from the signal catalog.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

from runbook.errors import RunbookError


def inline(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {inline(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "[" + ", ".join(inline(v) for v in value) + "]"
    return str(value)


@dataclasses.dataclass(frozen=True)
class Meaning:
    what: str  # "requests waiting to be scheduled"; "" when the catalog does not know the signal
    unit: str  # "requests", "per minute", "ratio", "seconds", …
    aggregate: str  # how the signal's series add up to one value: sum, max, min, avg


@functools.lru_cache(maxsize=1)
def _catalog() -> dict[str, Any]:
    # The bundled catalog: the report is drawn offline, maybe long after, without the run's config.
    from runbook.signals.catalog import build_catalog

    try:
        return dict(build_catalog().signals)
    except RunbookError:
        return {}


def _first_clause(help_text: str) -> str:
    """The help text up to its first aside ("; …", ": …", " (…"), where at least three words precede it."""
    text = " ".join(help_text.split())
    for match in re.finditer(r"; |: | \(|, where ", text):
        head = text[:match.start()]
        if len(head.split()) >= 3:
            return head.rstrip(",. ")
    return text.rstrip(",. ")


def meaning(signal: str) -> Meaning:
    spec = _catalog().get(signal)
    if spec is None:
        return Meaning("", "", "")
    return Meaning(_first_clause(spec.help), spec.unit, spec.aggregate)


def number(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"


def with_unit(value: float, unit: str) -> str:
    """`382 requests`, `21 per minute`, `0.97 (97%)`, `5.4 s`; a bare number where the unit is unknown."""
    text = number(value)
    if unit == "ratio":
        return f"{text} ({value * 100:.0f}%)"
    if unit == "percent":
        return f"{text}%"
    if unit == "seconds":
        return f"{text} s"
    return f"{text} {unit}" if unit else text
