"""`k8s.restore_scale`: after the fix holds, bring back the replicas an earlier scale-down took, as a plan.

One replica at a time, each ready and the incident's signal quiet before the next; the autoscalers
the scale-down held are given back as they were once the size is whole. Where the signal returns,
the last step is undone and the restore stops at the last good size, saying why (issue 34).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from typing import Any

import pydantic

from runbook.actions import base, fields, flow
from runbook.actions.base import Capacity, Plan, StepContext
from runbook.actions.k8s_changes import _set_autoscaler, restore_commands
from runbook.backends.base import Autoscaler
from runbook.errors import InvalidInput, StalePlan
from runbook.model.duration import Duration, format_duration
from runbook.model.registry import ActionParams, Kind, action

_HPA = re.compile(r"^minReplicas=(\d+) maxReplicas=(\d+)$")
_KEDA = re.compile(r"^paused-replicas=(none|\d+) \(minReplicaCount=(None|\d+) maxReplicaCount=(None|\d+)\)$")


class RestoreParams(ActionParams):
    target: fields.WorkloadRef
    # The scale-down's `before`, as its step's result has it: {replicas: 3, hpa/vllm-server: "minReplicas=3 …"}.
    before: dict[str, Any]
    # The scale-down's `after`: in a dry run, where the scale-down would have left it (nothing moved).
    after: dict[str, Any] | None = None
    signal: fields.SignalName
    labels: fields.PromLabels = {}
    below: float
    for_: Duration = pydantic.Field(120.0, alias="for")  # how long the signal stays quiet at each size
    ready_within: Duration = 600.0  # how long a new replica may take to be ready
    interval: Duration = pydantic.Field(15.0, gt=0)
    namespace: fields.K8sName | None = None

    @pydantic.field_validator("before")
    @classmethod
    def _replicas_given(cls, value: dict[str, Any]) -> dict[str, Any]:
        replicas = value.get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or not 1 <= replicas <= 10_000:
            raise ValueError("`before` must be the scale step's `before`, with its `replicas` (1 to 10000): "
                             "steps['scale-down'].result.before")
        return value


def _as_it_was(now: Autoscaler, shown: object) -> Autoscaler:
    """The autoscaler as the scale-down's plan showed it before its hold (`Autoscaler.shown()`)."""
    text = str(shown)
    if now.kind == "hpa" and (m := _HPA.fullmatch(text)):
        return dataclasses.replace(now, min_replicas=int(m[1]), max_replicas=int(m[2]))
    if now.kind == "scaledobject" and (m := _KEDA.fullmatch(text)):
        return dataclasses.replace(now, paused_replicas=None if m[1] == "none" else int(m[1]))
    raise InvalidInput(f"`before` gives {now.ref} as {text!r}, not as a scale step shows a {now.kind}")


def _held_at(a: Autoscaler, replicas: int) -> Autoscaler:
    if a.kind == "hpa":
        return dataclasses.replace(a, min_replicas=replicas, max_replicas=replicas)
    return dataclasses.replace(a, paused_replicas=replicas)


