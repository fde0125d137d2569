"""Journal events → the RCA report's context: a plain dict the templates only lay out.

Pure: no files, no clock. Follows the Google SRE postmortem skeleton and the SOP's step 3:
timeline to the second, milestones, evidence, actions with guard decisions, root cause with
what the run measured, improvements by horizon, lessons as prompts.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Sequence
from typing import Any

from runbook.record import redaction
from runbook.model import events as ev
from runbook.model.duration import format_duration
from runbook.reporting import condition as alert_condition, impact, improvements as improvement_lists
from runbook.reporting import milestones as milestone_rows, summary
from runbook.reporting.timeline import rows as timeline_rows
from runbook.reporting.times import clock as _clock, relative
from runbook.reporting.words import inline

EXCERPT_LINES = 24
EXCERPT_CHARS = 2400


def evidence_text(data: dict[str, Any]) -> str:
    """The full text of one piece of evidence, as a human would want to read it."""
    kind = data.get("kind")
    if kind == "command":
        text = re.sub(r"\A(?:[ \t]*\n)+", "", str(data.get("stdout") or ""))  # blank lines before the output
        if data.get("stderr"):
            text += ("\n" if text else "") + "[stderr]\n" + str(data["stderr"])
        return text.rstrip() or f"(no output, exit code {data.get('exit_code')})"
    if kind == "logs":
        lines = [f"{data.get('count', 0)} matching line(s); by pod: {inline(data.get('by_pod') or {})}"]
        return "\n".join(lines + list(data.get("excerpt") or []))
    if kind == "samples" and "samples" in data:
        rows = data.get("samples") or []
        if not rows:
            return "no data"
        return "\n".join(f"{inline(r.get('labels')) or '(total)'}: {r.get('value'):g}" for r in rows)
    if kind == "samples" and "readings" in data:
        return _stretches(data.get("readings") or [])
    if kind == "comparison":
        return (f"now: {data.get('now')}\n{format_duration(data.get('window') or 0)} ago: {data.get('previous')}\n"
                f"same time yesterday: {data.get('yesterday')}\nshape: {data.get('shape')}")
    if kind == "pods":
        return "\n".join(f"{p.get('name')}: {'ready' if p.get('ready') else 'NOT ready'}, {p.get('phase')}, "
                         f"restarts {p.get('restarts')}, node {p.get('node') or '-'}"
                         + (f", last termination {p.get('last_termination_reason')}" if p.get("last_termination_reason") else "")
                         for p in data.get("pods") or [])
    if kind == "probe":
        return "\n".join(f"{name}: " + (f"HTTP {a.get('status')} in {a.get('seconds')}s" if "status" in a else str(a.get("error")))
                         for name, a in (data.get("answers") or {}).items())
    if kind == "gpu":
        gpus = "\n".join(f"GPU {g.get('index')}: {g.get('used_mib')} / {g.get('total_mib')} MiB used, "
                         f"{g.get('accounted_mib')} MiB accounted to processes" for g in data.get("gpus") or [])
        holders = "\n".join(f"PID {h.get('pid')} {h.get('command')} holds {', '.join(h.get('devices') or [])}: "
                            f"{h.get('role')}" + (f" (pod {h.get('pod')})" if h.get("pod") else "")
                            for h in data.get("holders") or [])
        return gpus + ("\n" + holders if holders else "")
    rest = {k: v for k, v in data.items() if k not in ("kind", "title")}
    return json.dumps(rest, indent=1, default=str, ensure_ascii=False)


def excerpt(text: str) -> tuple[str, bool]:
    lines = text.splitlines()
    short = "\n".join(lines[:EXCERPT_LINES])
    if len(short) > EXCERPT_CHARS:
        short = short[:EXCERPT_CHARS]
    return short, short != text


def _stretches(readings: Sequence[Sequence[Any]]) -> str:
    """A verification's readings as stretches of one value: `03:12:07–03:12:52  6  does not hold (4 readings)`."""
    runs: list[list[Any]] = []  # [first, last, value, holds, count]
    for at, value, holds in (r[:3] for r in readings if len(r) >= 3):
        if runs and runs[-1][2] == value and runs[-1][3] == bool(holds):
            runs[-1][1], runs[-1][4] = at, runs[-1][4] + 1
        else:
            runs.append([at, at, value, bool(holds), 1])
    lines = []
    for first, last, value, holds, count in runs:
        when = _clock(ev.parse_iso(first)) if isinstance(first, str) else str(first)
        if count > 1:
            when += "–" + (_clock(ev.parse_iso(last)) if isinstance(last, str) else str(last))
        shown = "no reading" if value is None else f"{value:g}" if isinstance(value, (int, float)) else str(value)
        lines.append(f"{when}  {shown}  {'holds' if holds else 'does not hold'} "
                     f"({count} reading{'s' if count != 1 else ''})")
    return "\n".join(lines)


