"""Journal → RCA report: a timeline to the second, actions with before → after, evidence, causes.

`build_context` is pure (events in, a plain dict out); the template only lays it out. Values
were redacted when the journal was written, so the report repeats no secret.
"""

from __future__ import annotations

import datetime as dt
import importlib.resources
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2

from runbook.journal import read_journal
from runbook.model import events as ev
from runbook.model.duration import format_duration


def _actor(event: ev.Event) -> str:
    if event.type == ev.ALERT_RECEIVED:
        return event.data.get("source") or "alert"
    if event.type == ev.ACTION_CONFIRMED:
        return event.data.get("by") or "operator"
    if event.type == ev.ACTION_APPLIED:
        return f"engine (approved by {event.data.get('by') or 'policy'})"
    return "engine"


def describe(event: ev.Event) -> str:
    """One line for the timeline."""
    d = event.data
    match event.type:
        case ev.ALERT_RECEIVED:
            return f"alert {d.get('name')} {d.get('status', 'firing')} ({', '.join(f'{k}={v}' for k, v in (d.get('labels') or {}).items())})"
        case ev.RUN_STARTED:
            return f"playbook {d.get('playbook')} started" + (" (dry run)" if d.get("dry_run") else "")
        case ev.STEP_STARTED:
            return f"step {event.step} ({d.get('uses')}) started"
        case ev.STEP_FINISHED:
            return f"step {event.step}: {d.get('status')} — {d.get('summary')}"
        case ev.EVIDENCE:
            return f"evidence: {d.get('title')}"
        case ev.ACTION_PLANNED:
            return f"planned: {d.get('summary')}"
        case ev.GUARD_PASSED:
            return "guards passed: " + ", ".join(g.get("guard", "?") for g in d.get("guards", []))
        case ev.GUARD_REFUSED:
            return f"REFUSED by guard {d.get('guard')}: {d.get('reason')}"
        case ev.ACTION_CONFIRMED:
            return f"confirmed by {d.get('by')} ({d.get('how')})"
        case ev.ACTION_APPLIED:
            return f"applied: {d.get('summary')}"
        case ev.ACTION_SKIPPED:
            return f"skipped: {d.get('reason')}"
        case ev.ACTION_FAILED:
            return f"FAILED to apply on {d.get('target')}: {d.get('error')}"
        case ev.VERIFY_PASSED:
            return f"verified: {d.get('summary')}"
        case ev.VERIFY_FAILED:
            return f"verification FAILED: {d.get('summary')}"
        case ev.ROLLBACK_APPLIED:
            return f"rolled back {d.get('target')} to {d.get('restored')}"
        case ev.ROLLBACK_FAILED:
            return f"rollback FAILED on {d.get('target')}: {d.get('error')}"
        case ev.NOTE:
            return f"note: {d.get('message')}"
        case ev.ESCALATED:
            return f"escalated: {d.get('reason')}"
        case ev.RUN_FINISHED:
            return f"run finished: {d.get('outcome')} — {d.get('reason')}"
    return event.type


def _clock(at: dt.datetime) -> str:
    return at.astimezone(dt.timezone.utc).strftime("%H:%M:%S")


def _relative(at: dt.datetime, origin: dt.datetime) -> str:
    seconds = int((at - origin).total_seconds())
    sign = "-" if seconds < 0 else "+"
    seconds = abs(seconds)
    return f"T{sign}{seconds // 60:02d}:{seconds % 60:02d}"


def build_context(events: Sequence[ev.Event]) -> dict[str, Any]:
    if not events:
        raise ValueError("the journal has no events")
    origin = events[0].at
    started = [e for e in events if e.type == ev.RUN_STARTED]
    finished = [e for e in events if e.type == ev.RUN_FINISHED]
    alert = next((e for e in events if e.type == ev.ALERT_RECEIVED), None)
    run = started[0].data if started else {}
    end = finished[-1] if finished else None
    timeline = [{"clock": _clock(e.at), "relative": _relative(e.at, origin), "actor": _actor(e),
                 "what": describe(e), "type": e.type} for e in events if e.type != ev.STEP_STARTED]
    applied = [e for e in events if e.type == ev.ACTION_APPLIED]
    refusals = [e for e in events if e.type == ev.GUARD_REFUSED]
    actions = []
    for e in events:
        if e.type == ev.ACTION_PLANNED:
            outcome = next((x for x in events if x.seq > e.seq and x.step == e.step and x.type in
                            (ev.ACTION_APPLIED, ev.GUARD_REFUSED, ev.ACTION_SKIPPED, ev.ACTION_FAILED, ev.STEP_FINISHED)), None)
            actions.append({"step": e.step, "summary": e.data.get("summary"), "before": e.data.get("before"),
                            "after": e.data.get("after"), "diff": e.data.get("diff", []),
                            "result": describe(outcome) if outcome else "no outcome recorded",
                            "by": outcome.data.get("by") if outcome and outcome.type == ev.ACTION_APPLIED else None})
    evidence = [{"step": e.step, "title": e.data.get("title"), "kind": e.data.get("kind"),
                 "text": _evidence_text(e.data)} for e in events if e.type == ev.EVIDENCE]
    verified = [e for e in events if e.type == ev.VERIFY_PASSED]
    milestones = {"detected": alert.at if alert else origin, "mitigated": applied[-1].at if applied else None,
                  "verified": verified[-1].at if verified else None, "ended": end.at if end else None}
    durations = {name: format_duration((at - milestones["detected"]).total_seconds())
                 for name, at in milestones.items() if at is not None and name != "detected"}
    return {
        "incident": events[0].incident,
        "playbook": run.get("playbook"), "title": run.get("title") or run.get("playbook"),
        "severity": run.get("severity"), "dry_run": run.get("dry_run", False),
        "date": origin.astimezone(dt.timezone.utc).strftime("%Y-%m-%d"),
        "outcome": end.data.get("outcome") if end else "unfinished (interrupted?)",
        "reason": end.data.get("reason") if end else "",
        "alert": alert.data if alert else None,
        "timeline": timeline, "actions": actions, "applied": len(applied),
        "refusals": [{"step": e.step, "guard": e.data.get("guard"), "reason": e.data.get("reason")} for e in refusals],
        "evidence": evidence, "milestones": {k: (_clock(v) if v else None) for k, v in milestones.items()},
        "durations": durations, "root_cause_hints": run.get("root_cause_hints", []),
    }


def _evidence_text(data: dict[str, Any], limit: int = 1500) -> str:
    for key in ("stdout", "excerpt", "samples", "answers", "gpus", "pods", "readings"):
        if key in data:
            value = data[key]
            text = value if isinstance(value, str) else "\n".join(str(v) for v in value) if isinstance(value, list) else str(value)
            return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters in the journal)"
    return ", ".join(f"{k}={v}" for k, v in data.items() if k not in ("kind", "title"))[:limit]


def environment() -> jinja2.Environment:
    loader = jinja2.FileSystemLoader(str(importlib.resources.files("runbook") / "templates"))
    return jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined, autoescape=False,
                              keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)


def render_markdown(events: Sequence[ev.Event]) -> str:
    return environment().get_template("rca.md.j2").render(**build_context(events))


def write_report(journal_path: Path, out: Path) -> Path:
    events = read_journal(journal_path).events
    out.write_text(render_markdown(events), encoding="utf-8")
    return out
