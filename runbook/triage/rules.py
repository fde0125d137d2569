"""Playbooks' `detect` conditions as Prometheus alerting rules, so alerting and automation agree.

Each rule's `alert` is the first name in the playbook's `match.alerts`, its expression is the
signal's PromQL from the catalog in effect, and it groups by the alert labels that `match.labels`
turns into params: an alert for namespace X starts the playbook with `namespace: X`, whose
re-check then asks exactly what the rule asked. A param fixed on the command line becomes a
filter instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runbook import templating
from runbook.errors import InvalidInput
from runbook.model.playbook import Playbook
from runbook.signals import promql
from runbook.signals.catalog import Catalog

GROUP = "runbook-playbooks"
SEVERITY = {"P1": "critical", "P2": "warning", "P3": "info", "P4": "info"}


def _context(playbook: Playbook, params: Mapping[str, Any]) -> dict[str, Any]:
    return {"params": {**playbook.params, **params},
            "alert": {"labels": {}, "annotations": {}, "name": "", "source": "rules"}, "incident": {"id": ""}}


def rule_for(playbook: Playbook, catalog: Catalog, fixed: Mapping[str, Any]) -> dict[str, Any]:
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
    }
    return rule


def alerting_rules(playbooks: Sequence[Playbook], catalog: Catalog, fixed: Mapping[str, Any] | None = None,
                   ) -> tuple[dict[str, Any], list[str]]:
    """(the rule file as data, notes on playbooks left out and why)."""
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
            rules.append(rule_for(playbook, catalog, fixed or {}))
    return {"groups": [{"name": GROUP, "rules": rules}]}, notes


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
