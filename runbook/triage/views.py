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
# Finer views where vLLM exports them: time to first token mixes queueing and prefill, so the input
# side is read from the prefill time alone and the queue beside it; the GPU side from inter-token latency.
PREFILL_ONLY, QUEUE, INTER_TOKEN = "prefill_time_p99_seconds", "queue_time_p99_seconds", "inter_token_latency_p99_seconds"
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


def _latency_row(reader: _Reader, name: str) -> dict[str, Any]:
    now, hour, day = reader.total(name), reader.total(name, 3600), reader.total(name, 86400)
    return {"now": _number(now), "hour_ago": _number(hour), "yesterday": _number(day), "error": _errors(now, hour, day)}


def _rise(row: Mapping[str, Any]) -> float | None:
    base = row["yesterday"] if row["yesterday"] is not None else row["hour_ago"]
    return row["now"] / base if row["now"] is not None and base else None


def latency_view(reader: _Reader) -> dict[str, Any]:
    """Which side is slow. The input side is the prefill time where vLLM exports it (else time to first
    token, which also holds the queue); the GPU side is inter-token latency (else decode time). A queue
    time up while prefill is not says the server is full, not that prompts got slow."""
    rows = {name: _latency_row(reader, name) for name in (PREFILL, DECODE)}
    finer = {name: _latency_row(reader, name) for name in (PREFILL_ONLY, QUEUE, INTER_TOKEN)}
    rows.update({name: row for name, row in finer.items() if row["now"] is not None})
    rises = {name: r for name, row in rows.items() if (r := _rise(row)) is not None}
    input_side = PREFILL_ONLY if PREFILL_ONLY in rises else PREFILL
    gpu_side = INTER_TOKEN if INTER_TOKEN in rises else DECODE
    sides = {n: rises[n] for n in (input_side, gpu_side) if n in rises}
    up = [n for n, r in sides.items() if r >= RISE]
    queue_up = rises.get(QUEUE, 0.0) >= RISE
    if not rises:
        verdict = "no latency data"
    elif not up and queue_up:
        verdict = (f"queue time up ×{rises[QUEUE]:.1f} while prefill and decode are not: requests wait for a "
                   f"place in the batch (the server is full), the input side is not slow")
    elif not up:
        verdict = "neither prefill nor decode latency is up"
    else:
        worst = max(up, key=lambda n: sides[n])
        if worst == input_side:
            what = "prefill time (queueing apart)" if worst == PREFILL_ONLY else "prefill latency"
            side = "the input side (prompt building, RAG)" + ("" if worst == PREFILL_ONLY else ", or queueing")
        else:
            what = "inter-token latency" if worst == INTER_TOKEN else "decode latency"
            side = "the model or GPU side"
        verdict = f"{what} up ×{sides[worst]:.1f}: {side}"
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
