"""Where a signal reads nothing, whether any of its sources is there at all: "no source here" (an
exporter is missing, and which) told apart from "no reading", never from quiet.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from runbook.backends.base import Sample
from runbook.signals.catalog import SOURCE_LABEL, Catalog


@runtime_checkable
class RawQueries(Protocol):
    """A metrics backend that also answers raw PromQL over its own catalog (Prometheus does)."""

    catalog: Catalog

    def query_promql(self, expr: str, *, at: dt.datetime, what: str = "the query") -> list[Sample]: ...


def missing_sources(metrics: object, signal: str, labels: Mapping[str, str], at: dt.datetime) -> dict[str, str] | None:
    """The signal's sources (metric -> who exports it) when none has a series with these labels; {} when one
    has; None when this backend cannot tell (no raw PromQL, or the signal declares no sources)."""
    if not isinstance(metrics, RawQueries) or signal not in metrics.catalog.signals:
        return None
    expr = metrics.catalog.source_query(signal, labels)
    if expr is None:
        return None
    present = metrics.query_promql(expr, at=at, what=f"the sources of signal {signal}")
    if any(s.labels.get(SOURCE_LABEL) for s in present):
        return {}
    return dict(metrics.catalog.get(signal).sources)


def no_source_reason(signal: str, labels: Mapping[str, str], missing: Mapping[str, str]) -> str:
    where = f" with {', '.join(f'{k}={v}' for k, v in labels.items())}" if labels else ""
    names = " or ".join(f"{metric} (from {who})" for metric, who in missing.items())
    return (f"{signal} has no source here: no series of {names}{where}; "
            f"`runbook signals --check` lists every signal's sources")