@action("k8s.restore_scale", kind=Kind.REMEDIATION, params=RestoreParams, reversible=True)
def restore_scale(ctx: StepContext, p: RestoreParams) -> Plan:
    """Scale a workload back up to the size an earlier `k8s.scale` took it from, one replica at a time.

    Each new replica must be ready within `ready_within`, then `signal` must stay below `below` for
    `for`, before the next; the autoscalers that scale-down held (in `before`) are then given back.
    Where a step fails its check, that step is undone: the restore ends at the last good size, and the
    run ends "mitigated, capacity reduced" with why. Reversible: back to the size it started from.
    """
    namespace = ctx.namespace(p.namespace)
    kind, name = base.parse_workload(p.target)
    goal = p.before["replicas"]
    workload = ctx.cluster.get_workload(namespace, kind, name)
    # A dry run's scale-down changed nothing: the restore is planned from where it would have left it.
    rehearsed = ctx.dry_run and p.after is not None and isinstance(p.after.get("replicas"), int)
    start = p.after["replicas"] if rehearsed else workload.replicas  # type: ignore[index]
    now_held = {a.ref: a for a in ctx.cluster.autoscalers(namespace, kind, name)}
    refs = [key for key in p.before if key != "replicas"]
    missing = [ref for ref in refs if ref not in now_held]
    refusal = ("autoscaler", f"{', '.join(missing)} held by the scale-down is gone from {namespace}: "
                             f"nothing to give back; scale {p.target} by hand") if missing else None
    originals = {ref: _as_it_was(now_held[ref], p.before[ref]) for ref in refs if ref in now_held}
    condition = f"{p.signal} < {p.below:g}"
    target = f"{namespace}/{kind}/{name}"

    def held_now() -> dict[str, Autoscaler]:
        return {a.ref: a for a in ctx.cluster.autoscalers(namespace, kind, name) if a.ref in originals}

    def move_to(size: int, replicas: int, *, dry_run: bool = False) -> None:
        """From `size` to `replicas`: the held autoscalers first (so they keep the new size), then the scale."""
        for ref, a in held_now().items():
            _set_autoscaler(ctx, a, _held_at(a, replicas), dry_run=dry_run, expected=a)
        ctx.cluster.scale(namespace, kind, name, replicas, dry_run=dry_run, expected_replicas=size)

    def ready_at(replicas: int) -> str | None:
        """None once every one of `replicas` is ready; else why not, when `ready_within` ran out."""
        deadline = ctx.clock.now() + dt.timedelta(seconds=p.ready_within)
        while True:
            seen = ctx.cluster.get_workload(namespace, kind, name)
            if seen.replicas == replicas and seen.ready_replicas >= replicas:
                return None
            if ctx.clock.now() >= deadline:
                return (f"{seen.ready_replicas}/{replicas} ready after {format_duration(p.ready_within)}")
            stop = ctx.interrupted()
            if stop:
                return f"stopped while waiting for replica {replicas}: {stop}"
            ctx.clock.sleep(p.interval)

    def apply(dry_run: bool) -> dict:
        if dry_run:
            if not rehearsed:  # what the first step sends; the rest are the same shape
                move_to(start, start + 1, dry_run=True)
            return {}
        size, steps, stopped = start, [], None
        quiet = flow.VerifyParams.model_validate({"signal": p.signal, "labels": p.labels, "below": p.below,
                                                  "for": p.for_, "within": p.for_ + 5 * p.interval,
                                                  "interval": p.interval})
        for replicas in range(start + 1, goal + 1):
            try:
                move_to(size, replicas)
            except StalePlan as exc:
                if replicas == start + 1:
                    raise  # nothing changed yet: the engine plans the restore again from what is there now
                # Someone else moved it mid-way: what this restore did is kept, and it stops, saying so.
                stopped = f"at {replicas} replicas: {exc}; left at {size}"
                steps.append({"replicas": replicas, "kept": False, "why": str(exc)})
                break
            why = ready_at(replicas)
            if why is None:
                checked = flow.verify_condition(ctx, quiet, where=f" at {replicas} replicas")
                why = None if checked.status == "ok" else checked.summary
            if why is not None:
                move_to(replicas, size)  # the last step undone: back to the last good size
                stopped = f"at {replicas} replicas: {why}; back to {size}"
                steps.append({"replicas": replicas, "kept": False, "why": why})
                break
            size = replicas
            steps.append({"replicas": replicas, "kept": True, "at": ctx.clock.now()})
        given_back: dict[str, str] = {}
        if size == goal:
            for ref, a in held_now().items():
                given_back[ref] = _set_autoscaler(ctx, a, originals[ref], expected=a, version=False).shown()
        if stopped:
            said = f"restored {kind}/{name} {start} → {size} of {goal}: stopped {stopped}"
        else:
            said = f"restored {kind}/{name} {start} → {goal}" + (f", {', '.join(given_back)} given back" if given_back else "")
        return {"replicas": size, "restored": size == goal, "steps": steps, "stopped": stopped, "summary": said,
                **given_back}

    def rollback() -> dict:
        # Only from the size the restore reached (a later hand's scale is not undone), back to where it began.
        seen = ctx.cluster.get_workload(namespace, kind, name)
        for ref, a in held_now().items():
            _set_autoscaler(ctx, a, _held_at(a, start), expected=a)
        done = ctx.cluster.scale(namespace, kind, name, start, expected_replicas=seen.replicas)
        return {"replicas": done.replicas}

    ready = len([pod for pod in ctx.cluster.list_pods(namespace, workload.selector) if pod.ready])
    release = f"; then {', '.join(originals)} given back" if originals else ""
    return Plan(target=target, namespace=namespace,
                summary=f"restore {kind}/{name} {start} → {goal}, one replica at a time, each ready and "
                        f"{condition} for {format_duration(p.for_)}{release}",
                before={"replicas": start, **{ref: a.shown() for ref, a in now_held.items() if ref in originals}},
                after={"replicas": goal, **{ref: a.shown() for ref, a in originals.items()}},
                apply=apply, rollback=rollback, value_after=float(goal), ready_before=ready, ready_after=ready,
                touched=0, total=max(goal, 1), refusal=refusal, noop=start >= goal and not missing,
                # rehearsed from the scale-down's plan, the cluster is not where the restore would start
                server_dry_run=not rehearsed,
                capacity=Capacity(target, start, goal, restore_commands(namespace, kind, name, goal,
                                                                        list(originals.values()))))
