"""Triage of a signal with no source here, from the pods' own logs: a stock vLLM exports no OOM
counter, but its pods log every CUDA out-of-memory error, and a cluster serves those logs.

Where a detect's signal has no source and the catalog says how to read it from logs (its `logs:`),
the playbook workload's pods are listed (at most `max_pods`), the current and previous containers'
logs read over the window (at most `max_bytes` each), and the matching lines counted per minute on
the rate window, as the expression's rate() would count them; a restart after an OOMKilled
termination counts one. Judged as a detect is: firing, pending or quiet. A log cut at its cap never
reads as quiet, nor does a pod that could not be read; a workload that is not there leaves the
signal without a source, saying why.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from runbook.actions.base import parse_workload
from runbook.backends.base import Cluster, Pod, PodLog
from runbook.errors import BackendUnavailable, NotFound, RunbookError
from runbook.model.duration import format_duration
from runbook.model.playbook import Playbook
from runbook.parsers.log_matches import split_lines
from runbook.signals.catalog import Catalog, LogSpec
from runbook.triage.evaluate import STEP, Finding, Report, judge

LOG_REACH = 3600.0  # seconds: an --at further back than this is not read from logs (kubelets rotate them)


@dataclasses.dataclass(frozen=True)
class Scope:
    """Whose logs: the playbook's workload in its namespace, one container (None: the pod's only one)."""

    namespace: str
    workload: str
    container: str | None
    pod: str | None = None  # the detect names one pod


def wanted(report: Report, catalog: Catalog) -> list[Finding]:
    """The findings that logs could read: no source here, and a signal the catalog can read from logs."""
    return [f for f in report.of("no_source")
            if f.signal in catalog.signals and catalog.get(f.signal).logs is not None]


def read_from_logs(report: Report, playbooks: Sequence[Playbook], catalog: Catalog, cluster: Cluster, *,
                   now: dt.datetime, params: Mapping[str, Any], workload: str | None = None,
                   step: float = STEP) -> Report:
    """The report with each finding of `wanted` read from its pods' logs where they can be read.
    `workload` (KIND/NAME) names the vLLM workload for every playbook, instead of its `workload` param."""
    by_name = {p.name: p for p in playbooks}
    return each_wanted(report, catalog, lambda f: _read(
        f, by_name[f.playbook], catalog.get(f.signal).logs, cluster, at=report.at, now=now,  # type: ignore[arg-type]
        params=params, workload=workload, step=step) if f.playbook in by_name else f)


def each_wanted(report: Report, catalog: Catalog, change: Callable[[Finding], Finding]) -> Report:
    """The report with `change` applied to each finding of `wanted`, the others as they were."""
    todo = {id(f) for f in wanted(report, catalog)}
    return dataclasses.replace(report, findings=tuple(change(f) if id(f) in todo else f for f in report.findings))


def _not_read(finding: Finding, why: str) -> Finding:
    """Still no source: the logs could not stand in for it, and why."""
    return dataclasses.replace(finding, reason=f"{finding.reason}; its pods' logs were not read: {why}")


def _scope(finding: Finding, playbook: Playbook, params: Mapping[str, Any], workload: str | None) -> Scope | str:
    merged = {**playbook.params, **params}
    namespace = finding.labels.get("namespace") or merged.get("namespace")
    ref = workload or merged.get("workload")
    if not isinstance(namespace, str) or not namespace:
        return "the detect names no namespace (give --namespace)"
    if not isinstance(ref, str) or not ref:
        return f"playbook {playbook.name} names no `workload` (give --workload KIND/NAME)"
    container = merged.get("container")
    return Scope(namespace, ref, container if isinstance(container, str) and container else None,
                 finding.labels.get("pod"))


def _read(finding: Finding, playbook: Playbook, spec: LogSpec, cluster: Cluster, *, at: dt.datetime,
          now: dt.datetime, params: Mapping[str, Any], workload: str | None, step: float) -> Finding:
    detect = playbook.detect
    assert detect is not None
    behind = (now - at).total_seconds()
    if behind > LOG_REACH or behind < -step:
        return _not_read(finding, f"--at is {format_duration(abs(behind))} from now; logs are read only within "
                                  f"{format_duration(LOG_REACH)} before now")
    scope = _scope(finding, playbook, params, workload)
    if isinstance(scope, str):
        return _not_read(finding, scope)
    window = max(spec.window, detect.for_ + spec.rate_window + step)
    where = f"{scope.workload} in namespace {scope.namespace}"
    try:
        kind, name = parse_workload(scope.workload)
        selector = dict(cluster.get_workload(scope.namespace, kind, name).selector)
        pods = [p for p in cluster.list_pods(scope.namespace, selector) if scope.pod in (None, p.name)]
        if not pods:
            return _not_read(finding, f"{where} has no pods")
        if len(pods) > spec.max_pods:
            return _unseen(finding, f"{where} has {len(pods)} pods, more than the {spec.max_pods} triage reads "
                                    f"logs of (`logs: max_pods` of signal {finding.signal} in the config file)")
        logs = cluster.logs(scope.namespace, selector, since_seconds=math.ceil(behind + window),
                            limit_bytes=spec.max_bytes, container=scope.container, timestamps=True,
                            with_previous=True)
    except NotFound as exc:
        return _not_read(finding, f"{exc} (name the vLLM workload with --workload KIND/NAME)")
    except (BackendUnavailable, RunbookError, ValueError) as exc:
        return _unseen(finding, f"the logs of {where} could not be read: {exc}")
    logs = [log for log in logs if scope.pod in (None, log.pod)]
    events = _events(logs, pods, spec, scope.container, since=at - dt.timedelta(seconds=window), until=at)
    restarts = sum(1 for _, killed in events if killed)
    times = sorted(t for t, _ in events)
    capped = sorted({log.pod for log in logs if log.truncated})
    read_from = f"from logs, {len(pods)} pod{'' if len(pods) == 1 else 's'}, last {format_duration(window)}"
    seen = {"pods": len(pods), "workload": scope.workload, "namespace": scope.namespace,
            "container": scope.container, "window_seconds": window, "rate_window_seconds": spec.rate_window,
            "events": len(times), "counts": spec.counts, "oom_killed_restarts": restarts, "capped": capped,
            "restarted": sorted({log.pod for log in logs if log.previous and not log.absent})}
    common = dict(playbook=finding.playbook, title=finding.title, severity=finding.severity, signal=finding.signal,
                  condition=finding.condition, labels=finding.labels, for_seconds=finding.for_seconds,
                  missing_sources=finding.missing_sources, read_from=read_from, logs=seen)
    points = max(0, math.floor((window - spec.rate_window) / step))
    grid = [at - dt.timedelta(seconds=k * step) for k in range(points + 1)]
    values = {t: _per_minute(times, t, spec.rate_window) for t in grid}
    judged = judge(common, detect, values, grid, at, window + step)
    assert judged is not None  # every instant of the grid has a value
    if capped and (judged.state != "firing" or detect.below is not None):
        # A capped log lacks its newest lines: it may hold events the count has not seen.
        return dataclasses.replace(judged, state="unknown", reason=(
            f"read from logs, but the logs of {', '.join(capped)} were cut at {spec.max_bytes} bytes, so "
            f"{finding.signal} = {judged.value:g} is only a lower bound (raise `logs: max_bytes` of signal "
            f"{finding.signal} in the config file, or count the lines with a log pipeline)"))
    return judged


def _unseen(finding: Finding, why: str) -> Finding:
    return dataclasses.replace(finding, state="unknown", reason=f"{finding.reason}; and {why}")


def _events(logs: Sequence[PodLog], pods: Sequence[Pod], spec: LogSpec, container: str | None, *,
            since: dt.datetime, until: dt.datetime) -> list[tuple[dt.datetime, bool]]:
    """(when, an OOMKilled restart) of each event in (since, until]: a matching line of any log read
    (the kubelet's timestamp), and with `oom_killed` each restart after an OOMKilled termination."""
    regexes = [re.compile(p) for p in spec.patterns]
    out: list[tuple[dt.datetime, bool]] = []
    for log in logs:
        for line in split_lines(log.text):
            if line.at is not None and since < line.at <= until and any(r.search(line.text) for r in regexes):
                out.append((line.at, False))
    if spec.oom_killed:
        for pod in pods:
            for c in pod.containers:
                ended = c.last_termination_at
                if (c.last_termination_reason == "OOMKilled" and container in (None, c.name)
                        and ended is not None and since < ended <= until):
                    out.append((ended, True))
    return out


def _per_minute(times: Sequence[dt.datetime], at: dt.datetime, rate_window: float) -> float:
    """The events in (at - rate_window, at], per minute."""
    start = at - dt.timedelta(seconds=rate_window)
    count = bisect.bisect_right(times, at) - bisect.bisect_right(times, start)
    return count * 60.0 / rate_window


def describe(finding: Finding) -> str:
    """`from logs, 3 pods, last 5m: 4 CUDA out-of-memory error lines, 1 OOMKilled restart` for a row."""
    seen: Mapping[str, Any] = finding.logs or {}
    parts = [f"{seen.get('events', 0) - seen.get('oom_killed_restarts', 0)} {seen.get('counts', 'events')}"]
    if seen.get("oom_killed_restarts"):
        n = seen["oom_killed_restarts"]
        parts.append(f"{n} OOMKilled restart{'' if n == 1 else 's'}")
    if seen.get("restarted"):
        parts.append(f"previous logs of {', '.join(seen['restarted'])}")
    return f"{finding.read_from}: {', '.join(parts)}"
