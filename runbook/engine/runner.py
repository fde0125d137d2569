"""`Engine.run`: one playbook, step by step, every decision journaled before it takes effect.

Remediations go plan → hard guards → lock → re-check → server-side dry run → confirm → apply;
a failed step's `on_fail` decides between stopping, going on, rolling back and escalating.
Pure orchestration: the world, the clock, the operator, the locks and the journal are injected.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime as dt
import getpass
import math
from collections.abc import Callable, Collection, Mapping
from typing import Any

import pydantic

from runbook.record import redaction
from runbook.text import templating
from runbook.actions.base import ActionResult, Capacity, Evidence, Plan, StepContext
from runbook.backends.base import World
from runbook.clock import Clock
from runbook.engine import guards, namespaces
from runbook.engine.operator import Confirmation, ConfirmRequest, Operator
from runbook.errors import (BackendError, BackendUnavailable, Conflict, InvalidInput, JournalError, NotFound, Refused,
                            RunbookError, StalePlan)
from runbook.record.journal import Application, History, Journal
from runbook.record.locks import Locks
from runbook.model import events as ev
from runbook.model.alert import Alert
from runbook.model.playbook import Guard, Playbook, Step
from runbook.model.registry import Kind, Registry

HISTORY_CONTEXT_SECONDS = 900.0  # at least 15 minutes of context before the alert
HISTORY_POINTS = 120
HISTORY_QUERIES_AT_ONCE = 4  # the run's end: each chart's range query, this many in flight
HISTORY_ONSET_LOOKBACK = dt.timedelta(hours=1)  # how far before the run the history may start, for an old alert

# In a dry run nothing changed, so there is nothing to verify and no one to hand a change to.
DRY_RUN_SKIPS = {"flow.verify": "dry run: nothing was applied, so there is nothing to verify",
                 "flow.escalate": "dry run: would escalate here"}

OUTCOME_EXIT = {"resolved": 0, "dry_run": 0, "refused": 4, "failed": 1, "rolled_back": 1, "escalated": 1,
                "proposed": 4, "interrupted": 130, "mitigated": 5}

# How often a change whose target moved under it is planned again (and its guards re-run) before refusing.
REPLANS = 3

# An apply that raised one of these did not change the target; anything else may have.
NOT_APPLIED = (Refused, InvalidInput, NotFound, Conflict)

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
    rolled_back: bool = False

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
                 default_timeout: float = 30.0, pool_size: int = 16,
                 interrupted: Callable[[], str | None] = lambda: None,
                 namespaces: Collection[str] | None = None,
                 progress: Callable[[str, dict[str, Any]], None] | None = None):
        """`pool_size`: how many per-pod/per-node calls of one step run at once (StepContext.pool_size).

        `interrupted()`: why the run must stop (SIGINT, SIGTERM), or None; checked before each step
        and each apply. `namespaces`: where changes may be made (None: the playbook's own `namespace`).
        `progress(step, update)`: a step's live readings (a verify's value and countdown), for a view only.
        """
        self.registry, self.world, self.clock, self.journal = registry, world, clock, journal
        self.operator, self.locks, self.history = operator, locks, history
        self.dry_run, self.kill_switch, self.holder = dry_run, kill_switch, holder
        self.default_timeout = default_timeout
        self.pool_size = pool_size
        self.interrupted = interrupted
        self.namespaces = namespaces
        self.progress = progress

    # -- the run ---------------------------------------------------------------------------

    def run(self, playbook: Playbook, *, alert: Alert | None = None, params: Mapping[str, Any] | None = None,
            record_alert: bool = True, skip: Mapping[str, str] | None = None) -> RunResult:
        """Run every step; whatever is raised, the journal ends with `run.finished`.

        `params` come from outside (alert labels, `-p`): they are data, never rendered as templates.
        `skip`: step id → why it is not run this time (e.g. applied by an earlier run of the incident).
        """
        now = self.clock.now()
        if alert is not None and record_alert:
            self._record(ev.ALERT_RECEIVED, now, data=alert.to_json())
        given = dict(params or {})
        merged = {**playbook.params, **given}
        base = {"alert": alert.template_view() if alert else {"labels": {}, "annotations": {}, "name": "", "source": "manual"},
                "incident": {"id": self.journal.incident}}
        self._record(ev.RUN_STARTED, now, data={"playbook": playbook.name, "title": playbook.title,
                                                 "severity": playbook.severity, "dry_run": self.dry_run,
                                                 "params": merged, "holder": self.holder,
                                                 "root_cause_hints": list(playbook.rca.root_cause_hints),
                                                 "improvements": playbook.rca.improvements.model_dump(mode="json")})
        self._started_at = now
        self._signals: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {}
        self._allowed_namespaces = namespaces.allowed_namespaces(
            playbook.params, self.namespaces, literal=namespaces.playbook_literals(playbook.steps))
        if playbook.detect is not None:
            self._signals[playbook.detect.signal] = ({}, ())
        # The detect condition as the alert reads it (labels rendered once params are): the report's onset.
        self._detect_view: tuple[str, dict[str, str], dict[str, Any]] | None = None
        # The condition held `for` before the alert began firing: the history starts before that.
        since = alert.starts_at if alert is not None else None
        self._onset_bound = (max(since - dt.timedelta(seconds=playbook.detect.for_), now - HISTORY_ONSET_LOOKBACK)
                             if since is not None and since.tzinfo is not None and playbook.detect else now)
        steps: list[StepOutcome] = []
        actions: list[AppliedAction] = []
        try:
            outcome, reason = self._run_steps(playbook, base, merged, given, skip, steps, actions)
        except JournalError:
            raise  # nothing more can be recorded; the caller reports it
        except BaseException as exc:  # noqa: BLE001 - the journal must end with an outcome whatever happened
            interrupted = not isinstance(exc, Exception)
            why = (f"interrupted ({type(exc).__name__})" if interrupted
                   else f"internal error: {type(exc).__name__}: {exc}")
            self._rollback_after(why, actions)
            self._finish(playbook, "interrupted" if interrupted else "failed", why, steps, actions)
            if interrupted:
                raise
            return RunResult(self.journal.incident, self.journal.run, playbook.name, "failed", why,
                             tuple(steps), tuple(actions))
        if outcome == "resolved":
            outcome, reason = self._capacity_left(outcome, reason)
        return self._finish(playbook, outcome, reason, steps, actions)

    def _capacity_left(self, outcome: str, reason: str) -> tuple[str, str]:
        """A run whose steps all finished but that leaves a workload with fewer replicas than the incident
        began with has mitigated it, not resolved it: say so, how far short, and how to put it back.

        Read from the incident's whole journal, so that a change an earlier run of it applied (one
        recovered after a crash, or proposed there and approved in this one) counts as well."""
        began: dict[str, dict[str, Any]] = {}
        left: dict[str, tuple[int, str | None]] = {}
        by_step: dict[tuple[str, str | None], dict[str, Any]] = {}
        for event in self.journal.events():
            capacity = event.data.get("capacity") if event.type in (ev.ACTION_APPLIED, ev.ACTION_UNKNOWN) else None
            if isinstance(capacity, dict):
                began.setdefault(capacity["target"], capacity)
                left[capacity["target"]] = (capacity["after"], capacity.get("stopped"))
                by_step[(event.run, event.step)] = capacity
            elif event.type == ev.ROLLBACK_APPLIED and (event.run, event.step) in by_step:
                undone = by_step[(event.run, event.step)]
                left[undone["target"]] = (undone["before"], None)
        short = [(began[t], left[t]) for t in began if left[t][0] < began[t]["before"]]
        if not short:
            return outcome, reason
        told = "; ".join(f"{c['target']} serves {now} of its {c['before']} replicas"
                         + (f" (its restore stopped {stopped})" if stopped else "") for c, (now, stopped) in short)
        commands = [command for c, _ in short for command in c.get("restore", ())]
        why = (f"capacity reduced: {told}. To restore it when it is safe: " + " && ".join(commands)) if commands else \
            f"capacity reduced: {told}"
        self._record(ev.ESCALATED, self.clock.now(), data={
            "reason": why, "capacity": [{"target": c["target"], "before": c["before"], "now": now,
                                         "restore": list(c.get("restore", ()))} for c, (now, _) in short]})
        return "mitigated", why

    def _run_steps(self, playbook: Playbook, base: dict[str, Any], merged: dict[str, Any], given: dict[str, Any],
                   skip: Mapping[str, str] | None, steps: list[StepOutcome],
                   actions: list[AppliedAction]) -> tuple[str, str]:
        try:
            # Only the playbook's own defaults are templates; values from outside are taken as they are.
            defaults = {k: v for k, v in playbook.params.items() if k not in given}
            rendered_params = {**templating.render_value(defaults, base), **given}
        except InvalidInput as exc:
            return "failed", f"params: {exc}"
        unset = [k for k, v in rendered_params.items() if v is None]  # `node: null`: no default, must be given
        if unset:
            return "failed", "params: " + "; ".join(
                f"{k} has no value, and playbook {playbook.name} gives it no default: pass -p {k}=…, or start it "
                f"from an alert that carries the label {playbook.match.labels.get(k, k)}" for k in unset)
        context: dict[str, Any] = {**base, "params": rendered_params, "steps": {}}
        detect = playbook.detect
        if detect is not None:
            try:
                labels = templating.render_value(dict(detect.labels), context)
                self._detect_view = (detect.signal, {str(k): str(v) for k, v in labels.items()},
                                     {"condition": detect.describe(), "above": detect.above, "below": detect.below,
                                      "for": detect.for_})
            except InvalidInput:
                pass  # the re-check before each change says so; the report goes without an onset
        escalated = False
        for step in playbook.steps:
            stop = self.interrupted()
            if stop:
                self._rollback_after(stop, actions)
                return "interrupted", f"stopped before step {step.id}: {stop}"
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
                return "proposed", out.summary
            if out.guard == "interrupted" or (out.status == "failed" and out.result.get("interrupted")):
                self._rollback_after(out.summary, actions)
                return "interrupted", out.summary
            if out.status not in ("refused", "failed") or step.on_fail == "continue":
                continue
            if out.status == "refused":
                if step.on_fail == "escalate":
                    self._escalate(step, f"{step.id} refused: {out.summary}")
                return "refused", out.summary
            if step.on_fail == "rollback":
                self._rollback(step, actions)
                self._escalate(step, f"{step.id} failed and the run rolled back: {out.summary}")
                return "rolled_back", out.summary
            if step.on_fail == "escalate":
                self._escalate(step, f"{step.id} failed: {out.summary}")
                return "escalated", out.summary
            return "failed", out.summary
        if escalated:
            return "escalated", "the playbook escalated to a human"
        if self.dry_run:
            return "dry_run", "dry run: diagnostics ran, nothing was applied"
        return "resolved", "every step finished"

    def _rollback_after(self, why: str, actions: list[AppliedAction]) -> None:
        """A run stopped between a change and its verification: undo what it applied, and say so."""
        applied = [a for a in actions if a.applied and not a.rolled_back]
        if not applied:
            return
        self._record(ev.NOTE, self.clock.now(), data={"message": f"the run stopped ({why}) after changing "
                                                                  f"{', '.join(a.target for a in applied)}; "
                                                                  "rolling back what it applied"})
        self._rollback_actions(why, actions)
        self._record(ev.ESCALATED, self.clock.now(), data={"reason": f"the run stopped ({why}) before it could "
                                                                      "verify its changes; they were rolled back "
                                                                      "where possible"})

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
                return self._end(step, kind, "skipped", f"`when` is false: `{step.when}`", {}, now, started=False)
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
                          record_evidence=lambda e: self._evidence(step, e), pool_size=self.pool_size,
                          interrupted=self.interrupted, progress=self._progress_of(step.id))
        if spec.kind is Kind.REMEDIATION:
            return self._remediate(playbook, step, spec.name, ctx, action_params, context, actions)
        if self.dry_run and step.uses in DRY_RUN_SKIPS:
            return self._end(step, kind, "skipped", DRY_RUN_SKIPS[step.uses], {}, now)
        try:
            result: ActionResult = spec.func(ctx, action_params)
        except RunbookError as exc:
            return self._end(step, kind, "failed", str(exc), {"error": type(exc).__name__}, now)
        except Exception as exc:  # noqa: BLE001 - a bug or a malformed answer fails the step, journaled
            return self._end(step, kind, "failed", f"internal error in {step.uses}: {type(exc).__name__}: {exc}",
                             {"error": type(exc).__name__}, now)
        if step.uses == "flow.verify":
            self._record(ev.VERIFY_PASSED if result.status == "ok" else ev.VERIFY_FAILED, self.clock.now(),
                         step=step.id, data={"summary": result.summary, **result.result})
        elif step.uses == "flow.note":
            self._record(ev.NOTE, now, step=step.id, data={"message": result.summary})
        elif step.uses == "flow.escalate":
            self._record(ev.ESCALATED, now, step=step.id, data={"reason": result.summary, **result.result})
        return self._end(step, kind, result.status, result.summary, result.result, now)

    def _progress_of(self, step_id: str) -> Callable[[dict[str, Any]], None]:
        def tell(update: dict[str, Any]) -> None:
            if self.progress is not None:
                self.progress(step_id, update)

        return tell

    def _remember_signal(self, action_params: Any) -> None:
        """Note the metric signals a step read, for the report's charts.

        Only fields the params model declares as metric signals: a kill's `signal: KILL` is a Unix signal.
        """
        for field in type(action_params).signal_fields():
            signal = getattr(action_params, field, None)
            if not isinstance(signal, str):
                continue
            labels = dict(getattr(action_params, "labels", {}) or {})
            by = tuple(getattr(action_params, "by", ()) or ())
            known = self._signals.get(signal)
            # Keep the most detailed view asked for: a per-pod chart says more than a total.
            if known is None or (by and not known[1]):
                self._signals[signal] = (labels, by)

    def _record_signal_history(self) -> None:
        """Each signal the run read, over the incident and as long again before it: the report's charts.

        The detect condition's signal is recorded as the alert reads it, with the condition: the report
        finds there when the condition began to hold and when it cleared."""
        metrics = self.world.metrics
        if metrics is None or not getattr(self, "_signals", None):
            return
        end = self.clock.now()
        first = min(self._started_at, getattr(self, "_onset_bound", self._started_at))
        span = max(HISTORY_CONTEXT_SECONDS, (end - first).total_seconds())
        begin = first - dt.timedelta(seconds=span)
        step = float(max(1, math.ceil((end - begin).total_seconds() / HISTORY_POINTS)))
        view = getattr(self, "_detect_view", None)
        wanted = [(signal, labels, by, None) for signal, (labels, by) in sorted(self._signals.items())
                  if view is None or signal != view[0] or by]  # the detect's own view says the rest
        asked = wanted + ([(view[0], view[1], (), view[2])] if view else [])

        def read(signal: str, labels: dict, by: tuple) -> tuple[list, str | None]:
            try:
                return metrics.query_range(signal, start=begin, end=end, step_seconds=step, labels=labels, by=by), None
            except Exception as exc:  # noqa: BLE001 - a chart that cannot be drawn never hides the outcome
                return [], str(exc) if isinstance(exc, RunbookError) else f"{type(exc).__name__}: {exc}"

        # The queries go out together (Prometheus answers them in parallel); the journal gets them
        # in the order asked, whatever order they come back in.
        if len(asked) > 1:
            with concurrent.futures.ThreadPoolExecutor(max_workers=min(HISTORY_QUERIES_AT_ONCE, len(asked)),
                                                       thread_name_prefix="runbook-history") as pool:
                answers = list(pool.map(lambda one: read(one[0], one[1], one[2]), asked))
        else:
            answers = [read(signal, labels, by) for signal, labels, by, _ in asked]
        stamps: dict[Any, str] = {}
        for (signal, labels, by, detect), (series, error) in zip(asked, answers):
            data: dict[str, Any] = {"kind": "series", "title": f"{signal} around the incident", "signal": signal,
                                    "labels": labels, "by": list(by), "start": begin, "end": end, "step": step}
            if detect is not None:
                data.update(title=f"{signal} as the alert reads it", detect=detect)
            if error is not None:
                data["error"] = error
            data["series"] = [{"labels": dict(s.labels), "points": _points(stamps, s.points)} for s in series]
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
        """Plan, guard, lock, re-check, dry-run, confirm and apply one change, exactly as planned.

        The apply is conditional on the plan's baseline; when the target moved under it (`StalePlan`)
        the change is planned again and every guard re-run, at most `REPLANS` times. Guards that
        read history run under the target's lock, and a lock lost on the way aborts the change.
        """
        now, kind = ctx.now, "remediation"
        guard = step.guard or Guard()
        spec = self.registry.get(action)

        def refuse(guard_name: str, reason: str, plan: Plan | None = None) -> StepOutcome:
            self._record(ev.GUARD_REFUSED, self.clock.now(), step=step.id, data={
                "guard": guard_name, "reason": reason, "action": action,
                "target": plan.target if plan else None})
            return self._end(step, kind, "refused", f"guard {guard_name}: {reason}",
                             {"guard": guard_name, "reason": reason}, now, guard=guard_name)

        def make_plan(because: str | None = None) -> Plan | StepOutcome:
            """A plan from a fresh read, journaled; or the step's end when none can be made."""
            try:
                plan = spec.func(dataclasses.replace(ctx, now=self.clock.now()), params)  # type: ignore[union-attr]
            except BackendUnavailable as exc:
                return refuse("blind", f"cannot see the target to plan the change: {exc}")
            except RunbookError as exc:
                return self._end(step, kind, "failed", f"planning failed: {exc}", {"error": type(exc).__name__}, now)
            except Exception as exc:  # noqa: BLE001 - nothing was changed yet: a failed step, journaled
                return self._end(step, kind, "failed", f"planning failed: {type(exc).__name__}: {exc}",
                                 {"error": type(exc).__name__}, now)
            data = {"action": action, "target": plan.target, "summary": plan.summary, "before": plan.before,
                    "after": plan.after, "diff": plan.diff(), "reversible": plan.rollback is not None,
                    "dry_run": self.dry_run, **_capacity_data(plan.capacity)}
            if because:
                data["replanned_because"] = because
            self._record(ev.ACTION_PLANNED, self.clock.now(), step=step.id, data=data)
            return plan

        def view(plan: Plan) -> dict[str, Any]:
            return {"target": plan.target, "before": plan.before, "after": plan.after, "applied": False}

        def checked(plan: Plan) -> StepOutcome | list[guards.Verdict]:
            """The guards that read only the plan (and the namespace allow-list): the verdicts, or the refusal."""
            if plan.noop and plan.refusal is None:
                self._record(ev.ACTION_SKIPPED, self.clock.now(), step=step.id,
                             data={"reason": "already in the desired state", "target": plan.target})
                return self._end(step, kind, "ok", f"{plan.target} already as wanted: {plan.summary}", view(plan), now)
            if plan.namespace is not None:
                try:
                    namespaces.check_namespace(plan.namespace, self._allowed_namespaces, source=f"step {step.id}")
                except Refused as exc:
                    return refuse(exc.guard, exc.reason, plan)
            verdicts = guards.plan_guards(plan, guard)
            refused = next((v for v in verdicts if not v.allowed), None)
            return refuse(refused.guard, refused.reason, plan) if refused is not None else verdicts

        switched_off = self.kill_switch()
        if switched_off:
            return refuse("kill_switch", switched_off)
        plan = make_plan()
        if isinstance(plan, StepOutcome):
            return plan
        first = checked(plan)
        if isinstance(first, StepOutcome):
            return first
        locking = guard.lock and not self.dry_run
        try:
            lock = self.locks.hold(plan.target, holder=f"{self.holder} incident {self.journal.incident}",
                                   namespace=plan.namespace) if locking else _null_lock()
            with lock as held:
                confirmed_diff: list[str] | None = None
                by, because = "", ""
                verdicts = first
                for attempt in range(REPLANS + 1):
                    if attempt:
                        replanned = make_plan(because)
                        if isinstance(replanned, StepOutcome):
                            return replanned
                        if replanned.target != plan.target:
                            return refuse("stale_plan", f"the change now targets {replanned.target}, not "
                                                        f"{plan.target} whose lock is held; re-run", replanned)
                        plan = replanned
                        verdicts = checked(plan)
                        if isinstance(verdicts, StepOutcome):
                            return verdicts
                    outcome = self._guard_and_apply(playbook, step, action, plan, guard, context, actions, verdicts,
                                                    held, locking, refuse, view, confirmed_diff, by, now)
                    if isinstance(outcome, StepOutcome):
                        return outcome
                    because, confirmed_diff, by = outcome
                return refuse("stale_plan", f"{plan.target} kept changing while the change was being made "
                                            f"({REPLANS + 1} plans, the last: {because}); nothing was applied",
                              plan)
        except Refused as exc:
            return refuse(exc.guard, exc.reason, plan)

    def _guard_and_apply(self, playbook: Playbook, step: Step, action: str, plan: Plan, guard: Guard,
                         context: dict[str, Any], actions: list[AppliedAction], verdicts: list[guards.Verdict],
                         held: Any, locking: bool, refuse: Callable[..., StepOutcome],
                         view: Callable[[Plan], dict[str, Any]], confirmed_diff: list[str] | None, by: str,
                         now: dt.datetime) -> StepOutcome | tuple[str, list[str] | None, str]:
        """One try under the lock: history guards, re-check, dry run, confirm, apply.

        Returns the step's end, or (why the plan went stale, the diff confirmed so far, by whom).
        """
        kind = "remediation"
        at = self.clock.now()

        def applications(which: str | None, since: dt.datetime) -> list[Application]:
            return self.history.records(plan.target, since=since, action=which, namespace=plan.namespace)

        try:
            later = guards.history_guards(plan, guard, action=action, now=at, applications=applications)
        except BackendError as exc:
            return refuse("history", f"cannot read what was applied to {plan.target} before ({exc}); refusing "
                                     "to act without the cooldown and budget", plan)
        refused = next((v for v in later if not v.allowed), None)
        if refused is not None:
            return refuse(refused.guard, refused.reason, plan)
        passed = [{"guard": v.guard, "reason": v.reason} for v in [*verdicts, *later]]
        if locking:
            passed.append({"guard": "lock", "reason": f"holding the lock on {plan.target}"})
        recheck = self._recheck(playbook, guard, context)
        if recheck is not None and not recheck[0]:
            if recheck[1] == "cleared":
                self._record(ev.ACTION_SKIPPED, self.clock.now(), step=step.id,
                             data={"reason": recheck[2], "target": plan.target})
                return self._end(step, kind, "skipped", recheck[2], view(plan), now)
            return refuse("recheck", recheck[2], plan)
        if recheck is not None:
            passed.append({"guard": "recheck", "reason": recheck[2]})
        try:
            plan.apply(True)  # server-side dry run: the change is valid as planned
        except StalePlan as exc:
            return str(exc), confirmed_diff, by
        except Refused:
            raise  # e.g. a PodDisruptionBudget said no: a guard refusal, not a failure
        except BackendUnavailable as exc:
            return refuse("blind", f"the dry run of the change could not reach the target: {exc}", plan)
        except RunbookError as exc:
            return self._end(step, kind, "failed", f"the dry run of the change failed: {exc}", view(plan), now)
        except Exception as exc:  # noqa: BLE001 - a dry run changes nothing: a failed step, journaled
            return self._end(step, kind, "failed", f"the dry run of the change failed: {type(exc).__name__}: {exc}",
                             view(plan), now)
        if plan.server_dry_run:
            passed.append({"guard": "dry_run", "reason": "the change was accepted in a dry run against the target"})
        self._record(ev.GUARD_PASSED, self.clock.now(), step=step.id, data={"guards": passed, "target": plan.target})
        if self.dry_run:
            actions.append(AppliedAction(step.id, action, plan.target, plan.before, plan.after, "", False))
            return self._end(step, kind, "would_change", f"would {plan.summary}", view(plan), now)
        diff = plan.diff()
        needs_person = not guard.unattended
        if not guard.confirm and not needs_person:
            by = "policy (confirm: false)"
            # Journaled as a yes before the apply: a run killed before its result is written leaves
            # the change in doubt, and the history counts a confirmation nothing settled as applied.
            self._record(ev.ACTION_CONFIRMED, self.clock.now(), step=step.id,
                         data={"by": by, "how": "not asked", "target": plan.target, "action": action})
        elif diff != confirmed_diff:
            # Asked again when a re-plan changed what would be done: the answer was to another diff.
            answer = self.operator.confirm(ConfirmRequest(self.journal.incident, step.id, action, plan.target,
                                                          plan.summary, tuple(diff), needs_person=needs_person))
            if needs_person and answer.approved and not answer.by_person and not isinstance(answer, Proposed):
                # An operator that does not know the guard (a custom one) said yes without a person.
                return refuse("unattended", f"this change needs a person's yes, and {answer.by} is not one; "
                                            "answer it at the prompt or with runbook approve", plan)
            if isinstance(answer, Proposed):
                self._record(ACTION_PROPOSED, self.clock.now(), step=step.id,
                             data={"action": action, "target": plan.target, "summary": plan.summary,
                                   "before": plan.before, "after": plan.after, "diff": diff,
                                   "reversible": plan.rollback is not None, "dry_run": self.dry_run,
                                   "by": answer.by, "reason": answer.reason})
                return self._end(step, kind, "proposed", f"proposed: {plan.summary} ({answer.reason})", view(plan), now)
            if answer.skip:
                # Only this change is left out, by the human's choice: skipped, not refused; the run goes on.
                self._record(ev.ACTION_SKIPPED, self.clock.now(), step=step.id,
                             data={"reason": f"skipped by {answer.by} at the prompt", "target": plan.target})
                return self._end(step, kind, "skipped",
                                 f"skipped by {answer.by} at the prompt: {plan.summary} was not applied", view(plan), now)
            if not answer.approved:
                return refuse("confirm", f"{answer.reason} (asked {answer.by})", plan)
            by, confirmed_diff = answer.by, diff
            self._record(ev.ACTION_CONFIRMED, self.clock.now(), step=step.id,
                         data={"by": by, "how": answer.reason or "prompt", "target": plan.target, "action": action})
        stop = self.interrupted()
        if stop:
            return refuse("interrupted", f"{stop}; {plan.summary} was not applied", plan)
        lost = held.lost() if held is not None else None
        if lost:
            return refuse("lock", f"{lost}; {plan.summary} was not applied", plan)
        applied_at = self.clock.now()
        try:
            result = plan.apply(False)
        except StalePlan as exc:
            return str(exc), confirmed_diff, by
        except Refused:
            raise
        except NOT_APPLIED as exc:
            self._record(ev.ACTION_FAILED, applied_at, step=step.id,
                         data={"action": action, "target": plan.target, "error": str(exc)})
            return self._end(step, kind, "failed", f"applying failed: {exc}", view(plan), now)
        except Exception as exc:  # noqa: BLE001 - the change may have been made: count it, try to undo it
            error = str(exc) if isinstance(exc, RunbookError) else f"{type(exc).__name__}: {exc}"
            self._record(ev.ACTION_UNKNOWN, applied_at, step=step.id, data={
                "action": action, "target": plan.target, "summary": plan.summary, "before": plan.before,
                "after": plan.after, "by": by, "error": error,
                "why": "the apply raised after it may have changed the target; counted as applied",
                **_capacity_data(plan.capacity)})
            self._remember_application(plan, action, applied_at)
            unknown = AppliedAction(step.id, action, plan.target, plan.before, plan.after, by, True, plan.rollback)
            actions.append(unknown)
            self._rollback_actions(step.id, actions, only=unknown)
            return self._end(step, kind, "failed", f"applying may have failed: {error}",
                             {**view(plan), "outcome_unknown": True}, now)
        capacity = plan.capacity
        if capacity is not None and isinstance(result, dict) and isinstance(result.get("replicas"), int):
            # where an apply stopped short, and why
            capacity = dataclasses.replace(capacity, after=result["replicas"], stopped=result.get("stopped") or None)
        self._record(ev.ACTION_APPLIED, applied_at, step=step.id, data={
            "action": action, "target": plan.target, "summary": plan.summary, "before": plan.before,
            "after": plan.after, "by": by, "result": result, **_capacity_data(capacity)})
        self._remember_application(plan, action, applied_at)
        actions.append(AppliedAction(step.id, action, plan.target, plan.before, plan.after, by, True, plan.rollback))
        # An apply that went differently from its plan (a restore that stopped short) says how, in its summary.
        said = result.get("summary") if isinstance(result, dict) and isinstance(result.get("summary"), str) else None
        return self._end(step, kind, "changed", said or plan.summary,
                         {**view(plan), "applied": True, "outcome": result}, now)

    def _remember_application(self, plan: Plan, action: str, at: dt.datetime) -> None:
        """Tell a shared history (a cluster-wide record) of the change, so every runbook's cooldown sees it."""
        record = getattr(self.history, "record_applied", None)
        if record is None:
            return
        target = plan.target
        try:
            record(target=target, action=action, at=at, incident=self.journal.incident, namespace=plan.namespace)
        except BackendError as exc:
            self._record(ev.NOTE, self.clock.now(), data={
                "message": f"could not record the change to {target} where other runbook instances see it: {exc}; "
                           "their cooldowns will not count it"})

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
        self._rollback_actions(step.id, actions)

    def _rollback_actions(self, because: str, actions: list[AppliedAction], *,
                          only: AppliedAction | None = None) -> None:
        """Undo applied changes, newest first, each once; each result journaled."""
        for index in reversed(range(len(actions))):
            applied = actions[index]
            if not applied.applied or applied.rolled_back or (only is not None and applied is not only):
                continue
            actions[index] = dataclasses.replace(applied, rolled_back=True)
            now = self.clock.now()
            if applied.rollback is None:
                self._record(ev.NOTE, now, step=applied.step,
                             data={"message": f"{applied.action} on {applied.target} cannot be rolled back"})
                continue
            try:
                restored = applied.rollback()
            except Exception as exc:  # noqa: BLE001 - every rollback outcome is journaled, none raises
                error = str(exc) if isinstance(exc, RunbookError) else f"{type(exc).__name__}: {exc}"
                self._record(ev.ROLLBACK_FAILED, now, step=applied.step,
                             data={"action": applied.action, "target": applied.target, "error": error})
                continue
            self._record(ev.ROLLBACK_APPLIED, now, step=applied.step, data={
                "action": applied.action, "target": applied.target, "restored": applied.before,
                "from": applied.after, "result": restored, "because": because})

    def _escalate(self, step: Step, reason: str) -> None:
        self._record(ev.ESCALATED, self.clock.now(), step=step.id, data={"reason": reason})


def _capacity_data(capacity: Capacity | None) -> dict[str, Any]:
    """The journal's record of the serving capacity a change left (read back by `_capacity_left`)."""
    if capacity is None:
        return {}
    return {"capacity": {"target": capacity.target, "before": capacity.before, "after": capacity.after,
                         "restore": list(capacity.restore), "stopped": capacity.stopped}}


class _null_lock:
    def __enter__(self) -> None:
        return None  # no lock in hand: nothing to lose

    def __exit__(self, *exc: object) -> None:
        return None


def _points(stamps: dict[Any, str], points: Any) -> Any:
    """A series' points as the journal writes them, each time formatted once (the series share one
    grid); as `SeriesPoints`, which the journal need not walk for secrets, when they are all plain."""
    for at, _ in points:
        if at not in stamps:
            stamps[at] = ev.iso_ms(at) if isinstance(at, dt.datetime) else at
    try:
        return redaction.SeriesPoints((stamps[at], value) for at, value in points)
    except ValueError:  # an odd point (a non-finite value): the journal's usual path copes with it
        return [[stamps[at], value] for at, value in points]
