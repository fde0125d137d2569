"""`prom.compare_versions`: one signal for the canary against the stable version, side by side.

Grouped by the label that names the version in the metrics (e.g. `version`), it says whether the
canary is worse, relatively (throughput 5% lower, P95 higher) or absolutely (OOMs > 3/min).
"""

from __future__ import annotations

from typing import Literal

import pydantic

from runbook.actions import fields
from runbook.actions.base import ActionResult, StepContext
from runbook.model.registry import ActionParams, Kind, action


class CompareVersionsParams(ActionParams):
    signal: fields.SignalName
    labels: fields.PromLabels = {}
    version_label: str = pydantic.Field(pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")  # a Prometheus label name
    canary: str = pydantic.Field(min_length=1, max_length=63)
    stable: str = pydantic.Field(min_length=1, max_length=63)
    worse_when: Literal["higher", "lower"] = "higher"
    by_more_than: float | None = pydantic.Field(None, ge=0)  # relative to stable: 0.05 is 5%
    above: float | None = None  # the canary's own value past this is worse, whatever stable does
    per_pod: bool = False  # compare the versions' pods on average (throughput: versions differ in size)

    @pydantic.model_validator(mode="after")
    def _a_test(self) -> "CompareVersionsParams":
        if self.by_more_than is None and self.above is None:
            raise ValueError("give `by_more_than` (against stable) and/or `above` (the canary's own limit)")
        if self.canary == self.stable:
            raise ValueError(f"canary and stable are both {self.canary!r}")
        return self


@action("prom.compare_versions", kind=Kind.DIAGNOSTIC, params=CompareVersionsParams)
def compare_versions(ctx: StepContext, p: CompareVersionsParams) -> ActionResult:
    """The signal now for the canary and the stable version (grouped by `version_label`), and
    whether the canary is worse: `worse` in the result, with the reason in the summary.

    A version with no data is never read as healthy: the canary without data is `unknown`.
    """
    by = [p.version_label, "pod"] if p.per_pod else [p.version_label]
    samples = ctx.metrics.query(p.signal, at=ctx.now, labels=p.labels, by=by)
    grouped: dict[str, list[float]] = {}
    for s in samples:
        grouped.setdefault(s.labels.get(p.version_label, ""), []).append(s.value)
    values = {version: sum(found) / len(found) for version, found in grouped.items()}
    canary, stable = values.get(p.canary), values.get(p.stable)
    ctx.evidence("samples", f"{p.signal} by {', '.join(by)}", signal=p.signal, labels=p.labels, by=by,
                 samples=[{"labels": dict(s.labels), "value": s.value} for s in samples],
                 at=ctx.now)
    if canary is None:
        return ActionResult.ok(f"{p.signal}: no data for the canary ({p.version_label}={p.canary})",
                               canary=None, stable=stable, change=None, worse=False, unknown=True)
    reasons = []
    if p.above is not None and canary > p.above:
        reasons.append(f"canary {canary:g} above {p.above:g}")
    change = None
    if stable is not None and stable != 0:
        change = (canary - stable) / abs(stable)
        worse_by = change if p.worse_when == "higher" else -change
        if p.by_more_than is not None and worse_by > p.by_more_than:
            reasons.append(f"{abs(change):.1%} {p.worse_when} than stable ({stable:g}), more than "
                           f"{p.by_more_than:.0%}")
    worse = bool(reasons)
    shown_stable = "no data" if stable is None else f"{stable:g}"
    each = " per pod" if p.per_pod else ""
    summary = (f"{p.signal}{each}: canary {p.canary} {canary:g}, stable {p.stable} {shown_stable}"
               + (f"; worse: {'; '.join(reasons)}" if worse else "; not worse"))
    return ActionResult.ok(summary, canary=canary, stable=stable, change=change, worse=worse, unknown=False)
