"""The report's timeline: the alert, each decision, change, verification and refusal, one row each.

The engine's chatter folds into its step: a diagnostic step is one row (its summary and the numbers
of its evidence); a remediation's start and finish are said by its plan, guards and apply rows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from runbook.model import events as ev
from runbook.reporting.times import clock, relative
from runbook.reporting.words import inline

# A step.finished that is a row of its own: a diagnostic's result, or any step that did not go as planned.
QUIET_FINISH = ("ok", "changed", "would_change")


def actor(event: ev.Event) -> str:
    d = event.data
    if event.type == ev.ALERT_RECEIVED:
        return f"{d.get('source') or 'alert'}"
    if event.type == ev.ACTION_CONFIRMED:
        return f"{d.get('by') or 'operator'}"
    if event.type in (ev.RUN_STARTED, ev.RUN_FINISHED):
        return str(d.get("holder") or "engine")
    return "engine"


def describe(event: ev.Event) -> str:
    """One line for the timeline."""
    d = event.data
    labels = ", ".join(f"{k}={v}" for k, v in (d.get("labels") or {}).items())
    match event.type:
        case ev.ALERT_RECEIVED:
            return f"alert {d.get('name')} {d.get('status', 'firing')}" + (f" ({labels})" if labels else "")
        case ev.RUN_STARTED:
            return f"playbook {d.get('playbook')} started" + (" (dry run)" if d.get("dry_run") else "")
        case ev.STEP_STARTED:
            return f"step {event.step} started ({d.get('uses')})"
        case ev.STEP_FINISHED:
            if d.get("kind") == "diagnostic" and d.get("status") == "ok":
                return f"{event.step}: {d.get('summary')}"
            return f"step {event.step} {d.get('status')}: {d.get('summary')}"
        case ev.EVIDENCE:
            return f"evidence: {d.get('title')}"
        case ev.ACTION_PLANNED:
            return f"planned: {d.get('summary')}"
        case ev.GUARD_PASSED:
            return "guards passed: " + ", ".join(g.get("guard", "?") for g in d.get("guards", []))
        case ev.GUARD_REFUSED:
            return f"refused by guard {d.get('guard')}: {d.get('reason')}"
        case ev.ACTION_CONFIRMED:
            return f"confirmed ({d.get('how')})"
        case ev.ACTION_PROPOSED:
            return f"proposed for a human to approve: {d.get('summary') or d.get('reason') or event.step}"
        case ev.ACTION_APPLIED:
            return f"applied: {d.get('summary')} (approved by {d.get('by')})"
        case ev.ACTION_SKIPPED:
            return f"not applied: {d.get('reason')}"
        case ev.ACTION_FAILED:
            return f"failed to apply on {d.get('target')}: {d.get('error')}"
        case ev.ACTION_UNKNOWN:
            return f"apply on {d.get('target')} ended unclear (counted as applied): {d.get('error')}"
        case ev.VERIFY_PASSED:
            return f"verified: {d.get('summary')}"
        case ev.VERIFY_FAILED:
            return f"verification failed: {d.get('summary')}"
        case ev.ROLLBACK_APPLIED:
            return f"rolled back {d.get('target')} to {inline(d.get('restored'))}"
        case ev.ROLLBACK_FAILED:
            return f"rollback failed on {d.get('target')}: {d.get('error')}"
        case ev.NOTE:
            return f"note: {d.get('message')}"
        case ev.ESCALATED:
            return f"escalated: {d.get('reason')}"
        case ev.RUN_FINISHED:
            return f"run finished {d.get('outcome')}: {d.get('reason')}"
    return event.type


# Rows that already say how a step ended: its own step.finished would repeat them.
ENDINGS = (ev.ACTION_APPLIED, ev.GUARD_REFUSED, ev.ACTION_PROPOSED, ev.ACTION_FAILED, ev.ACTION_UNKNOWN,
           ev.ACTION_SKIPPED, ev.VERIFY_PASSED, ev.VERIFY_FAILED)


def _folded(event: ev.Event, ended: set[str]) -> bool:
    if event.type in (ev.STEP_STARTED, ev.EVIDENCE):
        return True
    if event.type == ev.STEP_FINISHED and event.data.get("kind") != "diagnostic":
        return event.data.get("status") in QUIET_FINISH or (event.step or "") in ended
    return False


def rows(events: Sequence[ev.Event], origin: dt.datetime,
         evidence_numbers: Mapping[int, int]) -> list[dict[str, Any]]:
    """Timeline rows; `evidence_numbers` maps an evidence event's seq to its number in the report."""
    by_step: dict[str, list[str]] = {}
    for e in events:
        if e.type == ev.EVIDENCE and e.step and e.seq in evidence_numbers:
            by_step.setdefault(e.step, []).append(f"E{evidence_numbers[e.seq]}")
    ended = {e.step or "" for e in events if e.type in ENDINGS}
    out = []
    for e in events:
        if _folded(e, ended):
            continue
        refs = by_step.get(e.step or "", []) if e.type == ev.STEP_FINISHED else []
        out.append({"seq": e.seq, "clock": clock(e.at), "relative": relative(e.at, origin), "actor": actor(e),
                    "type": e.type, "step": e.step or "", "what": describe(e), "evidence": ", ".join(refs)})
    return out
