"""One normalised alert, whatever its source (terminal, Alertmanager, PagerDuty, drill).

Labels arrive from outside and are untrusted: nothing here passes them anywhere; the params
that use them are validated by each action's model before they reach a selector or a shell.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Alert:
    source: str  # "triage" | "alertmanager" | "pagerduty" | "drill" | "manual"
    name: str
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    status: str = "firing"
    fingerprint: str = ""
    starts_at: dt.datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "name": self.name, "labels": dict(self.labels),
                "annotations": dict(self.annotations), "status": self.status, "fingerprint": self.fingerprint,
                "starts_at": self.starts_at.isoformat() if self.starts_at else None}

    def template_view(self) -> dict[str, Any]:
        return {"source": self.source, "name": self.name, "labels": dict(self.labels),
                "annotations": dict(self.annotations), "status": self.status}
