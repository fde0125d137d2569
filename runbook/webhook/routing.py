"""Which playbook an inbound alert starts, and its params: config routes first, then `match`.

Alert label values become params only through `intake_values`' screen (the one `runbook run` uses),
and the namespace they name must be allowed (`kubernetes.namespaces`): nothing from a payload
reaches a selector, PromQL, a command line or another namespace unchecked.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Sequence
from typing import Any

from runbook.text import intake_values
from runbook.engine import namespaces
from runbook.errors import InvalidInput, Refused
from runbook.model.playbook import Playbook
from runbook.webhook.inbound import Inbound
from runbook.webhook.settings import RouteRule


@dataclasses.dataclass(frozen=True)
class Route:
    playbook: Playbook | None  # None: no playbook handles this alert
    params: dict[str, Any]
    refused: str | None = None  # why the alert's values cannot become params


class Router:
    def __init__(self, playbooks: Sequence[Playbook], rules: Sequence[RouteRule] = (),
                 allowed_namespaces: Collection[str] | None = None):
        self.playbooks = {p.name: p for p in playbooks}
        self.rules = list(rules)
        self.namespaces = allowed_namespaces  # kubernetes.namespaces; None: each playbook's own
        for rule in self.rules:
            if rule.playbook not in self.playbooks:
                raise InvalidInput(f"webhook.routes: no playbook named {rule.playbook!r} "
                                   f"(known: {', '.join(sorted(self.playbooks)) or 'none'})")

    def route(self, inbound: Inbound) -> Route:
        book, extra = self._choose(inbound)
        if book is None:
            return Route(None, {})
        params: dict[str, Any] = dict(extra)
        sources = {param: "the config's webhook.routes params" for param in extra}
        try:
            from_labels, label_sources = intake_values.params_from_labels(book.match.labels, inbound.alert.labels)
            params.update(from_labels)
            sources.update(label_sources)
            namespaces.check_run_namespace(book.params, params, self.namespaces, sources=sources)
        except (InvalidInput, Refused) as exc:
            return Route(book, {}, refused=exc.reason if isinstance(exc, Refused) else str(exc))
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
