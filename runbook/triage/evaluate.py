"""Triage: every playbook's `detect` against the metrics, at one instant, ranked.

A condition fires when it holds now and has held, without a gap, for its `for:` window; it is
pending when it holds for less. A signal that cannot be read is `unknown`, one none of whose
sources has a series here is `no_source` (naming the exporter that would provide it); neither is
ever quiet. Once
the metrics backend is unreachable, the remaining playbooks are not asked again: each would
only wait for the same timeout. The first is asked alone, to find that out; the rest at once.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime as dt
import math
from collections.abc import Mapping, Sequence
from typing import Any

from runbook.backends.base import Metrics, Series
from runbook.text import templating
from runbook.errors import BackendUnavailable, ExitCode, RunbookError
from runbook.model.playbook import Detect, Playbook
from runbook.triage.sources import missing_sources, no_source_reason

LOOKBACK = 3600.0  # how far back "since" is traced; also the "an hour ago" of the trend
STEP = 15.0  # resolution of "since": a typical scrape interval
SEVERITY_RANK = {"P1": 0, "P2": 1, "P3": 2, "P4": 3}
MAX_CONCURRENT_QUERIES = 8  # detect queries of triage in flight at once
# A detect's value now by an instant query first, the range only where it holds; bench/triage_samples.py
# turns it off to measure, in the same run, what the range-for-every-detect way asked of Prometheus.
INSTANT_FIRST = True


@dataclasses.dataclass(frozen=True)
class Finding:
    playbook: str
    title: str
    severity: str
    state: str  # firing | pending | quiet | unknown | no_source | not_applicable | skipped
    signal: str | None = None
    condition: str = ""
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    value: float | None = None
    since: dt.datetime | None = None
    since_is_lower_bound: bool = False  # held for the whole look-back: it began earlier still
    for_seconds: float = 0.0
    strength: float = 0.0  # how far past the threshold, relative to it
    held_seconds: float | None = None
    reason: str = ""  # why unknown, no_source or skipped
    hour_ago: float | None = None  # the value one look-back earlier, for "sudden or gradual"
    missing_sources: Mapping[str, str] = dataclasses.field(default_factory=dict)  # no_source: metric -> exporter
    alert: str | None = None  # an alert table row's name (a warning line; `playbook` handles it); None: a detect
    read_from: str = ""  # where the value was read when not from Prometheus: "from logs, 4 pods, last 5m"
    logs: Mapping[str, Any] | None = None  # what the pods' logs gave: pods, window, events, restarts, capped

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"playbook": self.playbook, "title": self.title, "severity": self.severity,
                               "state": self.state}
        if self.alert is not None:
            out["alert"] = self.alert
        if self.signal is not None:
            out.update(signal=self.signal, condition=self.condition, labels=dict(self.labels))
        if self.state in ("firing", "pending", "quiet"):
            out["value"] = self.value
        if self.state in ("firing", "pending"):
            out.update(since=self.since.isoformat() if self.since else None,
                       since_is_lower_bound=self.since_is_lower_bound, held_seconds=self.held_seconds,
                       for_seconds=self.for_seconds, strength=round(self.strength, 4))
        if self.reason:
            out["reason"] = self.reason
        if self.state == "no_source" or self.read_from:
            out["missing_sources"] = dict(self.missing_sources)
        if self.read_from:
            out["read_from"] = self.read_from
        if self.logs is not None:
            out["logs"] = dict(self.logs)
        return out


@dataclasses.dataclass(frozen=True)
class NotEvaluated:
    """A playbook file that could not be loaded, so its condition was never asked: never quiet."""

    file: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"file": self.file, "reason": self.reason}


@dataclasses.dataclass(frozen=True)
class Report:
    at: dt.datetime
    findings: tuple[Finding, ...]
    unavailable: str | None = None  # why the backend could not be reached, if it could not
    invalid: tuple[NotEvaluated, ...] = ()

    warnings: tuple[Finding, ...] = ()  # the alert table's rows: they fire, but no playbook is run on them

    def of(self, state: str) -> list[Finding]:
        return [f for f in self.findings if f.state == state]

    def warnings_in(self, *states: str) -> list[Finding]:
        return [f for f in self.warnings if f.state in states]

    @property
    def firing(self) -> list[Finding]:
        """Most urgent first: severity, then what began first (a cause precedes its effects), then strength."""
        return _ranked(self.of("firing"))

    @property
    def warnings_firing(self) -> list[Finding]:
        return _ranked(self.warnings_in("firing"))

    @property
    def top(self) -> Finding | None:
        firing = self.firing
        return firing[0] if firing else None

    @property
    def exit_code(self) -> int:
        """What fires first (a playbook's detect or a warning line); then what could not be seen; then
        what a playbook needs that has no source (a warning line without one is listed, not counted:
        it is no playbook's need); then what was not evaluated; 0 only if all is quiet."""
        if self.firing or self.warnings_firing:
            return int(ExitCode.FIRING)
        if self.of("unknown") or self.warnings_in("unknown"):
            return int(ExitCode.BLIND)
        if self.of("no_source"):
            return int(ExitCode.NO_SOURCE)
        if self.invalid:
            return int(ExitCode.INVALID)
        return int(ExitCode.OK)


def _ranked(findings: Sequence[Finding]) -> list[Finding]:
    far = dt.datetime.max.replace(tzinfo=dt.timezone.utc)
    return sorted(findings, key=lambda f: (SEVERITY_RANK.get(f.severity, 9), f.since or far, -f.strength,
                                           f.playbook, f.alert or ""))


def detect_scope(playbook: Playbook, params: Mapping[str, Any]) -> tuple[dict[str, str], list[str]]:
    """(the detect's labels rendered as the engine renders them, with these params; the labels asked
    across the fleet instead: those whose param has no value here, such as a node not named yet)."""
    assert playbook.detect is not None
    merged = {**playbook.params, **params}
    fixed: dict[str, str] = {}
    across: list[str] = []
    for key, value in playbook.detect.labels.items():
        refs = templating.param_references(value) if templating.is_template(value) else set()
        if any(merged.get(ref) is None for ref in refs):
            across.append(key)
        else:
            fixed[key] = value
    context = {"params": merged, "alert": {"labels": {}, "annotations": {}, "name": "", "source": "triage"},
               "incident": {"id": ""}}
    rendered = templating.render_value(fixed, context)
    return {str(k): str(v) for k, v in rendered.items()}, across


def detect_labels(playbook: Playbook, params: Mapping[str, Any]) -> dict[str, str]:
    """The detect's labels as triage asks them with these params (those asked across the fleet left out)."""
    return detect_scope(playbook, params)[0]


def finding_params(playbook: Playbook, finding: Finding) -> dict[str, str]:
    """The params a finding names that the playbook had no value for: the firing node of a fleet-wide detect."""
    if playbook.detect is None:
        return {}
    out: dict[str, str] = {}
    for key, value in playbook.detect.labels.items():
        refs = templating.param_references(value) if templating.is_template(value) else set()
        if len(refs) == 1 and playbook.params.get(next(iter(refs))) is None and key in finding.labels:
            out[next(iter(refs))] = finding.labels[key]
    return out


def _combine(series: Sequence[Series], detect: Detect) -> dict[dt.datetime, float]:
    """One value per instant, as the engine reads it: the worst series for the condition."""
    pick = max if detect.above is not None else min
    out: dict[dt.datetime, float] = {}
    for s in series:
        for t, v in s.points:
            out[t] = v if t not in out else pick(out[t], v)
    return out


def _strength(detect: Detect, value: float) -> float:
    bound = detect.above if detect.above is not None else detect.below
    assert bound is not None
    excess = value - bound if detect.above is not None else bound - value
    return excess / max(abs(bound), 1e-9) if bound else excess


def _grouped(series: Sequence[Series], across: Sequence[str]) -> dict[tuple[str, ...], list[Series]]:
    groups: dict[tuple[str, ...], list[Series]] = {}
    for s in series:
        groups.setdefault(tuple(s.labels.get(k, "") for k in across), []).append(s)
    return groups


def judge(common: dict[str, Any], detect: Detect, values: Mapping[dt.datetime, float],
           grid: Sequence[dt.datetime], at: dt.datetime, lookback: float) -> Finding | None:
    """The condition over one group's values; None when it has no value now."""
    now = values.get(grid[0])
    if now is None:
        return None
    hour_ago = values.get(at - dt.timedelta(seconds=lookback))
    if not detect.holds(now):
        return Finding(**common, state="quiet", value=now, hour_ago=hour_ago)
    since, held_all = grid[0], True
    for t in grid[1:]:
        value = values.get(t)
        if value is None or not detect.holds(value):
            held_all = False
            break
        since = t
    held = (at - since).total_seconds()
    state = "firing" if held >= detect.for_ else "pending"
    return Finding(**common, state=state, value=now, since=since, since_is_lower_bound=held_all,
                   held_seconds=held, strength=_strength(detect, now), hour_ago=hour_ago)


def _urgency(detect: Detect, finding: Finding) -> tuple[int, float]:
    """Firing before pending before quiet; then the strongest, or the closest to its threshold."""
    rank = {"firing": 2, "pending": 1}.get(finding.state, 0)
    value = finding.value or 0.0
    return rank, finding.strength if rank else (value if detect.above is not None else -value)


def _instant(metrics: Metrics, signal: str, at: dt.datetime, labels: Mapping[str, str], across: Sequence[str],
             condition: Any) -> dict[tuple[str, ...], float]:
    """Each group's value at `at`, the worst of its series for the condition (as `_combine` reads it)."""
    pick = max if condition.above is not None else min
    out: dict[tuple[str, ...], float] = {}
    for sample in metrics.query(signal, at=at, labels=labels, by=across):
        group = tuple(sample.labels.get(k, "") for k in across)
        out[group] = sample.value if group not in out else pick(out[group], sample.value)
    return out


def group_findings(common: dict[str, Any], condition: Any, metrics: Metrics, signal: str, labels: Mapping[str, str],
                   across: Sequence[str], at: dt.datetime, *, lookback: float, step: float) -> list[Finding]:
    """Each group's finding at `at` (none for a group with no value now). An instant query first: only
    where the condition holds now is the range query asked, to trace since when it has held; a quiet
    group costs Prometheus one sample per series now and one a look-back earlier, not a range of them."""
    if INSTANT_FIRST:
        now = _instant(metrics, signal, at, labels, across, condition)
        if not any(condition.holds(value) for value in now.values()):
            if not now:
                return []
            earlier = _instant(metrics, signal, at - dt.timedelta(seconds=lookback), labels, across, condition)
            return [Finding(**{**common, "labels": {**labels, **dict(zip(across, group))}}, state="quiet",
                            value=value, hour_ago=earlier.get(group))
                    for group, value in now.items()]
    points = math.ceil(max(lookback, condition.for_ + 4 * step) / step)
    start = at - dt.timedelta(seconds=points * step)
    series = metrics.query_range(signal, start=start, end=at, step_seconds=step, labels=labels, by=across)
    grid = [at - dt.timedelta(seconds=k * step) for k in range(points + 1)]  # now, then backwards
    judged = [judge({**common, "labels": {**labels, **dict(zip(across, group))}}, condition,
                     _combine(members, condition), grid, at, lookback)
              for group, members in _grouped(series, across).items()]
    return [f for f in judged if f is not None]


def evaluate_one(playbook: Playbook, metrics: Metrics, at: dt.datetime, params: Mapping[str, Any], *,
                 lookback: float = LOOKBACK, step: float = STEP) -> Finding:
    """The playbook's detect at `at`. Labels whose param has no value are asked across the fleet, each
    value on its own (a node), and the most urgent one is the finding, its labels naming it."""
    base = dict(playbook=playbook.name, title=playbook.title, severity=playbook.severity)
    detect = playbook.detect
    if detect is None:
        return Finding(**base, state="skipped", reason="no `detect:` condition")
    try:
        labels, across = detect_scope(playbook, params)
    except RunbookError as exc:
        return Finding(**base, state="unknown", signal=detect.signal, condition=detect.describe(), reason=str(exc))
    common = dict(base, signal=detect.signal, condition=detect.describe(), labels=labels, for_seconds=detect.for_)
    judged = group_findings(common, detect, metrics, detect.signal, labels, across, at, lookback=lookback, step=step)
    if judged:
        return max(judged, key=lambda f: _urgency(detect, f))
    where = ", ".join(f"{k}={v}" for k, v in labels.items()) or "all series"
    reason = (f"no data for {detect.signal} ({where}) at {at.isoformat()}: the query returned nothing; "
              f"see `runbook signals --check`")
    try:
        missing = missing_sources(metrics, detect.signal, labels, at)
    except BackendUnavailable:
        raise
    except RunbookError as exc:
        return Finding(**common, state="unknown", reason=f"{reason} (its sources could not be checked: {exc})")
    if missing:
        absent = _not_applicable(playbook, params, metrics, at)
        if absent is not None:
            return Finding(**common, state="not_applicable", reason=absent)
        return Finding(**common, state="no_source", missing_sources=missing,
                       reason=no_source_reason(detect.signal, labels, missing))
    return Finding(**common, state="unknown", reason=reason)


def _not_applicable(playbook: Playbook, params: Mapping[str, Any], metrics: Metrics, at: dt.datetime) -> str | None:
    """Why the playbook does not apply here (its `applies_when` has no series), or None when it does
    or this backend cannot tell. Asked only where the detect read nothing: a reading means it applies."""
    applies = playbook.detect.applies_when if playbook.detect is not None else None
    if applies is None:
        return None
    merged = {**playbook.params, **params}
    context = {"params": merged, "alert": {"labels": {}, "annotations": {}, "name": "", "source": "triage"},
               "incident": {"id": ""}}
    try:
        labels = {str(k): str(v) for k, v in templating.render_value(dict(applies.labels), context).items()}
        missing = missing_sources(metrics, applies.signal, labels, at)
    except BackendUnavailable:
        raise
    except RunbookError:
        return None  # cannot tell: the missing source is reported as it is
    if not missing:
        return None
    where = ", ".join(f"{k}={v}" for k, v in labels.items())
    return f"{applies.because} (no series of {' or '.join(missing)}{f' with {where}' if where else ''})"


def evaluate(playbooks: Sequence[Playbook], metrics: Metrics, at: dt.datetime,
             params: Mapping[str, Any] | None = None, *, lookback: float = LOOKBACK, step: float = STEP,
             invalid: Sequence[NotEvaluated] = ()) -> Report:
    """Every playbook's detect at `at`; `params` override each playbook's defaults (e.g. namespace).
    `invalid`: the playbook files that could not be loaded; they keep the report from being quiet.
    The alert table's rows are added by runbook.triage.warnings.with_warnings.

    The first detect (in name order) is asked alone: an unreachable or failing backend is known after
    one request and one timeout, and nothing else is asked. The others, independent queries, are then
    asked at once (at most MAX_CONCURRENT_QUERIES in flight).
    """
    at = at.replace(microsecond=0)
    ordered = sorted(playbooks, key=lambda p: p.name)
    asked = [p for p in ordered if p.detect is not None]

    def ask(playbook: Playbook) -> Finding | BackendUnavailable:
        try:
            return evaluate_one(playbook, metrics, at, params or {}, lookback=lookback, step=step)
        except BackendUnavailable as exc:
            return exc
        except RunbookError as exc:
            return _unknown(playbook, str(exc))

    answers: dict[str, Finding | BackendUnavailable] = {}
    if asked:
        answers[asked[0].name] = ask(asked[0])
    if len(asked) > 1 and not isinstance(answers[asked[0].name], BackendUnavailable):
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(MAX_CONCURRENT_QUERIES, len(asked) - 1),
                                                   thread_name_prefix="runbook-triage") as pool:
            answers.update(zip([p.name for p in asked[1:]], pool.map(ask, asked[1:])))
    findings: list[Finding] = []
    unavailable: str | None = None
    for playbook in ordered:
        answer = answers.get(playbook.name)
        if playbook.detect is None:
            findings.append(evaluate_one(playbook, metrics, at, params or {}, lookback=lookback, step=step))
        elif answer is None:  # not asked: the backend was already unavailable
            findings.append(_unknown(playbook, unavailable or "not asked"))
        elif isinstance(answer, BackendUnavailable):
            unavailable = unavailable or str(answer)
            findings.append(_unknown(playbook, str(answer)))
        else:
            findings.append(answer)
    return Report(at, tuple(findings), unavailable, tuple(invalid))


def _unknown(playbook: Playbook, reason: str) -> Finding:
    detect = playbook.detect
    return Finding(playbook.name, playbook.title, playbook.severity, "unknown", signal=detect.signal if detect else None,
                   condition=detect.describe() if detect else "", reason=reason)
