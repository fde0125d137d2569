"""The ack path: a verified delivery is deduplicated, committed and journaled (fsynced) before the 2xx.

A delivery is committed whole or not at all, its journal lines with it as lines owed; they are
appended to the journals after the commit, under each journal's lock and once each (a line already
there is not written again), and a run never starts before its incident's lines are written. If the journal cannot be written
the caller answers 503: the retry is a duplicate, answered 2xx only once every line it owes is on
disk. With several replicas (`--coordination kubernetes`) each new key is also claimed in the
shared state first, and the claims are committed just before the local commit (see `coordination`).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime as dt
import sqlite3
from collections.abc import Callable, Collection, Hashable
from pathlib import Path
from typing import Any

from runbook.record import journal as journals
from runbook.clock import Clock
from runbook.backends.coordination import Claim, Coordination
from runbook.errors import Busy, ClaimedElsewhere, JournalError
from runbook.model import events as ev
from runbook.webhook import records
from runbook.webhook.coordination import LocalCoordination, claims_released
from runbook.webhook.group_commit import DEFAULT_MOST, GroupCommit
from runbook.webhook.inbound import Delivery, Inbound, digest
from runbook.webhook.routing import Router
from runbook.webhook.store import OwedLine, Store

JOURNAL_WRITERS = 8  # the journals of one batch written at once (their fsyncs overlap on the disk)


@dataclasses.dataclass(frozen=True)
class Ack:
    status: int  # 202 accepted, 200 duplicate or nothing to do
    body: dict[str, Any]
    queued: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class _Staged:
    """A delivery's answer once its batch commits, the incidents whose journals it waits for, and
    what those journals are owed as of that commit (every unsettled line, in commit order)."""
    ack: Ack
    incidents: tuple[str, ...]
    owed: tuple[OwedLine, ...] = ()


def incident_id(at: dt.datetime, playbook: str | None, incident_key: str) -> str:
    """Deterministic, so a retry after a crash mid-ack writes to the same journal."""
    return f"{at.strftime('%Y%m%d-%H%M%S')}-{playbook or 'unmatched'}-{digest(incident_key)[:8]}"


def _mark(type: str, step: str | None, data: dict[str, Any]) -> Hashable:
    """What makes a webhook journal line unique in its incident: the event that caused it, and what it says."""
    delivery = data.get("delivery")
    cause = delivery.get("event_key") if isinstance(delivery, dict) else data.get("event_key")
    return type, step, cause


class Intake:
    def __init__(self, *, store: Store, state: Path, router: Router, clock: Clock, backlog_limit: int,
                 coordination: Coordination | None = None, on_batch: Callable[[int], object] = lambda size: None):
        self.store, self.state, self.router, self.clock = store, state, router, clock
        self.backlog_limit = backlog_limit  # runs waiting in the store before new ones are refused (Busy)
        self.coordination = coordination or LocalCoordination()
        # Shared claims are committed one delivery at a time, each just before its local commit. A batch
        # is the transaction only: each caller then writes its own journals, beside the next batch's commit.
        self.batches: GroupCommit[Delivery, _Staged] = GroupCommit(
            self.commit_together, most=DEFAULT_MOST if self.coordination.kind == "local" else 1, on_batch=on_batch)
        # The settles of lines written meanwhile, taken together too (one short transaction for many).
        self._settles: GroupCommit[list[int], None] = GroupCommit(self._settle_together)
        # Its threads start only when a batch owes more than one journal, and at most JOURNAL_WRITERS.
        self._writers = concurrent.futures.ThreadPoolExecutor(JOURNAL_WRITERS, "runbook-webhook-journal")

    def accept(self, delivery: Delivery) -> Ack:
        """Commit the delivery whole, then journal what it owes; JournalError (503) if that fails.

        Deliveries that arrive together are committed together (`group_commit`): one transaction, each
        delivery in its own savepoint (one that fails leaves the others), each caller answered for its
        own. With shared claims (several replicas) each delivery commits alone, so its claims are still
        the last thing before its own local commit. The journals are written after the commit, outside
        the store's lock, so the next batch commits while this one's lines go to disk.
        """
        staged = self.batches.submit(delivery)
        failed = self._write_lines_owed(staged.owed, self._settles.submit)
        if failed:
            raise next(iter(failed.values()))
        return staged.ack

    def accept_together(self, deliveries: list[Delivery]) -> list[Ack | BaseException]:
        """`accept` for deliveries taken together: one transaction and one journal pass; each one's Ack,
        or the exception that stands for its failure (Busy, ClaimedElsewhere, JournalError, a bug)."""
        outcomes = self.commit_together(deliveries)
        # Nothing is acknowledged before its journal lines are on disk; a retry writes what a failure left.
        owed = {line.id: line for o in outcomes if isinstance(o, _Staged) for line in o.owed}
        failed = self._write_lines_owed([owed[k] for k in sorted(owed)], self._settle)
        acks: list[Ack | BaseException] = []
        for outcome in outcomes:
            if isinstance(outcome, _Staged):
                trouble = next((failed[i] for i in outcome.incidents if i in failed), None)
                acks.append(trouble if trouble is not None else outcome.ack)
            else:
                acks.append(outcome)
        return acks

    def commit_together(self, deliveries: list[Delivery]) -> list["_Staged | BaseException"]:
        """Commit these deliveries in one transaction: each one's answer and the journals it waits for,
        or the exception that stands for its failure. Nothing is journaled yet."""
        now = self.clock.now()
        outcomes: list[_Staged | BaseException] = []
        claims: list[Claim] = []  # every shared claim of the batch: released if the commit fails
        done: list[tuple[Claim, str | None]] = []
        with claims_released(self.coordination, claims), self.store.transaction() as db:
            for delivery in deliveries:
                own: list[Claim] = []
                db.execute("SAVEPOINT delivery")
                try:
                    with claims_released(self.coordination, own):
                        staged = self._stage(db, delivery, now, own, done)
                except Exception as exc:  # this delivery's answer (503, or 500 for a bug); the others go on
                    db.execute("ROLLBACK TO delivery")
                    db.execute("RELEASE delivery")
                    done[:] = [(claim, incident) for claim, incident in done if claim not in own]
                    outcomes.append(exc)
                    continue
                db.execute("RELEASE delivery")
                claims.extend(own)
                outcomes.append(staged)
            for claim, incident in done:  # last thing before the local commit
                self.coordination.commit(claim, incident)
            # Read in the commit that owes them: every unsettled line of these incidents up to the newest,
            # in order, so whichever writer takes a journal's lock first appends them all in commit order.
            owed: dict[str, list[OwedLine]] = {}
            for line in Store.owed(db, {i for o in outcomes if isinstance(o, _Staged) for i in o.incidents}):
                owed.setdefault(line.incident, []).append(line)
        return [dataclasses.replace(o, owed=tuple(line for i in o.incidents for line in owed.get(i, ())))
                if isinstance(o, _Staged) else o for o in outcomes]

    def _stage(self, db: sqlite3.Connection, delivery: Delivery, now: dt.datetime, claims: list[Claim],
               done: list[tuple[Claim, str | None]]) -> "_Staged":
        """One delivery's part of the transaction: its dedupe, incidents and owed lines; its answer."""
        at = now.timestamp()
        delivery_key = f"{delivery.source}-delivery|{delivery.delivery_key}" if delivery.delivery_key else None
        if delivery_key is not None and (prior := Store.seen(db, delivery_key)) is not None:
            return _Staged(Ack(200, {"duplicate": True, "incident": prior or None}), (prior,) if prior else ())
        results: list[dict[str, Any]] = []
        queued: list[str] = []
        full = Store.waiting_count(db) >= self.backlog_limit
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
            verdict, incident = self._one(db, inbound, now, full, claims, done)
            Store.remember(db, inbound.event_key, delivery.source, incident, at)
            results.append({"verdict": verdict, "incident": incident})
            if verdict == "queued":
                queued.append(incident)
            if claim is not None:
                done.append((claim, incident))
        if delivery_key is not None:
            Store.remember(db, delivery_key, delivery.source, results[0]["incident"] if results else None, at)
        incidents = tuple(dict.fromkeys(r["incident"] for r in results if r["incident"]))
        if delivery.ignored and not delivery.inbound:
            return _Staged(Ack(200, {"ignored": delivery.ignored}), incidents)
        duplicate = bool(results) and all(r["verdict"] == "duplicate" for r in results)
        body: dict[str, Any] = {"duplicate": True} if duplicate else {"accepted": len(results)}
        body["alerts"] = results
        return _Staged(Ack(200 if duplicate else 202, body, tuple(queued)), incidents)

    def journal_owed(self, incidents: Collection[str] | None = None) -> None:
        """Append the lines the store owes to these incidents' journals (or to all), each once, in order.

        Under each journal's lock, so two threads or processes never write one line twice; a line
        already in the journal (written by another writer, or before a crash or a failed commit) is
        only settled. An incident whose journal cannot be written keeps its lines; the others go on;
        the first error is raised after the progress is committed.
        """
        failed = self._write_owed(incidents)
        if failed:
            raise next(iter(failed.values()))

    def _write_owed(self, incidents: Collection[str] | None) -> dict[str, JournalError]:
        """`journal_owed`, saying which incidents' journals could not be written (and why)."""
        if incidents is not None and not incidents:
            return {}
        return self._write_lines_owed(self.store.owed_now(incidents), self._settle)

    def _write_lines_owed(self, owed: Collection[OwedLine], settle: Callable[[list[int]], object]) -> dict[str, JournalError]:
        """Write these owed lines (each incident's, read after the commit that owes them), then `settle`
        the ids now on disk; which incidents' journals could not be written, and why."""
        lines: dict[str, list[OwedLine]] = {}
        for line in owed:
            lines.setdefault(line.incident, []).append(line)
        # Each incident's journal is its own files, and its fsyncs (the new folder's, the new file's,
        # the lines') wait on the disk without the GIL: a batch's journals are written side by side.
        if len(lines) > 1:
            written = list(self._writers.map(self._write_lines, lines.items()))
        else:
            written = [self._write_lines(item) for item in lines.items()]
        failed = {incident: trouble for incident, (_, trouble) in zip(lines, written) if trouble is not None}
        settled = [line_id for ids, _ in written for line_id in ids]
        if settled:
            settle(settled)
        return failed

    def _settle(self, line_ids: list[int]) -> None:
        self._settle_together([line_ids])

    def _settle_together(self, batches: list[list[int]]) -> list[None]:
        """Settle lines now on disk, not waiting for the disk: a settle a crash loses is made again by the
        next pass, which finds the line in the journal and writes nothing."""
        with self.store.transaction(durable=False) as db:
            for line_id in {line_id for ids in batches for line_id in ids}:
                Store.settle(db, line_id)
        return [None] * len(batches)

    def _write_lines(self, item: tuple[str, list[OwedLine]]) -> tuple[list[int], JournalError | None]:
        """Append one incident's owed lines in order, each once, with one fsync; the ids now on disk, and
        what stopped it."""
        incident, owed = item

        def missing(present: list[ev.Event]) -> list[journals.Entry]:
            there = {_mark(e.type, e.step, e.data) for e in present}
            entries = []
            for line in owed:
                mark = _mark(line.type, line.step, line.data)
                if mark not in there:
                    entries.append(journals.Entry(line.type, line.at, line.step, line.data))
                    there.add(mark)
            return entries

        try:
            journal = journals.JsonlJournal.for_incident(self.state, incident, records.WEBHOOK_RUN)
            try:
                journal.extend(missing)
            finally:
                journal.close()
        except JournalError as exc:
            return [], exc
        return [line.id for line in owed], None

    def _one(self, db: sqlite3.Connection, inbound: Inbound, now: dt.datetime, full: bool,
             claims: list[Claim], done: list[tuple[Claim, str | None]]) -> tuple[str, str]:
        existing = Store.incident_by_key(db, inbound.incident_key)
        if existing is not None:
            self._journal(db, existing.id, inbound, now, None)
            if inbound.effect == "close":
                self._close(db, existing.id, inbound, now)
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
            if full:
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
        self._journal(db, incident, inbound, now, routing)
        if state == "elsewhere":
            Store.owe(db, incident, ev.NOTE, at=now.timestamp(), data={
                "message": "not run here: another replica has opened this incident", "event_key": inbound.event_key})
        if state in ("unmatched", "refused"):
            why = route.refused or f"no playbook matches {inbound.alert.name or inbound.title!r}"
            Store.owe(db, incident, ev.NOTE, at=now.timestamp(),
                      data={"message": f"not run: {why}", "event_key": inbound.event_key})
        Store.add_incident(db, id=incident, source=inbound.source, source_key=inbound.incident_key, playbook=name,
                           params=route.params, alert=inbound.alert.to_json(), state=state, at=now.timestamp())
        if state == "closed":
            db.execute("UPDATE incidents SET closed = ? WHERE id = ?", (now.timestamp(), incident))
        return ("queued" if state == "pending" else state), incident

    @staticmethod
    def _journal(db: sqlite3.Connection, incident: str, inbound: Inbound, now: dt.datetime,
                 routing: dict[str, Any] | None) -> None:
        data: dict[str, Any] = {**inbound.alert.to_json(), "delivery": {**inbound.details, "event_key": inbound.event_key,
                                                                      "occurred_at": ev.iso_ms(inbound.occurred_at)}}
        if routing is not None:
            data["route"] = routing
        Store.owe(db, incident, ev.ALERT_RECEIVED, at=now.timestamp(), data=data)

    @staticmethod
    def _close(db: sqlite3.Connection, incident: str, inbound: Inbound, now: dt.datetime) -> None:
        before = Store.mark_closed(db, incident, now.timestamp())
        for proposal in db.execute("SELECT id, step FROM proposals WHERE incident = ? AND state IN "
                                   "('pending', 'approved')", (incident,)).fetchall():
            Store.set_proposal(db, proposal["id"], "closed", result="the alert resolved")
            Store.owe(db, incident, records.PROPOSAL_CLOSED, at=now.timestamp(), step=proposal["step"],
                      data={"reason": "the alert resolved", "event_key": inbound.event_key})
        Store.owe(db, incident, records.INCIDENT_CLOSED, at=now.timestamp(),
                  data={"reason": "the alert resolved", "state_before": before, "event_key": inbound.event_key})
