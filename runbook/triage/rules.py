"""Playbooks' `detect` conditions as Prometheus alerting rules, so alerting and automation agree.

Each rule's `alert` is the first name in the playbook's `match.alerts`, its expression is the
signal's PromQL from the catalog in effect, and it groups by the alert labels that `match.labels`
turns into params: an alert for namespace X starts the playbook with `namespace: X`, whose
re-check then asks exactly what the rule asked. A param fixed on the command line becomes a
filter instead. The alert table's rows (the SOP's warning lines) follow in a second group; every
rule's `runbook_url` annotation names the playbook that handles it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from runbook.text import templating
from runbook.errors import InvalidInput
from runbook.model.playbook import Playbook
from runbook.signals import promql
from runbook.signals.alert_table import AlertRow
from runbook.signals.catalog import Catalog, render_param

GROUP = "runbook-playbooks"
ALERTS_GROUP = "runbook-alerts"  # the alert table's rows: they alert, no playbook starts on them
RUNBOOK_URL = "playbooks/{playbook}.yaml"  # where the playbook is, unless --runbook-url names your copy
SEVERITY = {"P1": "critical", "P2": "warning", "P3": "info", "P4": "info"}


def _context(playbook: Playbook, params: Mapping[str, Any]) -> dict[str, Any]:
    return {"params": {**playbook.params, **params},
            "alert": {"labels": {}, "annotations": {}, "name": "", "source": "rules"}, "incident": {"id": ""}}


def runbook_url(template: str, playbook: str) -> str:
    """The `runbook_url` annotation: the template with {playbook} filled in."""
    if "{playbook}" not in template:
        raise InvalidInput(f"--runbook-url {template!r} does not name the playbook: put {{playbook}} where its "
                           f"name goes, e.g. https://git.example.com/ops/runbook/blob/main/playbooks/{{playbook}}.yaml")
    return template.replace("{playbook}", playbook)


def rule_for(playbook: Playbook, catalog: Catalog, fixed: Mapping[str, Any],
             url: str = RUNBOOK_URL) -> dict[str, Any]:
    """One alerting rule: grouped by the labels its alerts carry; `fixed` params also filter."""
    detect = playbook.detect
    assert detect is not None and playbook.match.alerts
    filters: dict[str, str] = {}
    by: list[str] = []
    renames: dict[str, str] = {}  # signal label -> the alert label that carries it
    for key, value in detect.labels.items():
        refs = templating.param_references(value) if templating.is_template(value) else set()
        param = next(iter(refs)) if len(refs) == 1 else None
        if param in playbook.match.labels:  # the alert carries it: one alert per value
            by.append(key)
            if playbook.match.labels[param] != key:
                renames[key] = playbook.match.labels[param]
            if param in fixed:
                filters[key] = str(templating.render_value(value, _context(playbook, fixed)))
        else:
            filters[key] = str(templating.render_value(value, _context(playbook, fixed)))
    carried = {renames.get(b, b) for b in by}
    by += [label for label in dict.fromkeys(playbook.match.labels.values()) if label not in carried]
    expr = catalog.render(detect.signal, filters, by)
    for ours, theirs in renames.items():
        expr = f'label_replace({expr}, "{theirs}", "$1", "{ours}", "(.*)")'
    op, bound = (">", detect.above) if detect.above is not None else ("<", detect.below)
    rule: dict[str, Any] = {"alert": playbook.match.alerts[0], "expr": f"{expr} {op} {promql.format_number(bound)}"}
    if detect.for_:
        rule["for"] = promql.prom_duration(detect.for_)
    rule["labels"] = {"severity": SEVERITY.get(playbook.severity, "warning"), "priority": playbook.severity,
                      "runbook_playbook": playbook.name}
    condition = detect.describe() + (f" for {promql.prom_duration(detect.for_)}" if detect.for_ else "")
    rule["annotations"] = {
        "summary": playbook.title,
        # No {{ $value }}: a fixed text lets `promtool test rules` state exactly what an alert says.
        "description": f"{condition}. " + " ".join(playbook.description.split()),
        "runbook": f"runbook run {playbook.name}",
        "runbook_url": runbook_url(url, playbook.name),
    }
    return rule


def with_params(catalog: Catalog, fixed: Mapping[str, Any]) -> Catalog:
    """The catalog with the params fixed on the command line (`-p max_num_seqs=128`) set."""
    values = dict(catalog.values)
    for key, value in fixed.items():
        if key in catalog.params:
            try:
                values[key] = render_param(catalog.params[key].kind, value)
            except ValueError as exc:
                raise InvalidInput(f"-p {key}={value}: {exc}") from None
    return dataclasses.replace(catalog, values=values)


def alert_row_rule(row: AlertRow, catalog: Catalog, fixed: Mapping[str, Any], url: str = RUNBOOK_URL,
                   ) -> dict[str, Any]:
    """One table row as an alerting rule, one alert per value of its `by` labels; a fixed param named
    like one of them (the namespace) also filters."""
    signal = row.signal_in(catalog)
    assert signal is not None
    filters = {label: str(fixed[label]) for label in row.by if label in fixed}
    expr = catalog.render(signal, filters, row.by)
    op, bound = (">", row.above) if row.above is not None else ("<", row.below)
    rule: dict[str, Any] = {"alert": row.alert, "expr": f"{expr} {op} {promql.format_number(bound)}"}  # type: ignore[arg-type]
    if row.for_:
        rule["for"] = promql.prom_duration(row.for_)
    rule["labels"] = {"severity": SEVERITY.get(row.severity, "warning"), "priority": row.severity,
                      "runbook_playbook": row.playbook}
    condition = row.describe(signal) + (f" for {promql.prom_duration(row.for_)}" if row.for_ else "")
    rule["annotations"] = {
        "summary": row.summary,
        "description": f"{condition}. " + " ".join(row.description.split()),
        "runbook": f"runbook run {row.playbook}",
        "runbook_url": runbook_url(url, row.playbook),
    }
    return rule


def alert_table_rules(rows: Sequence[AlertRow], catalog: Catalog, fixed: Mapping[str, Any] | None = None,
                      url: str = RUNBOOK_URL, playbooks: Sequence[str] | None = None,
                      ) -> tuple[list[dict[str, Any]], list[str]]:
    """(the rules of the rows this catalog can export, notes on the rows left out and why)."""
    fixed = fixed or {}
    catalog = with_params(catalog, fixed)
    rules, notes = [], []
    for row in rows:
        signal = row.signal_in(catalog)
        missing = row.missing_params(catalog)
        if signal is None:
            names = [row.signal] if isinstance(row.signal, str) else row.signal
            notes.append(f"{row.alert}: profile {catalog.profile} has no signal {' or '.join(names)}, no rule; "
                         f"add it under `signals: overrides:` in the config file")
        elif missing:
            notes.append(f"{row.alert}: needs {', '.join(missing)}, no rule; give it with "
                         + ", ".join(f"-p {m}=N" for m in missing) + " or under `signals: params:` in the config file")
        elif playbooks is not None and row.playbook not in playbooks:
            notes.append(f"{row.alert}: names playbook {row.playbook}, which is not loaded here, no rule")
        else:
            rules.append(alert_row_rule(row, catalog, fixed, url))
    return rules, notes


def alerting_rules(playbooks: Sequence[Playbook], catalog: Catalog, fixed: Mapping[str, Any] | None = None,
                   *, alerts: Sequence[AlertRow] = (), url: str = RUNBOOK_URL,
                   ) -> tuple[dict[str, Any], list[str]]:
    """(the rule file as data, notes on playbooks and alert rows left out and why); the alert table's
    rows, when given, are a second group."""
    rules, notes = [], []
    unknown = sorted({p.detect.signal for p in playbooks if p.detect and p.detect.signal not in catalog.signals})
    if unknown:
        raise InvalidInput(f"signal(s) {', '.join(unknown)} used by a playbook's detect are not in profile "
                           f"{catalog.profile}; add them under `signals: overrides:` in the config file")
    for playbook in sorted(playbooks, key=lambda p: p.name):
        if playbook.detect is None:
            notes.append(f"{playbook.name}: no `detect:` condition, no rule")
        elif not playbook.match.alerts:
            notes.append(f"{playbook.name}: no `match.alerts` name for its alert, no rule")
        else:
            rules.append(rule_for(playbook, catalog, fixed or {}, url))
    groups = [{"name": GROUP, "rules": rules}]
    if alerts:
        table, table_notes = alert_table_rules(alerts, catalog, fixed, url, [p.name for p in playbooks])
        notes += table_notes
        if table:
            groups.append({"name": ALERTS_GROUP, "rules": table})
    return {"groups": groups}, notes


def prometheus_rule(document: Mapping[str, Any], *, name: str, namespace: str | None,
                    labels: Mapping[str, str]) -> dict[str, Any]:
    """The same groups as a prometheus-operator `PrometheusRule` manifest."""
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    metadata["labels"] = {"app.kubernetes.io/managed-by": "runbook", **labels}
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": metadata,
            "spec": dict(document)}


def to_yaml(document: Mapping[str, Any]) -> str:
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        # Long PromQL reads better folded; `|` keeps it exactly as built.
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, _text)
    return yaml.dump(dict(document), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100_000)
