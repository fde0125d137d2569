"""The report's summary: what fired and for how long, the likely cause, the fix, and how it ended —
for a run that did not resolve, why (the refusing guard, the failed step, the rollback).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from runbook.model import events as ev
from runbook.model.duration import format_duration
from runbook.reporting.times import clock

ENDINGS = {"refused": "was refused", "failed": "failed", "rolled_back": "failed and was rolled back",
           "escalated": "was escalated to a human", "proposed": "stopped at a change left for a human to approve",
           "interrupted": "was interrupted", "unfinished": "did not finish", "mitigated": "mitigated the incident"}


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."


def write(events: Sequence[ev.Event], *, moments: Mapping[str, dt.datetime | None],
          impact: Mapping[str, Any] | None, hints: Sequence[str], outcome: str, reason: str,
          dry_run: bool) -> str:
    alert = next((e for e in events if e.type == ev.ALERT_RECEIVED), None)
    applied = [e for e in events if e.type == ev.ACTION_APPLIED]
    refused = [e for e in events if e.type == ev.GUARD_REFUSED]
    rolled = [e for e in events if e.type == ev.ROLLBACK_APPLIED]
    onset, mitigated = moments.get("onset"), moments.get("mitigated")
    parts = []
    what = f"Alert {alert.data.get('name')} fired at {clock(alert.at)} UTC" if alert else "The run was started by hand"
    if impact:
        what += f": {impact['condition']}" + (f" from {clock(onset)}" if onset else "") + \
            f", at worst {impact['value']}"
    parts.append(_sentence(what))
    if hints:
        parts.append(_sentence(f"Likely cause (the playbook's first suspect): {hints[0]}"))
    if applied:
        # A restore of the capacity the fix took is not the fix (issue 34).
        fixes = [e for e in applied if e.data.get("action") != "k8s.restore_scale"] or applied
        before = [e for e in fixes if mitigated is None or e.at <= mitigated]
        fix = (before or fixes)[-1]
        others = [e for e in applied if e is not fix]
        line = f"Fix: {fix.data.get('summary')}"
        if others:
            line += " (also: " + "; ".join(str(e.data.get("summary")) for e in others) + ")"
        if mitigated is not None and mitigated >= fix.at and impact:
            line += (f"; {impact['condition']} stopped holding at {clock(mitigated)}, "
                     f"{format_duration((mitigated - fix.at).total_seconds())} after the change")
        parts.append(_sentence(line))
    elif dry_run:
        parts.append("Dry run: nothing was applied.")
    else:
        parts.append("No change was applied.")
    if outcome == "resolved":
        parts.append("Outcome: resolved" + (f" at {clock(moments['resolved'])} UTC" if moments.get("resolved") else "") + ".")
    elif outcome == "dry_run":
        parts.append("The dry run ended cleanly.")
    else:
        why = reason
        if refused and outcome == "refused":
            last = refused[-1]
            why = f"step {last.step} was refused by guard {last.data.get('guard')}: {last.data.get('reason')}"
        line = f"The run {ENDINGS.get(outcome, outcome)}: {why}"
        if rolled:
            line += "; rolled back " + ", ".join(f"{e.data.get('target')}" for e in rolled)
        parts.append(_sentence(line))
    return " ".join(parts)
