"""Which playbook an inbound alert starts, and its params: config routes first, then `match`.

Alert label values become params only if they look like names (Kubernetes label-value syntax):
nothing from a payload reaches a selector, PromQL or a command line unchecked.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from runbook.model.playbook import Playbook
from runbook.webhook.inbound import Inbound
from runbook.webhook.settings import RouteRule

SAFE_VALUE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")


@dataclasses.dataclass(frozen=True)
class Route:
    playbook: Playbook | None  # None: no playbook handles this alert
    params: dict[str, Any]
    refused: str | None = None  # why the alert's values cannot become params


def safe_value(value: str) -> bool:
    return SAFE_VALUE.fullmatch(value) is not None


class Router:
    def __init__(self, playbooks: Sequence[Playbook], rules: Sequence[RouteRule] = ()):
        self.playbooks = {p.name: p for p in playbooks}
        self.rules = list(rules)
        for rule in self.rules:
            if rule.playbook not in self.playbooks:
                from runbook.errors import InvalidInput

                raise InvalidInput(f"webhook.routes: no playbook named {rule.playbook!r} "
                                   f"(known: {', '.join(sorted(self.playbooks)) or 'none'})")

    def route(self, inbound: Inbound) -> Route:
        book, extra = self._choose(inbound)
        if book is None:
            return Route(None, {})
        params: dict[str, Any] = dict(extra)
        labels = inbound.alert.labels
        for param, label in book.match.labels.items():
            if label not in labels:
                continue
            value = labels[label]
            if not safe_value(value):
                shown = value[:80].encode("unicode_escape").decode("ascii")
                return Route(book, {}, refused=f"alert label {label}={shown!r} is not a safe value for param "
                                               f"{param} (letters, digits, '-', '_', '.'; at most 63)")
            params[param] = value
        return Route(book, params)

    def _choose(self, inbound: Inbound) -> tuple[Playbook | None, dict[str, Any]]:
        for rule in self.rules:
            if rule.source and rule.source != inbound.source:
                continue
            if rule.service and rule.service not in inbound.service:
                continue
            if rule.title and not re.search(rule.title, inbound.title):
                continue
            if rule.alertname and rule.alertname != inbound.alert.name:
                continue
            return self.playbooks[rule.playbook], dict(rule.params)
        for book in self.playbooks.values():
            if inbound.source == "alertmanager" and inbound.alert.name in book.match.alerts:
                return book, {}
            if inbound.source == "pagerduty" and any(re.search(t, inbound.title) for t in book.match.titles):
                return book, {}
        return None, {}
