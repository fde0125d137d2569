"""One claimed incident, run: the first run, an approved step, or the rest of an interrupted run.

The engine does the work; this module picks the operator (policy or approval), the steps to skip,
and afterwards records proposals, the incident's state and the metrics.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from runbook.record import journal as journals
from runbook.backends import shared_state
from runbook.backends.base import World
from runbook.clock import Clock
from runbook.engine.runner import ACTION_PROPOSED, Engine, RunResult
from runbook.errors import Refused, RunbookError
from runbook.model.alert import Alert
from runbook.model.events import parse_iso
from runbook.model.playbook import Playbook
from runbook.model.registry import Registry
from runbook.webhook import recovery
from runbook.webhook.metrics import Metrics
from runbook.webhook.policy import ApprovalOperator, PolicyOperator, always_ask, remediation_steps
from runbook.webhook.settings import Policy
from runbook.webhook.store import IncidentRow, Store

log = logging.getLogger("runbook.webhook")
STEP_RESULT = {"changed": "applied", "ok": "unchanged", "skipped": "unchanged", "refused": "refused",
               "failed": "failed", "proposed": "pending"}


def alert_from_json(data: Mapping[str, Any]) -> Alert:
    starts = data.get("starts_at")
    return Alert(str(data.get("source", "")), str(data.get("name", "")), dict(data.get("labels") or {}),
                 dict(data.get("annotations") or {}), status=str(data.get("status", "firing")),
                 fingerprint=str(data.get("fingerprint", "")), starts_at=parse_iso(starts) if starts else None)


def approval_of(job: str) -> tuple[str, str] | None:
    """`approve:STEP:BY` → (step, by); a first run has no approval."""
    kind, _, rest = job.partition(":")
    if kind != "approve":
        return None
    step, _, by = rest.partition(":")
    return step, by


@dataclasses.dataclass
class Runs:
    store: Store
    state: Path
    world: World
    clock: Clock
    registry: Registry
    playbooks: Mapping[str, Playbook]
    policy: Policy
    metrics: Metrics
    owner: str
    kill_switch: Callable[[], str | None]
    # The incident's lock across replicas (a Lease with --coordination kubernetes); a no-op alone.
    incident_lock: Callable[[str, str], contextlib.AbstractContextManager[None]] = \
        lambda incident, holder: contextlib.nullcontext()
    namespaces: Collection[str] | None = None  # kubernetes.namespaces; None: each playbook's own
    # Told of every run's outcome in the transaction that records it (so what it owes survives a crash),
    # then again once that is committed (the note back to PagerDuty); neither may raise.
    on_outcome: Callable[[Any, IncidentRow, RunResult], None] = lambda db, row, result: None
    after_run: Callable[[IncidentRow, RunResult], None] = lambda row, result: None
    # Told of a run that did not finish (it raised, or a restart left its change to a person): the
    # incident, the run whose journal says what it changed, and why; may not raise.
    on_unfinished: Callable[[IncidentRow, str, str], None] = lambda row, run, why: None

    def handle(self, incident: str) -> None:
        try:
            with self.incident_lock(incident, f"runbook serve {self.owner} incident {incident}"):
                self._handle(incident)
        except Refused as exc:  # another replica is running it: it stays waiting; the sweeper offers it again
            log.info("incident %s not run now: %s", incident, exc)

    def _handle(self, incident: str) -> None:
        row = self.store.claim(incident, self.owner, self.clock.now().timestamp())
        if row is None:
            return  # closed, done, or taken meanwhile
        book = self.playbooks.get(row.playbook or "")
        run = journals.new_run_id()  # named here, so that a run that raises can still be described
        try:
            if book is None:
                raise RunbookError(f"playbook {row.playbook!r} is no longer loaded")
            skip: dict[str, str] = {}
            if row.state == "interrupted":
                found = recovery.recover(self, row, book)
                if found is None:
                    self.store.set_state(row.id, "done", self.clock.now().timestamp(), outcome="interrupted")
                    self._unfinished(row, *self._held(row))
                    return
                skip = found
            result, _ = self.execute(row, book, skip, run=run)
            self.finish(row, book, result, skip)
        except Exception as exc:
            log.exception("incident %s: the run could not finish", row.id)
            self.store.set_state(row.id, "error", self.clock.now().timestamp(), outcome=f"error: {exc}"[:500])
            self.metrics.runs.labels("error").inc()
            self._unfinished(row, run, f"The run raised {type(exc).__name__}: {exc}")
            return
        try:
            self.after_run(row, result)
        except Exception:
            log.exception("incident %s: what follows the run failed", row.id)

    def _held(self, row: IncidentRow) -> tuple[str, str]:
        """The interrupted run a restart left to a person, and why (from the journal recovery just wrote)."""
        events = journals.read_journal(journals.incident_dir(self.state, row.id) / journals.JOURNAL_NAME).events
        run, why = recovery.held_for_a_person(events) or ("", "interrupted; a restart could not finish it")
        return run, f"A restart found the run interrupted: {why}"

    def _unfinished(self, row: IncidentRow, run: str, why: str) -> None:
        try:
            self.on_unfinished(row, run, why)
        except Exception:
            log.exception("incident %s: telling of the unfinished run failed", row.id)

    def closed(self, incident: str) -> bool:
        row = self.store.incident(incident)
        return row is not None and row.closed is not None

    def history(self) -> journals.History:
        """What cooldowns and budgets count: the local journals, and a cluster's shared record where there is one."""
        return shared_state.history_for(self.world, self.state)

    def execute(self, row: IncidentRow, book: Playbook, skip: Mapping[str, str], *,
                dry_run: bool = False, run: str | None = None) -> tuple[RunResult, journals.JsonlJournal]:
        operator: Any = PolicyOperator(self.policy, book.name, lambda: self.closed(row.id))
        skip = dict(skip)
        approval = approval_of(row.job)
        if approval is not None:
            step, by = approval
            operator = ApprovalOperator(step, by, operator)
            remediations = remediation_steps(book, self.registry)
            ids = [s.id for s in book.steps]
            for earlier in remediations:
                if ids.index(earlier) < ids.index(step):
                    skip.setdefault(earlier, f"comes before the approved step {step}; decided in an earlier run")
        journal = journals.JsonlJournal.for_incident(self.state, row.id, run or journals.new_run_id())
        engine = Engine(registry=self.registry, world=self.world, clock=self.clock, journal=journal,
                        operator=operator, locks=shared_state.target_locks(self.world, self.state),
                        history=self.history(),
                        dry_run=dry_run, kill_switch=self.kill_switch, holder=f"runbook serve {self.owner}",
                        namespaces=self.namespaces)
        try:
            result = engine.run(always_ask(book, self.registry), alert=alert_from_json(row.alert),
                                params=row.params, record_alert=False, skip=skip)
        finally:
            journal.close()
        return result, journal

    def finish(self, row: IncidentRow, book: Playbook, result: RunResult, skip: Mapping[str, str]) -> None:
        now = self.clock.now()
        self.metrics.runs.labels(result.outcome).inc()
        for step in result.steps:
            if step.kind == "remediation" and step.status in ("changed", "proposed", "refused"):
                self.metrics.actions.labels({"changed": "applied"}.get(step.status, step.status)).inc()
        proposed = next((s for s in result.steps if s.status == "proposed"), None)
        approval = approval_of(row.job)
        with self.store.transaction() as db:
            current = db.execute("SELECT closed FROM incidents WHERE id = ?", (row.id,)).fetchone()
            closed = current is not None and current["closed"] is not None
            if approval is not None:
                self._settle_approval(db, row.id, approval[0], result, skip)
            if proposed is not None:
                planned = _proposed_event(result, row, self.state)
                Store.add_proposal(db, incident=row.id, step=proposed.id, run=result.run,
                                   action=planned.get("action", proposed.uses), target=planned.get("target", ""),
                                   summary=planned.get("summary", proposed.summary), diff=planned.get("diff", []),
                                   created=now.timestamp(), expires=now.timestamp() + self.policy.proposal_ttl,
                                   state="closed" if closed else "pending")
            state = "closed" if closed else ("proposed" if proposed is not None else "done")
            self.on_outcome(db, row, result)
            self.store.set_state(row.id, state, now.timestamp(), job="first", outcome=result.outcome, db=db)

    @staticmethod
    def _settle_approval(db: Any, incident: str, step: str, result: RunResult, skip: Mapping[str, str]) -> None:
        proposal = Store.latest_proposal(db, incident, step)
        if proposal is None or proposal.state != "approved":
            return
        outcome = next((s for s in result.steps if s.id == step), None)
        if outcome is None:
            state, why = "failed", f"the run ended before {step}: {result.reason}"
        elif outcome.status == "skipped" and step in skip and skip[step].startswith("applied"):
            state, why = "applied", skip[step]
        else:
            state, why = STEP_RESULT.get(outcome.status, "failed"), outcome.summary
        Store.set_proposal(db, proposal.id, state, result=why[:1000])


def _proposed_event(result: RunResult, row: IncidentRow, state: Path) -> dict[str, Any]:
    events = journals.read_journal(journals.incident_dir(state, row.id) / "journal.jsonl").events
    found = [e for e in events if e.run == result.run and e.type == ACTION_PROPOSED]
    return dict(found[-1].data) if found else {}
