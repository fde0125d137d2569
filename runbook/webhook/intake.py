"""The ack path: a verified delivery is deduplicated, journaled (fsynced) and committed before the 2xx.

Keys and the journal line are written under one store transaction; if the journal cannot be
written, nothing is committed and the caller answers 503 so the sender retries. With several
replicas (`--coordination kubernetes`) each new key is also claimed in the shared state first,
and the claims are committed just before the local commit (see `coordination`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runbook.clock import Clock
from runbook.model import events as ev
from runbook.webhook import records
from runbook.webhook.coordination import Claim, ClaimedElsewhere, Coordination, LocalCoordination, claims_released
from runbook.webhook.inbound import Delivery, Inbound, digest
from runbook.webhook.routing import Router
from runbook.webhook.store import Store


class Busy(Exception):
    """The run queue is full: answered 503 with Retry-After, before anything is written."""


@dataclasses.dataclass(frozen=True)
class Ack:
    status: int  # 202 accepted, 200 duplicate or nothing to do
    body: dict[str, Any]
    queued: tuple[str, ...] = ()


def incident_id(at: dt.datetime, playbook: str | None, incident_key: str) -> str:
    """Deterministic, so a retry after a crash mid-ack writes to the same journal."""
    return f"{at.strftime('%Y%m%d-%H%M%S')}-{playbook or 'unmatched'}-{digest(incident_key)[:8]}"


class Intake:
    def __init__(self, *, store: Store, state: Path, router: Router, clock: Clock, room: Callable[[], int],
                 coordination: Coordination | None = None):
        self.store, self.state, self.router, self.clock, self.room = store, state, router, clock, room
        self.coordination = coordination or LocalCoordination()

    def accept(self, delivery: Delivery) -> Ack:
        now = self.clock.now()
        at = now.timestamp()
        delivery_key = f"{delivery.source}-delivery|{delivery.delivery_key}" if delivery.delivery_key else None
        results: list[dict[str, Any]] = []
        queued: list[str] = []
        claims: list[Claim] = []  # shared claims made for this delivery: released if it fails
        done: list[tuple[Claim, str | None]] = []
        with claims_released(self.coordination, claims), self.store.transaction() as db:
            if delivery_key is not None and (prior := Store.seen(db, delivery_key)) is not None:
                return Ack(200, {"duplicate": True, "incident": prior or None})
            for inbound in delivery.inbound:
                prior = Store.seen(db, inbound.event_key)
                if prior is not None:
                    results.append({"verdict": "duplicate", "incident": prior or None})
                    continue
                shared, claim, other = self.coordination.claim(inbound.event_key)
                if shared == "busy":
                    raise ClaimedElsewhere(f"{other} is taking this delivery right now")
                if shared == "duplicate":  # another replica has it
                    Store.remember(db, inbound.event_key, delivery.source, other, at)
                    results.append({"verdict": "duplicate", "incident": other})
                    continue
                if claim is not None:
                    claims.append(claim)
                verdict, incident = self._one(db, inbound, now, len(queued), claims, done)
                Store.remember(db, inbound.event_key, delivery.source, incident, at)
                results.append({"verdict": verdict, "incident": incident})
                if verdict == "queued":
                    queued.append(incident)
                if claim is not None:
                    done.append((claim, incident))
            if delivery_key is not None:
                Store.remember(db, delivery_key, delivery.source, results[0]["incident"] if results else None, at)
            for claim, incident in done:  # last thing before the local commit
                self.coordination.commit(claim, incident)
        if delivery.ignored and not delivery.inbound:
            return Ack(200, {"ignored": delivery.ignored})
        duplicate = bool(results) and all(r["verdict"] == "duplicate" for r in results)
        body: dict[str, Any] = {"duplicate": True} if duplicate else {"accepted": len(results)}
        body["alerts"] = results
        return Ack(200 if duplicate else 202, body, tuple(queued))

    def _one(self, db: sqlite3.Connection, inbound: Inbound, now: dt.datetime, queued: int,
             claims: list[Claim], done: list[tuple[Claim, str | None]]) -> tuple[str, str]:
        existing = Store.incident_by_key(db, inbound.incident_key)
        if existing is not None:
            self._journal(existing.id, inbound, now, None)
            if inbound.effect == "close":
                self._close(db, existing.id, now)
                return "closed", existing.id
            return "recorded", existing.id
        route = self.router.route(inbound)
        name = route.playbook.name if route.playbook else None
        incident = incident_id(inbound.occurred_at, name, inbound.incident_key)
        if inbound.effect != "open":
            state = "closed" if inbound.effect == "close" else "recorded"  # never start a run on an ack
        elif route.playbook is None:
            state = "unmatched"
        elif route.refused:
            state = "refused"
        else:
            if self.room() - queued <= 0:
                raise Busy("the run queue is full")
            state = "pending"
            # Different events of one incident can reach different replicas: the run is claimed too.
            shared, claim, other = self.coordination.claim(f"incident|{inbound.incident_key}")
            if shared == "busy":
                raise ClaimedElsewhere(f"{other} is opening this incident right now")
            if shared == "duplicate":
                state = "elsewhere"
            if self.coordination.kind != "local":  # remembered so that the purge forgets its claim too
                Store.remember(db, f"incident|{inbound.incident_key}", inbound.source, incident, now.timestamp())
            if claim is not None:
                claims.append(claim)
                done.append((claim, incident))
        routing = {"playbook": name, "params": route.params, "refused": route.refused}
        self._journal(incident, inbound, now, routing)
        if state == "elsewhere":
            records.write(self.state, incident, ev.NOTE, at=now,
                          data={"message": "not run here: another replica has opened this incident"})
        if state in ("unmatched", "refused"):
            why = route.refused or f"no playbook matches {inbound.alert.name or inbound.title!r}"
            records.write(self.state, incident, ev.NOTE, at=now, data={"message": f"not run: {why}"})
        Store.add_incident(db, id=incident, source=inbound.source, source_key=inbound.incident_key, playbook=name,
                           params=route.params, alert=inbound.alert.to_json(), state=state, at=now.timestamp())
        if state == "closed":
            db.execute("UPDATE incidents SET closed = ? WHERE id = ?", (now.timestamp(), incident))
        return ("queued" if state == "pending" else state), incident

    def _journal(self, incident: str, inbound: Inbound, now: dt.datetime, routing: dict[str, Any] | None) -> None:
        data: dict[str, Any] = {**inbound.alert.to_json(), "delivery": {**inbound.details, "event_key": inbound.event_key,
                                                                      "occurred_at": inbound.occurred_at}}
        if routing is not None:
            data["route"] = routing
        records.write(self.state, incident, ev.ALERT_RECEIVED, at=now, data=data)

    def _close(self, db: sqlite3.Connection, incident: str, now: dt.datetime) -> None:
        before = Store.mark_closed(db, incident, now.timestamp())
        for proposal in db.execute("SELECT id, step FROM proposals WHERE incident = ? AND state IN "
                                   "('pending', 'approved')", (incident,)).fetchall():
            Store.set_proposal(db, proposal["id"], "closed", result="the alert resolved")
            records.write(self.state, incident, records.PROPOSAL_CLOSED, at=now, step=proposal["step"],
                          data={"reason": "the alert resolved"})
        records.write(self.state, incident, records.INCIDENT_CLOSED, at=now,
                      data={"reason": "the alert resolved", "state_before": before})
