"""`prom.*`: read signals from the metrics backend, now and against earlier windows.

Diagnostics only. An unreachable source fails the step; it never reads as "all clear".
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Literal

import pydantic

from runbook.actions import fields
from runbook.actions.base import ActionResult, StepContext
from runbook.backends.base import Sample
from runbook.model.duration import Duration, format_duration
from runbook.model.registry import ActionParams, Kind, action


class QueryParams(ActionParams):
    signal: fields.SignalName
    labels: fields.PromLabels = {}
    by: fields.LabelNames = []
    above: float | None = None  # samples above this are listed as `matching`
    below: float | None = None


def _sample_rows(samples: list[Sample]) -> list[dict]:
    return [{"labels": dict(s.labels), "value": s.value} for s in samples]


@action("prom.query", kind=Kind.DIAGNOSTIC, params=QueryParams)
def query(ctx: StepContext, p: QueryParams) -> ActionResult:
    """Query a signal now, optionally grouped by labels (e.g. `by: [pod]`).

    The result has `samples`, `max`, `sum`, and `matching` (the samples past `above`/`below`).
    """
    samples = ctx.metrics.query(p.signal, at=ctx.now, labels=p.labels, by=p.by)
    rows = _sample_rows(samples)
    matching = [r for r in rows if (p.above is not None and r["value"] > p.above)
                or (p.below is not None and r["value"] < p.below)]
    values = [r["value"] for r in rows]
    ctx.evidence("samples", f"{p.signal}" + (f" by {', '.join(p.by)}" if p.by else ""),
                 signal=p.signal, labels=p.labels, by=p.by, samples=rows, at=ctx.now)
    if not rows:
        return ActionResult.ok(f"{p.signal}: no data", samples=[], max=None, sum=None, matching=[], count=0)
    by_label = {r["labels"].get(p.by[0], ""): r["value"] for r in rows} if p.by else {}
    summary = f"{p.signal}: max {max(values):g}, total {sum(values):g} over {len(rows)} series"
    if p.above is not None or p.below is not None:
        summary += f"; {len(matching)} past the threshold"
    return ActionResult.ok(summary, samples=rows, max=max(values), sum=sum(values), matching=matching,
                           count=len(rows), by_label=by_label,
                           matching_labels=[r["labels"].get(p.by[0], "") for r in matching] if p.by else [])


class CompareParams(ActionParams):
    signal: fields.SignalName
    labels: fields.PromLabels = {}
    window: Duration = 3600.0  # the previous window and the chart's span
    baseline: Duration = 86400.0  # "the same time yesterday"
    chart_points: int = pydantic.Field(60, ge=2, le=2000)


def _total(samples: list[Sample]) -> float | None:
    return sum(s.value for s in samples) if samples else None


def classify_change(now: float | None, previous: float | None, yesterday: float | None) -> Literal["sudden", "gradual", "steady", "unknown"]:
    """Sudden when most of the change against yesterday happened within the last window."""
    if now is None or previous is None or yesterday is None:
        return "unknown"
    scale = max(abs(now), abs(yesterday), abs(previous), 1e-9)
    if abs(now - yesterday) / scale < 0.1 and abs(now - previous) / scale < 0.1:
        return "steady"
    if abs(now - previous) >= 0.5 * abs(now - yesterday):
        return "sudden"
    return "gradual"


@action("prom.compare", kind=Kind.DIAGNOSTIC, params=CompareParams)
def compare(ctx: StepContext, p: CompareParams) -> ActionResult:
    """Compare a signal now with the previous window and the same time yesterday (SOP step 1).

    Says whether the change is `sudden`, `gradual` or `steady`, and keeps the last window's series
    as evidence for the report's chart.
    """
    at_previous = ctx.now - dt.timedelta(seconds=p.window)
    at_baseline = ctx.now - dt.timedelta(seconds=p.baseline)
    now = _total(ctx.metrics.query(p.signal, at=ctx.now, labels=p.labels))
    previous = _total(ctx.metrics.query(p.signal, at=at_previous, labels=p.labels))
    yesterday = _total(ctx.metrics.query(p.signal, at=at_baseline, labels=p.labels))
    series = ctx.metrics.query_range(p.signal, start=at_previous, end=ctx.now,
                                     step_seconds=float(max(math.ceil(p.window / (p.chart_points - 1)), 1)), labels=p.labels)
    shape = classify_change(now, previous, yesterday)
    points = [[t, v] for s in series[:1] for t, v in s.points]
    ctx.evidence("comparison", f"{p.signal}: now vs {format_duration(p.window)} ago vs yesterday",
                 signal=p.signal, labels=p.labels, now=now, previous=previous, yesterday=yesterday, shape=shape,
                 window=p.window, series=points)

    def show(v: float | None) -> str:
        return "no data" if v is None else f"{v:g}"

    summary = (f"{p.signal} now {show(now)}, {format_duration(p.window)} ago {show(previous)}, "
               f"yesterday {show(yesterday)}: {shape}")
    return ActionResult.ok(summary, now=now, previous=previous, yesterday=yesterday, shape=shape)
