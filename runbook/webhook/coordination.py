"""Who acts when several replicas receive the same deliveries: `--coordination local|kubernetes`.

`local` (the default): one server; its SQLite store alone decides what is new and the worker runs
one incident at a time. `kubernetes`: replicas behind one Service share claims in the API server
(`runbook.backends.kubernetes.claims`, whose docstring tells the protocol).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import ContextManager

from runbook.backends.coordination import Claim, Coordination, Verdict


class LocalCoordination:
    """One server: the SQLite store decides; nothing is shared."""

    kind = "local"

    def claim(self, key: str) -> tuple[Verdict, Claim | None, str | None]:
        return "new", None, None

    def commit(self, claim: Claim, incident: str | None) -> None:
        pass

    def release(self, claim: Claim) -> None:
        pass

    def forget(self, keys: list[str]) -> None:
        pass

    def incident_lock(self, incident: str, holder: str) -> ContextManager[None]:
        return contextlib.nullcontext()

    def problems(self) -> list[str]:
        return []


@contextlib.contextmanager
def claims_released(coordination: Coordination, claims: list[Claim]) -> Iterator[None]:
    """Release every claim made so far when what follows fails (nothing was committed)."""
    try:
        yield
    except BaseException:
        for claim in claims:
            coordination.release(claim)
        raise
