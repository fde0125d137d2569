"""The webhook service without HTTP: intake, worker, approvals, the sweeper and start-up recovery.

`create_app` puts routes in front of it; tests and `runbook serve` build it with an injected
world, clock and playbooks, so the same service runs on fakes and on the real cluster.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import socket
import threading
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from runbook import settings
from runbook.record import safe_fs
from runbook.backends.base import World
from runbook.clock import Clock, SystemClock
from runbook.errors import JournalError
from runbook.model.playbook import Playbook
from runbook.model.registry import Registry
from runbook.actions import load_builtin
from runbook.webhook import pagerduty_notes, records
from runbook.backends.coordination import Coordination
from runbook.webhook.coordination import LocalCoordination
from runbook.webhook.inbound import Delivery
from runbook.webhook.intake import Ack, Intake
from runbook.webhook.metrics import Metrics
from runbook.webhook.routing import Router
from runbook.webhook.runs import Runs
from runbook.webhook.settings import OPERATOR_NAME, Secrets, WebhookConfig
from runbook.webhook.store import Store
from runbook.webhook.gate import IntakeGate
from runbook.webhook.worker import Worker

log = logging.getLogger("runbook.webhook")


@dataclasses.dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Service:
    def __init__(self, *, config: WebhookConfig, secrets: Secrets, state: Path, world: World,
                 playbooks: Sequence[Playbook], clock: Clock | None = None, registry: Registry | None = None,
                 env: Mapping[str, str] | None = None, sweeper: bool = True,
                 coordination: Coordination | None = None, namespaces: Collection[str] | None = None):
        self.config, self.secrets, self.state, self.world = config, secrets, Path(state), world
        self.clock = clock or SystemClock()
        self.registry = registry or load_builtin()
        self.env = env
        self.coordination = coordination or LocalCoordination()
        self.store = Store(self.state / "webhook" / "state.sqlite3")
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        self.playbooks = {p.name: p for p in playbooks}
        self.router = Router(playbooks, config.routes, allowed_namespaces=namespaces)
        self.gate = IntakeGate()  # deliveries before runs: an ack never waits behind a run's Python work
        self.worker = Worker(self._handle, size=config.queue_size, threads=config.workers,
                             deadline=config.worker_deadline, clock=self.clock, before_run=self.gate.wait_clear)
        self.metrics = Metrics(self.worker.backlog, lambda: len(self.worker.overdue()))
        self.runs = Runs(store=self.store, state=self.state, world=world, clock=self.clock, registry=self.registry,
                         playbooks=self.playbooks, policy=config.policy, metrics=self.metrics, owner=self.owner,
                         kill_switch=self.kill_switch, incident_lock=self.coordination.incident_lock,
                         namespaces=namespaces)
        self.notes = pagerduty_notes.Notes.configured(settings=config.pagerduty_notes, secrets=secrets,
                                                      store=self.store, state=self.state, clock=self.clock,
                                                      retention=config.dedupe_retention)
        if self.notes is not None:
            self.runs.on_outcome, self.runs.after_run = self.notes.owe, self.notes.run_ended
            self.runs.on_unfinished = self.notes.unfinished
        self.intake = Intake(store=self.store, state=self.state, router=self.router, clock=self.clock,
                             backlog_limit=config.queue_size, coordination=self.coordination,
                             on_batch=self.metrics.commit_deliveries.observe)
        self._sweeper_enabled = sweeper
        self._stopping = threading.Event()
        self._sweeper: threading.Thread | None = None
        self._last_purge = 0.0

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Take over the runs a dead process left `running`, start the workers, queue what waits
        (the sweep first writes the journal lines a crash left owed: no run starts before them)."""
        at = self.clock.now().timestamp()
        for row in self.store.incidents("running"):
            host, _, pid = (row.owner or "").rpartition(":")
            if host == socket.gethostname() and pid.isdigit() and int(pid) != os.getpid() and _alive(int(pid)):
                continue  # another live server on this machine holds it
            log.warning("incident %s was left running by %s; recovering it", row.id, row.owner)
            self.store.set_state(row.id, "interrupted", at)
        self.worker.start()
        if self.notes is not None:
            self.notes.start()  # first the notes a crash left owed
        self.sweep()
        if self._sweeper_enabled:
            self._sweeper = threading.Thread(target=self._sweep_loop, name="runbook-webhook-sweeper", daemon=True)
            self._sweeper.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stopping.set()
        if not self.worker.stop(timeout):
            log.warning("runs still going after %gs; they will be recovered at the next start", timeout)
        if self._sweeper is not None:
            self._sweeper.join(timeout=5)
        if self.notes is not None:
            self.notes.stop(timeout=5)  # a note left unsent is owed, and sent at the next start

    def kill_switch(self) -> str | None:
        return settings.kill_switch(self.state, self.env)

    def _handle(self, incident: str) -> None:
        self.runs.handle(incident)

    # -- the ack path ----------------------------------------------------------------------

    def accept(self, delivery: Delivery) -> Ack:
        ack = self.intake.accept(delivery)
        for incident in ack.queued:
            if not self.worker.offer(incident):
                break  # the queue is full: the sweeper offers the rest, oldest first, so the order holds
        return ack

    # -- proposals -------------------------------------------------------------------------

    def approve(self, incident: str, step: str, by: str) -> Answer:
        if not OPERATOR_NAME.fullmatch(by):
            return Answer(400, {"error": "operator name must be letters, digits, '.', '_', '@' or '-' (at most 64)"})
        switched_off = self.kill_switch()
        if switched_off:
            return Answer(409, {"error": f"kill switch: {switched_off}"})
        now = self.clock.now()
        with self.store.transaction() as db:
            proposal = Store.latest_proposal(db, incident, step)
            if proposal is None:
                return Answer(404, {"error": f"no proposal for step {step!r} of incident {incident!r}"})
            if proposal.state != "pending":
                return Answer(409, {"error": f"the proposal is {proposal.state}, not pending", "proposal": proposal.to_json()})
            if now.timestamp() > proposal.expires:
                self._expire(db, proposal.id, incident, step, now)
                return Answer(409, {"error": f"the proposal expired at {_iso(proposal.expires)}; "
                                             "it is re-proposed if the alert fires again"})
            row = db.execute("SELECT state, closed FROM incidents WHERE id = ?", (incident,)).fetchone()
            if row is None or row["closed"] is not None or row["state"] != "proposed":
                why = "the alert resolved" if row is not None and row["closed"] is not None else "a run is under way"
                return Answer(409, {"error": f"incident {incident} cannot take an approval now: {why}"})
            if self.worker.room() <= 0:
                return Answer(503, {"error": "the run queue is full; try again shortly"})
            records.write(self.state, incident, records.PROPOSAL_APPROVED, at=now, step=step,
                          data={"by": by, "proposal": proposal.id, "summary": proposal.summary})
            Store.set_proposal(db, proposal.id, "approved", by=by)
            self.store.set_state(incident, "approved", now.timestamp(), job=f"approve:{step}:{by}", db=db)
        self.worker.offer(incident)
        return Answer(202, {"incident": incident, "step": step, "state": "approved", "by": by})

    def _expire(self, db: Any, proposal: int, incident: str, step: str, now: dt.datetime) -> None:
        records.write(self.state, incident, records.PROPOSAL_EXPIRED, at=now, step=step,
                      data={"proposal": proposal, "ttl_seconds": self.config.policy.proposal_ttl})
        Store.set_proposal(db, proposal, "expired", result="nobody approved it in time")
        db.execute("UPDATE incidents SET state = 'done', outcome = 'expired' WHERE id = ? AND state = 'proposed'",
                   (incident,))

    # -- upkeep ----------------------------------------------------------------------------

    def sweep(self) -> None:
        """Write owed journal lines, expire proposals, queue incidents that wait (after a full queue or a
        restart) oldest first, forget old keys."""
        now = self.clock.now()
        try:
            self.intake.journal_owed()
        except JournalError as exc:  # those incidents wait; the others are queued all the same
            log.error("journal lines of an accepted delivery are still owed: %s", exc)
        for proposal in self.store.proposals("pending"):
            if now.timestamp() > proposal.expires:
                with self.store.transaction() as db:
                    current = Store.latest_proposal(db, proposal.incident, proposal.step)
                    if current is not None and current.id == proposal.id and current.state == "pending":
                        self._expire(db, proposal.id, proposal.incident, proposal.step, now)
        for row in self.store.runnable():
            if not self.worker.offer(row.id):
                break
        if self.notes is not None:
            self.notes.sweep()
        if now.timestamp() - self._last_purge > 3600 or self._last_purge > now.timestamp():
            forgotten = self.store.forget_keys_before(now.timestamp() - self.config.dedupe_retention)
            self.coordination.forget(forgotten)
            self._last_purge = now.timestamp()

    def _sweep_loop(self) -> None:
        while not self._stopping.wait(self.config.sweep_interval):
            try:
                self.sweep()
            except JournalError:
                log.exception("sweep failed; trying again in %gs", self.config.sweep_interval)

    def problems(self) -> list[str]:
        """Why the service is not ready ([] when it is): journal, state store, backends, workers."""
        found = []
        probe = self.state / "incidents" / f".ready-{os.getpid()}"
        try:
            safe_fs.private_dir(probe.parent)
            fd = safe_fs.open_private(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            try:
                os.write(fd, b"ok")
            finally:
                os.close(fd)
            probe.unlink()
        except OSError as exc:
            found.append(f"the journal directory {probe.parent} is not writable: {exc.strerror}")
        try:
            self.store.ping()
        except JournalError as exc:
            found.append(str(exc))
        if self.world.metrics is None:
            found.append("no metrics backend configured (prometheus)")
        if self.world.cluster is None:
            found.append("no cluster backend configured (kubernetes)")
        found.extend(self.coordination.problems())
        found.extend(self.worker.problems())
        return found

    def warnings(self) -> list[str]:
        """What a person should know that does not make the service unready: PagerDuty notes given up."""
        try:
            return self.notes.problems() if self.notes is not None else []
        except JournalError as exc:
            return [str(exc)]

    def proposals(self, *states: str) -> list[dict[str, Any]]:
        return [p.to_json() for p in self.store.proposals(*states)]

    def proposal(self, incident: str, step: str) -> dict[str, Any] | None:
        found = self.store.proposal(incident, step)
        return found.to_json() if found else None


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

