"""Triage of the alert table's rows: the SOP's warning lines, each evaluated as a detect is, per
value of its `by` labels, and reported beside the playbooks (they fire; nothing is run on them).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from runbook.backends.base import Metrics
from runbook.errors import BackendUnavailable, RunbookError
from runbook.signals.alert_table import AlertRow
from runbook.triage.evaluate import LOOKBACK, STEP, Finding, Report, _urgency, group_findings
from runbook.triage.sources import missing_sources, no_source_reason


def evaluate_row(row: AlertRow, metrics: Metrics, at: dt.datetime, params: Mapping[str, Any], *,
                 lookback: float, step: float) -> Finding:
    """The row at `at`: the most urgent value of its `by` labels. A param named like one of them (the
    namespace) scopes it. BackendUnavailable goes up: the caller stops asking."""
    base = dict(playbook=row.playbook, title=row.summary, severity=row.severity, alert=row.alert)
    catalog = getattr(metrics, "catalog", None)
    signal = row.signal_in(catalog) if catalog is not None else (row.signal if isinstance(row.signal, str)
                                                                 else row.signal[0])
    if signal is None:
        names = [row.signal] if isinstance(row.signal, str) else row.signal
        return Finding(**base, state="skipped", reason=f"profile {catalog.profile} has no signal "  # type: ignore[union-attr]
                                                       f"{' or '.join(names)}")
    missing = row.missing_params(catalog) if catalog is not None else []
    if missing:
        return Finding(**base, state="skipped", signal=signal, condition=row.describe(signal),
                       reason=f"needs {', '.join(missing)}: set it under `signals: params:` in the config file")
    labels = {k: str(params[k]) for k in row.by if params.get(k) is not None}
    across = [k for k in row.by if k not in labels]
    common = dict(base, signal=signal, condition=row.describe(signal), labels=labels, for_seconds=row.for_)
    try:
        found = group_findings(common, row, metrics, signal, labels, across, at, lookback=lookback, step=step)
    except BackendUnavailable:
        raise
    except RunbookError as exc:
        return Finding(**common, state="unknown", reason=str(exc))
    if found:
        return max(found, key=lambda f: _urgency(row, f))  # type: ignore[arg-type]
    where = ", ".join(f"{k}={v}" for k, v in labels.items()) or "all series"
    reason = f"no data for {signal} ({where}) at {at.isoformat()}: the query returned nothing"
    try:
        absent = missing_sources(metrics, signal, labels, at)
    except BackendUnavailable:
        raise
    except RunbookError as exc:
        return Finding(**common, state="unknown", reason=f"{reason} (its sources could not be checked: {exc})")
    if absent:
        return Finding(**common, state="no_source", missing_sources=absent,
                       reason=no_source_reason(signal, labels, absent))
    return Finding(**common, state="unknown", reason=reason)


def evaluate_alerts(rows: Sequence[AlertRow], metrics: Metrics, at: dt.datetime, params: Mapping[str, Any], *,
                    lookback: float, step: float, unavailable: str | None = None,
                    ) -> tuple[list[Finding], str | None]:
    """(a finding per row, why the backend is unreachable if it is). Once it is, no row is asked."""
    out = []
    for row in rows:
        if unavailable:
            out.append(Finding(row.playbook, row.summary, row.severity, "unknown", reason=unavailable,
                               alert=row.alert))
            continue
        try:
            out.append(evaluate_row(row, metrics, at, params, lookback=lookback, step=step))
        except BackendUnavailable as exc:
            unavailable = str(exc)
            out.append(Finding(row.playbook, row.summary, row.severity, "unknown", reason=unavailable,
                               alert=row.alert))
    return out, unavailable


def with_warnings(report: Report, rows: Sequence[AlertRow], metrics: Metrics, params: Mapping[str, Any], *,
                  lookback: float = LOOKBACK, step: float = STEP) -> Report:
    """The report with the rows evaluated at its instant (none asked once the backend is unreachable)."""
    warnings, unavailable = evaluate_alerts(rows, metrics, report.at, params, lookback=lookback, step=step,
                                            unavailable=report.unavailable)
    return dataclasses.replace(report, warnings=tuple(warnings), unavailable=unavailable)
