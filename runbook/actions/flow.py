"""`flow.*`: the run's own control: verify a condition over time, leave a note, escalate.

`flow.verify` sleeps only through the injected clock, so a drill's five minutes take none; each
reading goes to `ctx.progress` for a live view (the journal keeps them all in the step's evidence).
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

import pydantic

from runbook.actions import base, fields
from runbook.actions.base import ActionResult, StepContext
from runbook.errors import BackendError
from runbook.model.duration import Duration, format_duration
from runbook.model.registry import ActionParams, Kind, action


class VerifyParams(ActionParams):
    signal: fields.SignalName | None = None
    labels: fields.PromLabels = {}
    below: float | None = None
    above: float | None = None
    ready: fields.WorkloadRef | None = None  # or: every replica of this workload is ready
    namespace: fields.K8sName | None = None
    for_: Duration = pydantic.Field(300.0, alias="for")  # how long the condition must hold
    within: Duration | None = None  # deadline; default: `for` + 5 minutes
    interval: Duration = pydantic.Field(15.0, gt=0)

    @pydantic.model_validator(mode="after")
    def _one_condition(self) -> "VerifyParams":
        if (self.signal is None) == (self.ready is None):
            raise ValueError("give either `signal` (with `below` or `above`) or `ready`")
        if self.signal is not None and (self.below is None) == (self.above is None):
            raise ValueError("give exactly one of `below` or `above` with `signal`")
        return self


def _condition(ctx: StepContext, p: VerifyParams, at: dt.datetime) -> tuple[bool | None, str, float | None]:
    """(holds, what was seen, value); holds is None when the source could not be read."""
    if p.signal is not None:
        try:
            samples = ctx.metrics.query(p.signal, at=at, labels=p.labels)
        except BackendError as exc:
            return None, f"cannot read {p.signal}: {exc}", None
        if not samples:
            return None, f"no data for {p.signal}", None
        value = sum(s.value for s in samples)
        holds = value < p.below if p.below is not None else value > p.above  # type: ignore[operator]
        return holds, f"{p.signal} = {value:g}", value
    kind, name = base.parse_workload(p.ready)  # type: ignore[arg-type]
    try:
        workload = ctx.cluster.get_workload(ctx.namespace(p.namespace), kind, name)
    except BackendError as exc:
        return None, f"cannot read {p.ready}: {exc}", None
    holds = workload.replicas > 0 and workload.ready_replicas >= workload.replicas
    return holds, f"{p.ready} {workload.ready_replicas}/{workload.replicas} ready", float(workload.ready_replicas)


@action("flow.verify", kind=Kind.CONTROL, params=VerifyParams)
def verify(ctx: StepContext, p: VerifyParams) -> ActionResult:
    """Wait until a condition has held for `for`, failing when `within` passes first.

    Conditions: a signal `below`/`above` a value, or every replica of a workload `ready`.
    A reading that cannot be taken counts as not holding: silence is never health.
    """
    return verify_condition(ctx, p)


def verify_condition(ctx: StepContext, p: VerifyParams, *, where: str = "") -> ActionResult:
    """`flow.verify`'s wait, for an action that verifies as it goes (a restore, at each size): `where`
    ("at 2 replicas") tells its readings apart in the report."""
    deadline_seconds = p.within if p.within is not None else p.for_ + 300.0
    start = ctx.clock.now()
    deadline = start + dt.timedelta(seconds=deadline_seconds)
    held_since: dt.datetime | None = None
    readings: list[list] = []
    what = p.signal if p.signal else f"{p.ready} ready"
    condition = (f"{p.signal} {'<' if p.below is not None else '>'} {p.below if p.below is not None else p.above:g}"
                 if p.signal else f"{p.ready} fully ready")
    last_seen = ""
    while True:
        at = ctx.clock.now()
        holds, seen, value = _condition(ctx, p, at)
        last_seen = seen
        readings.append([at, value, holds])
        held_since = (held_since or at) if holds else None
        ctx.progress({"condition": condition, "seen": seen, "value": value, "holds": bool(holds),
                      "held_for": (at - held_since).total_seconds() if held_since else 0.0, "for": p.for_,
                      "left": max((deadline - at).total_seconds(), 0.0)})
        if held_since is not None:
            if (at - held_since).total_seconds() >= p.for_:
                ctx.evidence("samples", f"verification of {condition}{where}", signal=what, readings=readings)
                took = (at - start).total_seconds()
                return ActionResult.ok(
                    f"{condition} held for {format_duration(p.for_)} (checked {len(readings)} times, "
                    f"{format_duration(took)} after the step began)",
                    condition=condition, held_since=held_since, passed_at=at, readings=len(readings),
                    recovered_after_seconds=(held_since - start).total_seconds())
        if at >= deadline:
            break
        stop = ctx.interrupted()
        if stop:
            # A run told to stop does not wait out the window: the engine rolls back what was changed.
            ctx.evidence("samples", f"verification of {condition}{where}", signal=what, readings=readings)
            return ActionResult.failed(f"verification of {condition} stopped: {stop}; last reading: {last_seen}",
                                       condition=condition, readings=len(readings), last=last_seen, interrupted=stop)
        ctx.clock.sleep(min(p.interval, max((deadline - at).total_seconds(), 0.001)))
    ctx.evidence("samples", f"verification of {condition}{where}", signal=what, readings=readings)
    return ActionResult.failed(
        f"{condition} did not hold for {format_duration(p.for_)} within {format_duration(deadline_seconds)}; "
        f"last reading: {last_seen}", condition=condition, readings=len(readings), last=last_seen)


class NoteParams(ActionParams):
    message: str = pydantic.Field(min_length=1, max_length=4000)


@action("flow.note", kind=Kind.CONTROL, params=NoteParams)
def note(ctx: StepContext, p: NoteParams) -> ActionResult:
    """Write a note into the journal (and so into the report): what a human should know."""
    return ActionResult.ok(p.message)


class EscalateParams(ActionParams):
    message: str = pydantic.Field(min_length=1, max_length=4000)
    to: str = "on-call"  # a team, a rotation, a PagerDuty escalation policy name
    urgency: Literal["high", "low"] = "high"
    suggestion: str = ""


@action("flow.escalate", kind=Kind.CONTROL, params=EscalateParams)
def escalate(ctx: StepContext, p: EscalateParams) -> ActionResult:
    """Hand the incident to a human: the run ends `escalated`, with the message and a suggestion."""
    return ActionResult.ok(p.message, to=p.to, urgency=p.urgency, suggestion=p.suggestion)
