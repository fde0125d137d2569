"""Triage's verdict in one line, said first: what fires (playbooks first, then the SOP's warning
lines), what could not be seen, what has no source here, what was not evaluated — "All clear" only
when every playbook was evaluated and found quiet.
"""

from __future__ import annotations

from runbook.triage.evaluate import Report


def _playbooks(count: int) -> str:
    return f"{count} playbook{'' if count == 1 else 's'}"


def _names(items: list[str], shown: int = 3) -> str:
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def headline(report: Report) -> str:
    """One line: `Firing: …`, `Not all clear: …` or `All clear: …`, with what keeps it from being quiet."""
    concerns = []
    unknown = report.of("unknown")
    why = "Prometheus could not be read" if report.unavailable else "Prometheus gave no reading"
    from_logs = [f for f in unknown if f.read_from or f.missing_sources]
    if len(from_logs) < len(unknown):
        concerns.append(f"{_playbooks(len(unknown) - len(from_logs))} could not be seen ({why})")
    if from_logs:
        concerns.append(f"{_playbooks(len(from_logs))} could not be seen (no source here, and the pods' logs "
                        f"could not be read whole)")
    unseen_warnings = report.warnings_in("unknown")
    if unseen_warnings and not unknown:
        count = len(unseen_warnings)
        concerns.append(f"{count} warning line{'' if count == 1 else 's'} could not be seen ({why})")
    no_source = report.of("no_source")
    if no_source:
        verb = "needs" if len(no_source) == 1 else "need"
        signals = sorted({f.signal or "" for f in no_source})
        concerns.append(f"{_playbooks(len(no_source))} {verb} a signal with no source here ({_names(signals)})")
    if report.invalid:
        concerns.append(f"{_playbooks(len(report.invalid))} not evaluated (invalid: "
                        f"{_names([i.file for i in report.invalid])})")
    firing = report.firing
    warnings = [f"{f.alert} (warning for {f.playbook})" for f in report.warnings_firing]
    if firing or warnings:
        head = "Firing: " + _names([f"{f.playbook} ({f.severity})" for f in firing] + warnings)
        return head + "".join(f"; {c}" for c in concerns)
    if concerns:
        return "Not all clear: " + "; ".join(concerns)
    evaluated = len([f for f in report.findings if f.state not in ("skipped", "not_applicable")])
    absent = len(report.of("not_applicable"))
    logs = len([f for f in report.findings if f.read_from])
    return (f"All clear: nothing fires ({_playbooks(evaluated)} evaluated"
            + (f", {logs} from the pods' logs" if logs else "")
            + (f", {absent} not applicable here" if absent else "") + ")")
