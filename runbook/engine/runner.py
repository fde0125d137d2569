"""`Engine.run`: one playbook, step by step, every decision journaled before it takes effect.

Remediations go plan → hard guards → lock → re-check → server-side dry run → confirm → apply;
a failed step's `on_fail` decides between stopping, going on, rolling back and escalating.
Pure orchestration: the world, the clock, the operator, the locks and the journal are injected.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import getpass
import math
from collections.abc import Callable, Mapping
from typing import Any

import pydantic

from runbook.actions.base import ActionResult, Evidence, Plan, StepContext
from runbook.backends.base import World
from runbook.clock import Clock
from runbook.engine import guards, templating
from runbook.engine.operator import Confirmation, ConfirmRequest, Operator
from runbook.errors import BackendError, BackendUnavailable, InvalidInput, Refused, RunbookError
from runbook.journal import History, Journal
from runbook.locks import Locks
from runbook.model import events as ev
from runbook.model.alert import Alert
from runbook.model.playbook import Guard, Playbook, Step
from runbook.registry import Kind, Registry

HISTORY_CONTEXT_SECONDS = 900.0  # at least 15 minutes of context before the alert
HISTORY_POINTS = 120

# In a dry run nothing changed, so there is nothing to verify and no one to hand a change to.
DRY_RUN_SKIPS = {"flow.verify": "dry run: nothing was applied, so there is nothing to verify",
                 "flow.escalate": "dry run: would escalate here"}

OUTCOME_EXIT = {"resolved": 0, "dry_run": 0, "refused": 4, "failed": 1, "rolled_back": 1, "escalated": 1,
                "proposed": 4}

# Journaled when an operator leaves a planned change to a human instead of approving it.
ACTION_PROPOSED = ev.ACTION_PROPOSED


@dataclasses.dataclass(frozen=True)
class Proposed(Confirmation):
    """An operator's answer that records the change as proposed for a human: the run stops there."""


@dataclasses.dataclass(frozen=True)
class StepOutcome:
    id: str
    uses: str
    kind: str
    status: str  # ok | changed | would_change | skipped | proposed | refused | failed
    summary: str
    result: dict[str, Any]
    guard: str | None = None  # the refusing guard


@dataclasses.dataclass(frozen=True)
class AppliedAction:
    step: str
    action: str
    target: str
    before: dict[str, Any]
    after: dict[str, Any]
    by: str
    applied: bool  # False: planned only (dry run)
    rollback: Callable[[], dict[str, Any]] | None = dataclasses.field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "action": self.action, "target": self.target, "before": self.before,
                "after": self.after, "by": self.by, "applied": self.applied}


@dataclasses.dataclass(frozen=True)
class RunResult:
    incident: str
    run: str
    playbook: str
    outcome: str
    reason: str
    steps: tuple[StepOutcome, ...]
    actions: tuple[AppliedAction, ...]

    @property
    def exit_code(self) -> int:
        return OUTCOME_EXIT[self.outcome]


def default_operator_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry, e.g. in a container
        return "unknown-user"