# What ends one plan of a change, first found after it in its run and step.
PLAN_OUTCOMES = (ev.ACTION_APPLIED, ev.ACTION_UNKNOWN, ev.GUARD_REFUSED, ev.ACTION_SKIPPED, ev.ACTION_FAILED,
                 ev.ACTION_PROPOSED, ev.RUN_INTERRUPTED)


def _plan_events(events: Sequence[ev.Event], plan: ev.Event) -> list[ev.Event]:
    """The events of the plan's run and step after it, up to (with) the next plan of that step."""
    related: list[ev.Event] = []
    for event in events:
        if event.seq <= plan.seq or event.run != plan.run or event.step != plan.step:
            continue
        related.append(event)
        if event.type == ev.ACTION_PLANNED:
            break
    return related


def _plan_status(plan: ev.Event, outcome: ev.Event | None, confirmed: ev.Event | None, *, replanned: bool,
                 run_ended: bool) -> str:
    """What became of one plan, in the words of the report's actions table."""
    if outcome is not None and outcome.type == ev.RUN_INTERRUPTED:
        verdict = outcome.data.get("verdict")
        if verdict in ("not_applied", "not_needed"):
            return "not applied (checked after a restart)"
        if verdict in ("unknown", "changed"):
            return "outcome unknown after a restart (counted as applied; left to a person)"
        outcome = None
    if outcome is not None:
        return {ev.ACTION_APPLIED: "applied", ev.ACTION_UNKNOWN: "outcome unknown (counted as applied)",
                ev.GUARD_REFUSED: "refused", ev.ACTION_SKIPPED: "not applied", ev.ACTION_FAILED: "failed",
                ev.ACTION_PROPOSED: "proposed (waiting for a person)"}[outcome.type]
    if replanned:
        return "planned again (the target moved before the apply; nothing applied)"
    if confirmed is not None and not run_ended:
        return "in doubt: the run stopped after the yes, before its result (counted as applied)"
    return "planned (dry run)" if plan.data.get("dry_run") else "planned"


def build_context(events: Sequence[ev.Event]) -> dict[str, Any]:
    if not events:
        raise ValueError("the journal has no events")
    events = sorted(events, key=lambda e: e.seq)
    first = events[0]
    alert = next((e for e in events if e.type == ev.ALERT_RECEIVED), None)
    origin = alert.at if alert else first.at
    started = next((e for e in events if e.type == ev.RUN_STARTED), None)
    finished = [e for e in events if e.type == ev.RUN_FINISHED]
    run = started.data if started else {}
    end = finished[-1] if finished else None
    last_at = events[-1].at

    planned = [e for e in events if e.type == ev.ACTION_PLANNED]
    applied = [e for e in events if e.type == ev.ACTION_APPLIED]
    refused = [e for e in events if e.type == ev.GUARD_REFUSED]
    verified = [e for e in events if e.type == ev.VERIFY_PASSED]
    series_events = [e for e in events if e.type == ev.EVIDENCE and e.data.get("kind") == "series"]

    ended_runs = {e.run for e in finished}
    actions = []
    for plan in planned:
        related = _plan_events(events, plan)
        passed = next((e for e in related if e.type == ev.GUARD_PASSED), None)
        outcome = next((e for e in related if e.type in PLAN_OUTCOMES), None)
        confirmed = next((e for e in related if e.type == ev.ACTION_CONFIRMED), None)
        replanned = bool(related) and related[-1].type == ev.ACTION_PLANNED
        status = _plan_status(plan, outcome, confirmed, replanned=replanned, run_ended=plan.run in ended_runs)
        actions.append({
            "step": plan.step, "action": plan.data.get("action"), "target": plan.data.get("target"),
            "summary": plan.data.get("summary"), "before": inline(plan.data.get("before")),
            "after": inline(plan.data.get("after")), "diff": plan.data.get("diff") or [], "status": status,
            "at": _clock(outcome.at if outcome else plan.at), "relative": relative(outcome.at if outcome else plan.at, origin),
            "confirmed_by": confirmed.data.get("by") if confirmed else None,
            "guards": [g.get("guard") for g in (passed.data.get("guards") if passed else [])],
            "refusal": ({"guard": outcome.data.get("guard"), "reason": outcome.data.get("reason")}
                        if outcome and outcome.type == ev.GUARD_REFUSED else None),
            "note": (outcome.data.get("reason") if outcome and outcome.type in (ev.ACTION_SKIPPED, ev.RUN_INTERRUPTED)
                     else outcome.data.get("error") if outcome and outcome.type in (ev.ACTION_UNKNOWN, ev.ACTION_FAILED)
                     else None),
        })
    refusals = [{"step": e.step, "guard": e.data.get("guard"), "reason": e.data.get("reason"), "at": _clock(e.at)}
                for e in refused]
    rollbacks = [{"step": e.step, "target": e.data.get("target"), "restored": inline(e.data.get("restored")),
                  "at": _clock(e.at)} for e in events if e.type == ev.ROLLBACK_APPLIED]
    escalations = [{"step": e.step, "reason": e.data.get("reason"), "at": _clock(e.at)}
                   for e in events if e.type == ev.ESCALATED]

    evidence, appendix, numbers = [], [], {}
    for e in events:
        if e.type != ev.EVIDENCE or e.data.get("kind") == "series":
            continue
        text = evidence_text(e.data)
        short, cut = excerpt(text)
        number = numbers[e.seq] = len(evidence) + 1
        evidence.append({"number": number, "step": e.step or "", "title": e.data.get("title"), "kind": e.data.get("kind"),
                         "clock": _clock(e.at), "text": short, "cut": cut})
        if cut:
            appendix.append({"number": number, "title": e.data.get("title"), "text": text})

    timeline = timeline_rows(events, origin, numbers)
    condition = alert_condition.from_events(events)
    milestones, durations, durations_from = milestone_rows.build(events, condition, origin)
    moments = {m["name"]: m["at"] for m in milestones}
    headline = impact.headline(events, condition, moments["onset"], moments["mitigated"], last_at)
    peaks = impact.peaks(events, min(moments["onset"] or origin, origin) - dt.timedelta(minutes=10), last_at,
                         leave_out=headline["signal"] if headline else None)
    measured = _measured(applied, verified)
    improvements = improvement_lists.by_horizon(
        applied, [e.data.get("improvements") or {} for e in events if e.type == ev.RUN_STARTED],
        milestone_rows.left_short(events))
    outcome = end.data.get("outcome") if end else "unfinished"
    reason = end.data.get("reason") if end else "the journal ends without run.finished: the run was interrupted"
    hints = list(run.get("root_cause_hints") or [])
    context = {
        "incident": first.incident, "playbook": run.get("playbook") or "?", "title": run.get("title") or run.get("playbook"),
        "severity": run.get("severity") or "?", "dry_run": bool(run.get("dry_run")),
        "date": origin.astimezone(dt.timezone.utc).strftime("%Y-%m-%d"),
        "status": outcome, "reason": reason,
        "alert": {"name": alert.data.get("name"), "source": alert.data.get("source"),
                  "labels": inline(alert.data.get("labels") or {}), "clock": _clock(alert.at),
                  "summary": (alert.data.get("annotations") or {}).get("summary", "")} if alert else None,
        "summary": summary.write(events, moments=moments, impact=headline, hints=hints, outcome=outcome,
                                 reason=reason, dry_run=bool(run.get("dry_run"))),
        "impact": headline, "peaks": peaks, "timeline": timeline, "milestones": milestones, "durations": durations, "durations_from": durations_from,
        "actions": actions, "refusals": refusals, "rollbacks": rollbacks, "escalations": escalations,
        "evidence": evidence, "appendix": appendix, "root_cause_hints": hints,
        "measured": measured, "improvements": improvements,
        "signals": [e.data.get("signal") for e in series_events],
        "markers": _markers(events, origin, moments["onset"]),
    }
    # Second line of defence: the journal was redacted when written; redact again before rendering.
    return redaction.redact(context)


