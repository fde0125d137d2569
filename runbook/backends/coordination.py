"""The protocol replicas of `runbook serve` share deliveries through: claim a key, commit it, release it.

Its one shared implementation is `runbook.backends.kubernetes.claims` (Leases); a single server
uses `runbook.webhook.coordination.LocalCoordination`, which shares nothing.
"""

from __future__ import annotations

from typing import Any, ContextManager, Literal, Protocol

Verdict = Literal["new", "duplicate", "busy"]


class Claim:
    """One claimed key, until it is committed or released."""

    def __init__(self, key: str, name: str, lease: dict[str, Any]):
        self.key, self.name, self.lease = key, name, lease


class Coordination(Protocol):
    kind: str

    def claim(self, key: str) -> tuple[Verdict, Claim | None, str | None]: ...

    def commit(self, claim: Claim, incident: str | None) -> None: ...

    def release(self, claim: Claim) -> None: ...

    def forget(self, keys: list[str]) -> None: ...

    def incident_lock(self, incident: str, holder: str) -> ContextManager[None]: ...

    def problems(self) -> list[str]: ...