class Engine:
    def __init__(self, *, registry: Registry, world: World, clock: Clock, journal: Journal, operator: Operator,
                 locks: Locks, history: History, dry_run: bool = False,
                 kill_switch: Callable[[], str | None] = lambda: None, holder: str = "runbook",
                 default_timeout: float = 30.0, pool_size: int = 16):
        """`pool_size`: how many per-pod/per-node calls of one step run at once (StepContext.pool_size)."""
        self.registry, self.world, self.clock, self.journal = registry, world, clock, journal
        self.operator, self.locks, self.history = operator, locks, history
        self.dry_run, self.kill_switch, self.holder = dry_run, kill_switch, holder
        self.default_timeout = default_timeout
        self.pool_size = pool_size

    # -- the run ---------------------------------------------------------------------------

    def run(self, playbook: Playbook, *, alert: Alert | None = None, params: Mapping[str, Any] | None = None,
            record_alert: bool = True, skip: Mapping[str, str] | None = None) -> RunResult:
        """`skip`: step id → why it is not run this time (e.g. applied by an earlier run of the incident)."""
        now = self.clock.now()
        if alert is not None and record_alert:
            self._record(ev.ALERT_RECEIVED, now, data=alert.to_json())
        merged = {**playbook.params, **(params or {})}
        base = {"alert": alert.template_view() if alert else {"labels": {}, "annotations": {}, "name": "", "source": "manual"},
                "incident": {"id": self.journal.incident}}
        self._record(ev.RUN_STARTED, now, data={"playbook": playbook.name, "title": playbook.title,
                                                 "severity": playbook.severity, "dry_run": self.dry_run,
                                                 "params": merged, "holder": self.holder,
                                                 "root_cause_hints": list(playbook.rca.root_cause_hints),
                                                 "improvements": playbook.rca.improvements.model_dump(mode="json")})
        outcome, reason = "resolved", "every step finished"
        self._started_at = now
        self._signals: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {}
        if playbook.detect is not None:
            self._signals[playbook.detect.signal] = ({}, ())
        steps: list[StepOutcome] = []
        actions: list[AppliedAction] = []
        escalated = False
        try:
            rendered_params = templating.render_value(merged, base)
        except InvalidInput as exc:
            return self._finish(playbook, "failed", f"params: {exc}", steps, actions)
        context: dict[str, Any] = {**base, "params": rendered_params, "steps": {}}
        for step in playbook.steps:
            if skip and step.id in skip:
                spec = self.registry.get(step.uses)
                out = self._end(step, spec.kind.value if spec else "control", "skipped", skip[step.id], {},
                                self.clock.now(), started=False, not_started="skip")
            else:
                out = self._run_step(playbook, step, context, rendered_params, actions)
            steps.append(out)
            context["steps"][step.id] = {"outcome": out.status, "summary": out.summary, "result": out.result}
            if step.uses == "flow.escalate" and out.status == "ok":
                escalated = True
            if out.status == "proposed":
                # What follows a proposed change assumes it was made: wait for the human's approval.
                outcome, reason = "proposed", out.summary
                break
            if out.status not in ("refused", "failed") or step.on_fail == "continue":
                continue
            if out.status == "refused":
                outcome, reason = "refused", out.summary
                if step.on_fail == "escalate":
                    self._escalate(step, f"{step.id} refused: {out.summary}")
                break
            if step.on_fail == "rollback":
                self._rollback(step, actions)
                self._escalate(step, f"{step.id} failed and the run rolled back: {out.summary}")
                outcome, reason = "rolled_back", out.summary
            elif step.on_fail == "escalate":
                self._escalate(step, f"{step.id} failed: {out.summary}")
                outcome, reason = "escalated", out.summary
            else:
                outcome, reason = "failed", out.summary
            break
        else:
            if escalated:
                outcome, reason = "escalated", "the playbook escalated to a human"
            elif self.dry_run:
                outcome, reason = "dry_run", "dry run: diagnostics ran, nothing was applied"
        return self._finish(playbook, outcome, reason, steps, actions)

    def _finish(self, playbook: Playbook, outcome: str, reason: str, steps: list[StepOutcome],
                actions: list[AppliedAction]) -> RunResult:
        self._record_signal_history()
        self._record(ev.RUN_FINISHED, self.clock.now(), data={
            "outcome": outcome, "reason": reason, "dry_run": self.dry_run,
            "steps": {s.id: s.status for s in steps},
            "applied": sum(1 for a in actions if a.applied)})
        return RunResult(self.journal.incident, self.journal.run, playbook.name, outcome, reason,
                         tuple(steps), tuple(actions))

    def _record(self, type: str, at: dt.datetime, *, step: str | None = None,
                data: dict[str, Any] | None = None) -> ev.Event:
        return self.journal.record(type, at=at, step=step, data=data)

    # -- one step --------------------------------------------------------------------------

    def _run_step(self, playbook: Playbook, step: Step, context: dict[str, Any], params: Mapping[str, Any],
                  actions: list[AppliedAction]) -> StepOutcome:
        now = self.clock.now()
        spec = self.registry.get(step.uses)
        if spec is None:
            return self._end(step, "control", "failed", f"no action named {step.uses!r}", {}, now)
        kind = spec.kind.value
        if step.when is not None:
            try:
                go = templating.truthy(step.when, context)
            except InvalidInput as exc:
                self._record(ev.STEP_STARTED, now, step=step.id, data={"uses": step.uses, "kind": kind})
                return self._end(step, kind, "failed", f"`when` could not be evaluated: {exc}", {}, now)
            if not go:
                return self._end(step, kind, "skipped", f"`when` is false: {step.when}", {}, now, started=False)
        self._record(ev.STEP_STARTED, now, step=step.id, data={"uses": step.uses, "kind": kind,
                                                                 "name": step.name or ""})
        try:
            raw = templating.render_value(step.with_, context)
            action_params = spec.params.model_validate(raw)
        except InvalidInput as exc:
            return self._end(step, kind, "failed", str(exc), {}, now)
        except pydantic.ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'with'}: {e['msg']}" for e in exc.errors())
            return self._end(step, kind, "failed", f"params after templating are invalid: {problems}", {}, now)
        self._remember_signal(action_params)
        ctx = StepContext(world=self.world, clock=self.clock, now=now, step_id=step.id, params=params,
                          dry_run=self.dry_run, timeout=step.timeout or self.default_timeout,
                          record_evidence=lambda e: self._evidence(step, e), pool_size=self.pool_size)
        if spec.kind is Kind.REMEDIATION:
            return self._remediate(playbook, step, spec.name, ctx, action_params, context, actions)
        if self.dry_run and step.uses in DRY_RUN_SKIPS:
            return self._end(step, kind, "skipped", DRY_RUN_SKIPS[step.uses], {}, now)
        try:
            result: ActionResult = spec.func(ctx, action_params)
        except RunbookError as exc:
            return self._end(step, kind, "failed", str(exc), {"error": type(exc).__name__}, now)
        if step.uses == "flow.verify":
            self._record(ev.VERIFY_PASSED if result.status == "ok" else ev.VERIFY_FAILED, self.clock.now(),
                         step=step.id, data={"summary": result.summary, **result.result})
        elif step.uses == "flow.note":
            self._record(ev.NOTE, now, step=step.id, data={"message": result.summary})
        elif step.uses == "flow.escalate":
            self._record(ev.ESCALATED, now, step=step.id, data={"reason": result.summary, **result.result})
        return self._end(step, kind, result.status, result.summary, result.result, now)

    def _remember_signal(self, action_params: Any) -> None:
        signal = getattr(action_params, "signal", None)
        if isinstance(signal, str):
            labels = dict(getattr(action_params, "labels", {}) or {})
            by = tuple(getattr(action_params, "by", ()) or ())
            known = self._signals.get(signal)
            # Keep the most detailed view asked for: a per-pod chart says more than a total.
            if known is None or (by and not known[1]):
                self._signals[signal] = (labels, by)

    def _record_signal_history(self) -> None:
        """Each signal the run read, over the incident and as long again before it: the report's charts."""
        metrics = self.world.metrics
        if metrics is None or not getattr(self, "_signals", None):
            return
        end = self.clock.now()
        span = max(HISTORY_CONTEXT_SECONDS, (end - self._started_at).total_seconds())
        begin = self._started_at - dt.timedelta(seconds=span)
        step = float(max(1, math.ceil((end - begin).total_seconds() / HISTORY_POINTS)))
        for signal, (labels, by) in sorted(self._signals.items()):
            data: dict[str, Any] = {"kind": "series", "title": f"{signal} around the incident", "signal": signal,
                                    "labels": labels, "by": list(by), "start": begin, "end": end, "step": step}
            try:
                series = metrics.query_range(signal, start=begin, end=end, step_seconds=step, labels=labels, by=by)
            except BackendError as exc:
                data["error"] = str(exc)
                series = []
            data["series"] = [{"labels": dict(s.labels), "points": [[t, v] for t, v in s.points]} for s in series]
            self._record(ev.EVIDENCE, end, data=data)

    def _evidence(self, step: Step, evidence: Evidence) -> None:
        self._record(ev.EVIDENCE, self.clock.now(), step=step.id,
                     data={"kind": evidence.kind, "title": evidence.title, **evidence.data})

    def _end(self, step: Step, kind: str, status: str, summary: str, result: dict[str, Any], now: dt.datetime,
             *, started: bool = True, guard: str | None = None, not_started: str = "when") -> StepOutcome:
        data: dict[str, Any] = {"status": status, "summary": summary, "uses": step.uses, "kind": kind}
        if guard:
            data["guard"] = guard
        if not started:
            data["reason"] = not_started
        self._record(ev.STEP_FINISHED, self.clock.now(), step=step.id, data=data)
        return StepOutcome(step.id, step.uses, kind, status, summary, result, guard)

    # -- remediation -----------------------------------------------------------------------

    def _remediate(self, playbook: Playbook, step: Step, action: str, ctx: StepContext, params: Any,
                   context: dict[str, Any], actions: list[AppliedAction]) -> StepOutcome:
        now, kind = ctx.now, "remediation"
        guard = step.guard or Guard()

        def refuse(guard_name: str, reason: str, plan: Plan | None = None) -> StepOutcome:
            self._record(ev.GUARD_REFUSED, now, step=step.id, data={
                "guard": guard_name, "reason": reason, "action": action,
                "target": plan.target if plan else None})
            return self._end(step, kind, "refused", f"guard {guard_name}: {reason}",
                             {"guard": guard_name, "reason": reason}, now, guard=guard_name)

        switched_off = self.kill_switch()
        if switched_off:
            return refuse("kill_switch", switched_off)
        spec = self.registry.get(action)
        try:
            plan: Plan = spec.func(ctx, params)  # type: ignore[union-attr]
        except BackendUnavailable as exc:
            return refuse("blind", f"cannot see the target to plan the change: {exc}")
        except RunbookError as exc:
            return self._end(step, kind, "failed", f"planning failed: {exc}", {"error": type(exc).__name__}, now)
        plan_data = {"action": action, "target": plan.target, "summary": plan.summary, "before": plan.before,
                     "after": plan.after, "diff": plan.diff(), "reversible": plan.rollback is not None,
                     "dry_run": self.dry_run}
        self._record(ev.ACTION_PLANNED, now, step=step.id, data=plan_data)
        result_view = {"target": plan.target, "before": plan.before, "after": plan.after, "applied": False}
        if plan.noop and plan.refusal is None:
            self._record(ev.ACTION_SKIPPED, now, step=step.id, data={"reason": "already in the desired state",
                                                                     "target": plan.target})
            return self._end(step, kind, "ok", f"{plan.target} already as wanted: {plan.summary}", result_view, now)

        def applications(which: str | None, since: dt.datetime) -> list[dt.datetime]:
            return self.history.applications(plan.target, since=since, action=which)

        verdicts = guards.hard_guards(plan, guard, action=action, now=now, applications=applications)
        refused = next((v for v in verdicts if not v.allowed), None)
        if refused is not None:
            return refuse(refused.guard, refused.reason, plan)
        try:
            lock = self.locks.hold(plan.target, holder=f"{self.holder} incident {self.journal.incident}") \
                if guard.lock and not self.dry_run else _null_lock()
            with lock:
                passed = [{"guard": v.guard, "reason": v.reason} for v in verdicts]
                if guard.lock and not self.dry_run:
                    passed.append({"guard": "lock", "reason": f"holding the lock on {plan.target}"})
                recheck = self._recheck(playbook, guard, context)
                if recheck is not None and not recheck[0]:
                    if recheck[1] == "cleared":
                        self._record(ev.ACTION_SKIPPED, now, step=step.id,
                                     data={"reason": recheck[2], "target": plan.target})
                        return self._end(step, kind, "skipped", recheck[2], result_view, now)
                    return refuse("recheck", recheck[2], plan)
                if recheck is not None:
                    passed.append({"guard": "recheck", "reason": recheck[2]})
                try:
                    plan.apply(True)  # server-side dry run: the change is valid as planned
                except Refused:
                    raise  # e.g. a PodDisruptionBudget said no: a guard refusal, not a failure
                except BackendUnavailable as exc:
                    return refuse("blind", f"the dry run of the change could not reach the target: {exc}", plan)
                except RunbookError as exc:
                    return self._end(step, kind, "failed", f"the dry run of the change failed: {exc}",
                                     result_view, now)
                if plan.server_dry_run:
                    passed.append({"guard": "dry_run", "reason": "the change was accepted in a dry run against the target"})
                self._record(ev.GUARD_PASSED, now, step=step.id, data={"guards": passed, "target": plan.target})
                if self.dry_run:
                    actions.append(AppliedAction(step.id, action, plan.target, plan.before, plan.after, "", False))
                    return self._end(step, kind, "would_change", f"would {plan.summary}", result_view, now)
                by = ""
                if guard.confirm:
                    answer = self.operator.confirm(ConfirmRequest(self.journal.incident, step.id, action, plan.target,
                                                                  plan.summary, tuple(plan.diff())))
                    if isinstance(answer, Proposed):
                        self._record(ACTION_PROPOSED, self.clock.now(), step=step.id,
                                     data={**plan_data, "by": answer.by, "reason": answer.reason})
                        return self._end(step, kind, "proposed", f"proposed: {plan.summary} ({answer.reason})",
                                         result_view, now)
                    if not answer.approved:
                        return refuse("confirm", f"{answer.reason} (asked {answer.by})", plan)
                    by = answer.by
                    self._record(ev.ACTION_CONFIRMED, self.clock.now(), step=step.id,
                                 data={"by": by, "how": answer.reason or "prompt", "target": plan.target})
                else:
                    by = "policy (confirm: false)"
                applied_at = self.clock.now()
                try:
                    outcome = plan.apply(False)
                except BackendError as exc:
                    self._record(ev.ACTION_FAILED, applied_at, step=step.id,
                                 data={"action": action, "target": plan.target, "error": str(exc)})
                    return self._end(step, kind, "failed", f"applying failed: {exc}", result_view, now)
                self._record(ev.ACTION_APPLIED, applied_at, step=step.id, data={
                    "action": action, "target": plan.target, "summary": plan.summary, "before": plan.before,
                    "after": plan.after, "by": by, "result": outcome})
                actions.append(AppliedAction(step.id, action, plan.target, plan.before, plan.after, by, True,
                                             plan.rollback))
                return self._end(step, kind, "changed", plan.summary, {**result_view, "applied": True,
                                                                       "outcome": outcome}, now)
        except Refused as exc:
            return refuse(exc.guard, exc.reason, plan)

    def _recheck(self, playbook: Playbook, guard: Guard, context: dict[str, Any]) -> tuple[bool, str, str] | None:
        """(holds, kind, why) for the playbook's detect condition, or None when there is none."""
        detect = playbook.detect
        if detect is None or not guard.recheck:
            return None
        if self.world.metrics is None:
            return False, "blind", f"no metrics backend to re-check {detect.describe()}; refusing to act blind"
        try:
            labels = templating.render_value(dict(detect.labels), context)
            samples = self.world.metrics.query(detect.signal, at=self.clock.now(), labels=labels)
        except BackendError as exc:
            return False, "blind", f"cannot re-check {detect.describe()}: {exc}; refusing to act blind"
        except InvalidInput as exc:
            return False, "blind", f"cannot re-check {detect.describe()}: {exc}"
        if not samples:
            return False, "blind", f"no data for {detect.signal} to re-check {detect.describe()}; refusing to act blind"
        value = max(s.value for s in samples) if detect.above is not None else min(s.value for s in samples)
        if detect.holds(value):
            return True, "holds", f"{detect.describe()} still holds (now {value:g})"
        return False, "cleared", f"{detect.describe()} no longer holds (now {value:g}); nothing to do"

    # -- failure handling ------------------------------------------------------------------

    def _rollback(self, step: Step, actions: list[AppliedAction]) -> None:
        for applied in reversed([a for a in actions if a.applied]):
            now = self.clock.now()
            if applied.rollback is None:
                self._record(ev.NOTE, now, step=applied.step,
                             data={"message": f"{applied.action} on {applied.target} cannot be rolled back"})
                continue
            try:
                restored = applied.rollback()
            except RunbookError as exc:
                self._record(ev.ROLLBACK_FAILED, now, step=applied.step,
                             data={"action": applied.action, "target": applied.target, "error": str(exc)})
                continue
            self._record(ev.ROLLBACK_APPLIED, now, step=applied.step, data={
                "action": applied.action, "target": applied.target, "restored": applied.before,
                "from": applied.after, "result": restored, "because": step.id})

    def _escalate(self, step: Step, reason: str) -> None:
        self._record(ev.ESCALATED, self.clock.now(), step=step.id, data={"reason": reason})


class _null_lock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
