"""What a run that did not end well left in the world, read from its journal: changes still in place, in doubt, undone.

The PagerDuty note of a failed, crashed or interrupted run says this, so that the person it pages knows
what to check by hand; the journal (not the run's memory, which a crash loses) is the record of it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from runbook.record import journal as journals
from runbook.errors import JournalError
from runbook.model import events as ev
from runbook.webhook.recovery import IN_DOUBT


@dataclasses.dataclass
class LeftBehind:
    """One run's changes by fate; each entry `action on target: summary`, in journal order."""

    playbook: str = ""
    in_place: list[str] = dataclasses.field(default_factory=list)  # applied and not undone
    in_doubt: list[str] = dataclasses.field(default_factory=list)  # may or may not have happened
    undone: list[str] = dataclasses.field(default_factory=list)  # rolled back
    undo_failed: list[str] = dataclasses.field(default_factory=list)  # a rollback that failed: still changed
    findings: list[str] = dataclasses.field(default_factory=list)  # what the diagnostics said
    targets: list[str] = dataclasses.field(default_factory=list)  # what a person must check: changed or maybe
    unreadable: str | None = None  # why the journal could not be read (then nothing above is known)
    damaged: list[str] = dataclasses.field(default_factory=list)  # lines the reader skipped: something may be missing


def _change(data: dict) -> str:
    line = f"{data.get('action', '?')} on {data.get('target', '?')}"
    summary = data.get("summary")
    return f"{line}: {summary}" if summary else line


def read(state: Path, incident: str, run: str) -> LeftBehind:
    """What run `run` of `incident` left behind, from the incident's journal; `unreadable` says when it cannot tell."""
    try:
        found = journals.read_journal(journals.incident_dir(state, incident) / journals.JOURNAL_NAME)
    except JournalError as exc:
        return LeftBehind(unreadable=str(exc))
    left = from_events(found.events, run)
    left.damaged = found.warnings
    return left


def from_events(events: list[ev.Event], run: str) -> LeftBehind:
    """Each change of `run` by its last recorded fate; a change only planned has no fate (it never started)."""
    left = LeftBehind()
    changes: dict[str, str] = {}  # step -> its change, once planned (what an interruption was applying)
    targets: dict[str, str] = {}
    fate: dict[str, str] = {}  # step -> in_place | in_doubt | undone | undo_failed
    for event in events:
        if event.run != run:
            continue
        data, step = event.data, event.step or ""
        if event.type == ev.RUN_STARTED:
            left.playbook = str(data.get("playbook", ""))
        elif event.type in (ev.ACTION_PLANNED, ev.ACTION_APPLIED, ev.ACTION_UNKNOWN):
            targets[step] = str(data.get("target", "?"))
        if event.type == ev.ACTION_PLANNED:
            changes[step] = _change(data)
        elif event.type == ev.ACTION_APPLIED:
            changes[step], fate[step] = _change(data), "in_place"
        elif event.type == ev.ACTION_UNKNOWN and not data.get("recovered"):  # a restart's: its run.interrupted says it
            changes[step], fate[step] = f"{_change(data)} (the apply raised: {data.get('error', '?')})", "in_doubt"
        elif event.type == ev.ROLLBACK_APPLIED and step in fate:
            fate[step] = "undone"
        elif event.type == ev.ROLLBACK_FAILED and step in fate:
            changes[step] = f"{changes[step]} (its rollback failed: {data.get('error', '?')})"
            fate[step] = "undo_failed"
        elif event.type == ev.RUN_INTERRUPTED and step and data.get("verdict") in IN_DOUBT:
            changes[step] = f"{changes.get(step, step)} (interrupted while being applied: {data.get('reason', '')})"
            fate[step] = "in_doubt"
        elif event.type == ev.STEP_FINISHED and data.get("kind") != "remediation" and data.get("summary") \
                and data.get("status") in ("ok", "failed"):
            left.findings.append(f"{step}: {data['summary']}")
    for step, where in fate.items():
        getattr(left, where).append(changes[step])
    left.targets = list(dict.fromkeys(targets[s] for s, where in fate.items() if where != "undone" and s in targets))
    return left


def lines(left: LeftBehind) -> list[str]:
    """The note's section on it: each fate that has entries, and what the person must check."""
    if left.unreadable:
        return [f"What it changed is unknown: {left.unreadable}.",
                "A person must look: check the playbook's targets by hand."]
    shown = [("Still changed", left.in_place), ("Maybe changed", left.in_doubt),
             ("Rollback failed, still changed", left.undo_failed), ("Changed, then rolled back", left.undone)]
    out = [f"{title}:\n" + "\n".join(f"- {entry}" for entry in entries) for title, entries in shown if entries]
    if left.damaged:  # a skipped line may be the change itself: never say "nothing" over it
        out.append(f"Its journal has {len(left.damaged)} unreadable line(s), so a change may be missing above "
                   f"({left.damaged[0]}).")
    elif not out:
        out = ["It left nothing changed."]
    out.append("A person must look: " + (f"check {', '.join(left.targets)} by hand" if left.targets
                                          else "the journal says how far it got"))
    return out