def _measured(applied: list[ev.Event], verified: list[ev.Event]) -> list[str]:
    """What the run changed and what it then saw (the peaks are the impact's, told there)."""
    lines = []
    last_change = applied[-1].at if applied else None
    for e in applied:
        before, after = e.data.get("before") or {}, e.data.get("after") or {}
        changed = [f"`{k}` {inline(before[k])} → {inline(after[k])}" for k in after if k in before and before[k] != after[k]]
        lines.append(f"{e.data.get('action')} on {e.data.get('target')}: " + (", ".join(changed) or e.data.get("summary", "")))
    for e in verified:
        held_since = e.data.get("held_since")
        if last_change is not None and isinstance(held_since, str):
            delta = (ev.parse_iso(held_since) - last_change).total_seconds()
            lines.append(f"{e.data.get('condition')}: held from {format_duration(max(delta, 0))} after the last change")
        else:
            lines.append(str(e.data.get("summary")))
    return lines


def _markers(events: Sequence[ev.Event], origin: dt.datetime, onset: dt.datetime | None) -> list[dict[str, Any]]:
    """Vertical lines for the charts, numbered in time order: the onset, the alert, each change, each
    rollback, recovery. The charts show the numbers; the report lists them (labels never overlap)."""
    marks = [{"at": onset, "label": "onset", "kind": "onset"}] if onset is not None else []
    marks.append({"at": origin, "label": "alert", "kind": "alert"})
    for e in events:
        if e.type == ev.ACTION_APPLIED:
            marks.append({"at": e.at, "label": f"{e.step or 'change'}: {e.data.get('summary')}", "kind": "action"})
        elif e.type == ev.ROLLBACK_APPLIED:
            marks.append({"at": e.at, "label": f"rollback of {e.step}", "kind": "rollback"})
        elif e.type == ev.VERIFY_PASSED:
            marks.append({"at": e.at, "label": f"recovered: {e.data.get('condition') or e.step}", "kind": "recovered"})
    marks.sort(key=lambda m: m["at"])  # stable: at one instant, in the journal's order
    for number, mark in enumerate(marks, 1):
        mark.update(number=number, clock=_clock(mark["at"]))
    return marks
