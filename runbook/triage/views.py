"""The SOP's step-1 views: confirm the symptom before guessing.

Prefill vs decode latency (now, an hour ago, yesterday: which side is slow?), KV cache usage per
pod (one hot while others are cold means uneven routing), failures by reason, and each firing
signal now vs yesterday (sudden or gradual). A view that cannot be read says so; it never
stops the others, unless the metrics backend is unreachable altogether.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from runbook.backends.base import Metrics
from runbook.errors import BackendUnavailable, RunbookError
from runbook.triage.evaluate import Finding

# The SOP's own lines (section 3, step 1); a view reports them, it decides nothing.
HOT, COLD = 0.9, 0.6  # one KV cache above HOT while another is below COLD: traffic is uneven
RISE = 1.5  # a latency this many times yesterday's counts as "up"
PREFILL, DECODE = "prefill_latency_p99_seconds", "decode_latency_p99_seconds"
KV_CACHE, FAILURES = "kv_cache_usage", "failed_requests_per_min"


class _Reader:
    """Queries that remember the first unreachable answer and stop asking after it."""

    def __init__(self, metrics: Metrics, at: dt.datetime, labels: Mapping[str, str]):
        self.metrics, self.at, self.labels = metrics, at, dict(labels)
        self.unavailable: str | None = None

    def total(self, signal: str, ago: float = 0.0, pick=max) -> float | None | str:
        samples = self.samples(signal, ago=ago)
        if isinstance(samples, str):
            return samples
        return pick(s.value for s in samples) if samples else None

    def samples(self, signal: str, *, ago: float = 0.0, by: Sequence[str] = ()) -> list | str:
        if self.unavailable:
            return self.unavailable
        try:
            return self.metrics.query(signal, at=self.at - dt.timedelta(seconds=ago), labels=self.labels, by=by)
        except BackendUnavailable as exc:
            self.unavailable = str(exc)
            return self.unavailable
        except RunbookError as exc:
            return str(exc)


def _number(value: Any) -> float | None:
    return value if isinstance(value, float) else None


def _errors(*values: Any) -> str | None:
    return next((v for v in values if isinstance(v, str)), None)


def latency_view(reader: _Reader) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for name in (PREFILL, DECODE):
        now, hour, day = reader.total(name), reader.total(name, 3600), reader.total(name, 86400)
        error = _errors(now, hour, day)
        rows[name] = {"now": _number(now), "hour_ago": _number(hour), "yesterday": _number(day), "error": error}
    rises = {}
    for name, row in rows.items():
        base = row["yesterday"] if row["yesterday"] is not None else row["hour_ago"]
        if row["now"] is not None and base:
            rises[name] = row["now"] / base
    up = [n for n, r in rises.items() if r >= RISE]
    if not rises:
        verdict = "no latency data"
    elif not up:
        verdict = "neither prefill nor decode latency is up"
    else:
        worst = max(up, key=lambda n: rises[n])
        side = ("the input side (prompt building, RAG, queueing)" if worst == PREFILL
                else "the model or GPU side")
        verdict = f"{'prefill' if worst == PREFILL else 'decode'} latency up ×{rises[worst]:.1f}: {side}"
    return {"signals": rows, "rise": {k: round(v, 2) for k, v in rises.items()}, "verdict": verdict}


def kv_cache_view(reader: _Reader) -> dict[str, Any]:
    samples = reader.samples(KV_CACHE, by=["pod"])
    if isinstance(samples, str):
        return {"pods": {}, "error": samples, "verdict": "unknown"}
    pods = {s.labels.get("pod", "?"): s.value for s in samples}
    if not pods:
        verdict = "no KV cache data"
    elif max(pods.values()) > HOT and min(pods.values()) < COLD:
        verdict = f"uneven: a pod above {HOT:g} while another is below {COLD:g}; check the load balancer's hashing"
    elif max(pods.values()) > HOT:
        verdict = f"every pod hot (max {max(pods.values()):.2f}): memory pressure, not routing"
    else:
        verdict = f"balanced (max {max(pods.values()):.2f})"
    return {"pods": pods, "error": None, "verdict": verdict}


def failures_view(reader: _Reader) -> dict[str, Any]:
    now = reader.samples(FAILURES, by=["reason"])
    day = reader.samples(FAILURES, ago=86400, by=["reason"])
    error = _errors(now, day)
    by_reason: dict[str, dict[str, float | None]] = {}
    for key, samples in (("now", now), ("yesterday", day)):
        if isinstance(samples, list):
            for s in samples:
                by_reason.setdefault(s.labels.get("reason", "?"), {"now": None, "yesterday": None})[key] = s.value
    return {"by_reason": by_reason, "error": error}


def trend(reader: _Reader, finding: Finding) -> dict[str, Any]:
    """A firing signal now, an hour ago and yesterday, and whether the change was sudden."""
    from runbook.actions.prom import classify_change

    pick = max if "<" not in finding.condition else min
    saved = reader.labels
    reader.labels = dict(finding.labels)
    try:
        yesterday = reader.total(finding.signal or "", 86400, pick=pick)
    finally:
        reader.labels = saved
    day = _number(yesterday)
    return {"now": finding.value, "hour_ago": finding.hour_ago, "yesterday": day,
            "shape": classify_change(finding.value, finding.hour_ago, day),
            "error": yesterday if isinstance(yesterday, str) else None}


def step_one(metrics: Metrics, at: dt.datetime, labels: Mapping[str, str],
             firing: Sequence[Finding] = ()) -> dict[str, Any]:
    """Every view; `labels` scope them (usually the namespace)."""
    reader = _Reader(metrics, at, labels)
    views: dict[str, Any] = {"labels": dict(labels)}
    views["trends"] = {f.playbook: trend(reader, f) for f in firing}
    views["latency"] = latency_view(reader)
    views["kv_cache"] = kv_cache_view(reader)
    views["failures"] = failures_view(reader)
    views["unavailable"] = reader.unavailable
    return views
