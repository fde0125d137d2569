"""What cooldowns and budgets count when several runbooks share targets: local journals plus a shared record.

The shared record (a cluster's ConfigMap per target, runbook/backends/kubernetes/ledger.py) is
read on every count; when it cannot be read the count is an error, never the local part alone.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Protocol

from runbook.record.journal import DRILL_PREFIX, Application, History, Journal


class Ledger(Protocol):
    """Applied remediations per target, where every runbook instance reads and writes them."""

    def applications(self, target: str, *, since: dt.datetime, action: str | None = None,
                     namespace: str | None = None) -> list[Application]: ...

    def record(self, target: str, application: Application, *, namespace: str | None = None) -> None: ...


class SharedHistory(History):
    """The local journals' applications and the ledger's, each application counted once."""

    def __init__(self, state: Path | None, ledger: Ledger, extra: Journal | None = None):
        super().__init__(state, extra)
        self.ledger = ledger

    def records(self, target: str, *, since: dt.datetime, action: str | None = None,
                namespace: str | None = None) -> list[Application]:
        # The ledger first: if it cannot be read, nothing is counted from the local part alone.
        shared = self.ledger.applications(target, since=since, action=action, namespace=namespace)
        union = {a.key: a for a in super().records(target, since=since, action=action)}
        for application in shared:
            union.setdefault(application.key, application)
        return sorted(union.values(), key=lambda a: a.at)

    def record_applied(self, target: str, action: str, at: dt.datetime, incident: str, *,
                       namespace: str | None = None) -> None:
        """Put an applied (or possibly applied) remediation where every instance counts it. BackendError if not.

        `namespace`: the namespace the change was made in (the plan's), where the target's Lease lives too.
        """
        if incident.startswith(DRILL_PREFIX):
            return  # drills never count against real targets
        self.ledger.record(target, Application(incident, action, at), namespace=namespace)
