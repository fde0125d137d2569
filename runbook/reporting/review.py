"""The weekly ops review: what the incidents of a window add up to, as one JSON-able document.

Incidents per playbook and severity, the times to detect, mitigate and resolve (median and p90),
which actions resolved incidents and which were rolled back or escalated, the targets hit again,
the changes still in doubt, and a day-by-day trend; drills are counted apart from real incidents.
"""

from __future__ import annotations

import collections
import datetime as dt
import math
from collections.abc import Iterable, Sequence
from typing import Any

from runbook.model.duration import format_duration
from runbook.reporting.review_facts import IncidentFacts

MOMENTS = ("detect", "mitigate", "resolve")
BAD_ENDINGS = ("failed", "rolled_back", "escalated", "refused", "interrupted", "unfinished")


def _quantile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank quantile (what a person checks by counting): None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _times(incidents: Sequence[IncidentFacts]) -> dict[str, dict[str, Any]]:
    out = {}
    for moment in MOMENTS:
        values = [s for s in (i.seconds_to(moment) for i in incidents) if s is not None]
        median, p90 = _quantile(values, 0.5), _quantile(values, 0.9)
        out[moment] = {"count": len(values), "median_s": median, "p90_s": p90,
                       "median": format_duration(median) if median is not None else None,
                       "p90": format_duration(p90) if p90 is not None else None}
    return out


def _by_playbook(incidents: Sequence[IncidentFacts]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], list[IncidentFacts]] = collections.defaultdict(list)
    for incident in incidents:
        groups[(incident.playbook or "(no playbook)", incident.severity or "-")].append(incident)
    rows = []
    for (playbook, severity), members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        outcomes = collections.Counter(i.outcome for i in members)
        rows.append({"playbook": playbook, "severity": severity, "incidents": len(members),
                     "outcomes": dict(sorted(outcomes.items())), "times": _times(members)})
    return rows


def _actions(incidents: Sequence[IncidentFacts]) -> list[dict[str, Any]]:
    """Per action: how often applied, in how many resolved incidents it stayed, rolled back, escalated."""
    rows: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for incident in incidents:
        for change in incident.changes:
            counts = rows[change.action]
            counts[change.fate] += 1
            if change.fate == "kept" and incident.outcome == "resolved":
                counts["resolved"] += 1
            if change.fate in ("kept", "in_doubt", "rolled_back", "undo_failed") and incident.escalated:
                counts["escalated"] += 1
    return [{"action": action, "planned": sum(v for k, v in c.items() if k not in ("resolved", "escalated")),
             "applied": c["kept"] + c["rolled_back"] + c["undo_failed"], "resolved": c["resolved"],
             "rolled_back": c["rolled_back"], "undo_failed": c["undo_failed"], "in_doubt": c["in_doubt"],
             "failed": c["failed"], "refused": c["refused"], "proposed": c["proposed"], "escalated": c["escalated"]}
            for action, c in sorted(rows.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))]


def _recurring(incidents: Sequence[IncidentFacts]) -> list[dict[str, Any]]:
    """Targets a playbook meant to change in more than one incident: the same pod, node or workload again."""
    seen: dict[str, list[IncidentFacts]] = collections.defaultdict(list)
    for incident in incidents:
        for target in dict.fromkeys(c.target for c in incident.changes):
            seen[target].append(incident)
    rows = []
    for target, members in seen.items():
        if len(members) < 2:
            continue
        members.sort(key=lambda i: (i.ran or dt.datetime.min.replace(tzinfo=dt.timezone.utc), i.id))
        rows.append({"target": target, "incidents": len(members),
                     "playbooks": sorted({i.playbook or "(no playbook)" for i in members}),
                     "last": members[-1].id, "last_ran": members[-1].ran.isoformat() if members[-1].ran else None})
    return sorted(rows, key=lambda r: (-r["incidents"], r["target"]))


def _in_doubt(incidents: Sequence[IncidentFacts]) -> list[dict[str, Any]]:
    return [{"incident": i.id, "action": c.action, "target": c.target, "summary": c.summary,
             "why": "its rollback failed" if c.fate == "undo_failed" else "its result was never read back"}
            for i in incidents for c in i.changes if c.fate in ("in_doubt", "undo_failed")]


def _days(incidents: Sequence[IncidentFacts], since: dt.datetime, until: dt.datetime) -> list[dict[str, Any]]:
    """One row per UTC day of the window: incidents, how many ended badly, the median time to resolve."""
    by_day: dict[dt.date, list[IncidentFacts]] = collections.defaultdict(list)
    for incident in incidents:
        if incident.ran is not None:
            by_day[incident.ran.astimezone(dt.timezone.utc).date()].append(incident)
    rows, day = [], since.astimezone(dt.timezone.utc).date()
    last = until.astimezone(dt.timezone.utc).date()
    while day <= last:
        members = by_day.get(day, [])
        resolve = _quantile([s for s in (i.seconds_to("resolve") for i in members) if s is not None], 0.5)
        rows.append({"day": day.isoformat(), "incidents": len(members),
                     "not_resolved": sum(i.outcome != "resolved" for i in members), "median_resolve_s": resolve})
        day += dt.timedelta(days=1)
    return rows


def build(facts: Iterable[IncidentFacts], *, since: dt.datetime, until: dt.datetime,
          unreadable: Sequence[str] = (), drills_only: bool = False) -> dict[str, Any]:
    """The review of the incidents that ran in [since, until] (of the drills instead, for a game day's
    review, with `drills_only`); `unreadable` names the journals left out."""
    inside = [f for f in facts if f.ran is not None and since <= f.ran <= until]
    real = [f for f in inside if f.drill == drills_only]
    drills = [f for f in inside if f.drill and not drills_only]
    return {
        "window": {"since": since.isoformat(), "until": until.isoformat()},
        "subject": "drills" if drills_only else "incidents",
        "incidents": len(real), "drills": len(drills),
        "outcomes": dict(sorted(collections.Counter(i.outcome for i in real).items())),
        "times": _times(real),
        "by_playbook": _by_playbook(real),
        "actions": _actions(real),
        "recurring_targets": _recurring(real),
        "in_doubt": _in_doubt(real),
        "escalations": [{"incident": i.id, "playbook": i.playbook, "why": i.escalated} for i in real if i.escalated],
        "days": _days(real, since, until),
        "drill_playbooks": dict(sorted(collections.Counter(d.playbook or "(no playbook)" for d in drills).items())),
        "drill_outcomes": dict(sorted(collections.Counter(d.outcome for d in drills).items())),
        "damaged": sorted(i.id for i in inside if i.damaged),
        "unreadable": list(unreadable),
    }
