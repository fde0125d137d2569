"""`k8s.scale`, `k8s.delete_pod`, `k8s.set_arg`: remediations of workloads and pods, as plans.

Each reads the current state and returns a `Plan` (before → after, what the guards need, how
to apply it and, where it can be, how to restore the before-state). None of them changes
anything by itself: the engine applies a plan only after its guards and confirmation.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import pydantic

from runbook.commandline import flags
from runbook.actions import base, fields
from runbook.actions.base import Capacity, Plan, StepContext
from runbook.backends import gitops
from runbook.backends.base import Autoscaler, ContainerSpec
from runbook.actions.k8s_pods import PodsParams, select_pods
from runbook.errors import InvalidInput, RunbookError
from runbook.model.registry import ActionParams, Kind, action


class ScaleParams(ActionParams):
    target: fields.WorkloadRef
    replicas: int = pydantic.Field(ge=0, le=10_000)
    namespace: fields.K8sName | None = None


@action("k8s.scale", kind=Kind.REMEDIATION, params=ScaleParams, reversible=True)
def scale(ctx: StepContext, p: ScaleParams) -> Plan:
    """Set a StatefulSet's or Deployment's replicas through the scale subresource.

    Reversible: a rollback scales back to the replica count recorded before the change.
    """
    namespace = ctx.namespace(p.namespace)
    kind, name = base.parse_workload(p.target)
    if kind == "daemonset":
        raise InvalidInput(f"{p.target}: a DaemonSet has no replica count to scale")
    workload = ctx.cluster.get_workload(namespace, kind, name)
    pods = ctx.cluster.list_pods(namespace, workload.selector)
    ready_names = sorted(pod.name for pod in pods if pod.ready)
    # A StatefulSet removes the highest ordinals first; count the ready pods that stay.
    keep = sorted(pods, key=lambda pod: _ordinal(pod.name))[: p.replicas]
    ready_after = sum(1 for pod in keep if pod.ready) if p.replicas < workload.replicas else len(ready_names)
    before = workload.replicas
    # An autoscaler would undo the scale within a minute: it is held at the target for the incident,
    # as part of this very change (issue 16, item 8).
    held, refusal = _hold_autoscalers(ctx.cluster.autoscalers(namespace, kind, name), p.replicas)

    def apply(dry_run: bool) -> dict:
        done_held: list[tuple[Autoscaler, Autoscaler]] = []
        try:
            for old, new in held:
                left = _set_autoscaler(ctx, old, new, dry_run=dry_run, expected=old)
                done_held.append((old, left))
            # Only from the view the plan (and its guards) saw: a workload scaled since is re-planned.
            done = ctx.cluster.scale(namespace, kind, name, p.replicas, dry_run=dry_run, expected_replicas=before,
                                     resource_version=workload.resource_version or None)
        except BaseException:
            if not dry_run:
                _release(ctx, done_held)  # all or nothing: the autoscalers held so far go back as they were
            raise
        return {"replicas": done.replicas, **{old.ref: left.shown() for old, left in done_held}}

    def rollback() -> dict:
        # Only while the workload is still as this change left it: a later hand's scale is not undone.
        done = ctx.cluster.scale(namespace, kind, name, before, expected_replicas=p.replicas)
        restored = _release(ctx, [(old, new) for old, new in held], strict=True)
        return {"replicas": done.replicas, **restored}

    extra_before = {old.ref: old.shown() for old, _ in held}
    extra_after = {old.ref: new.shown() for old, new in held}
    return Plan(target=f"{namespace}/{kind}/{name}",
                summary=f"scale {kind}/{name} {before} → {p.replicas}"
                        + (f", holding {', '.join(old.ref for old, _ in held)} at {p.replicas}" if held else ""),
                namespace=namespace,
                before={"replicas": before, **extra_before}, after={"replicas": p.replicas, **extra_after},
                apply=apply, rollback=rollback,
                value_after=float(p.replicas), ready_before=len(ready_names), ready_after=ready_after,
                touched=max(0, before - p.replicas), total=max(before, 1), refusal=refusal,
                noop=before == p.replicas and not held,
                capacity=Capacity(f"{namespace}/{kind}/{name}", before, p.replicas,
                                  restore_commands(namespace, kind, name, before, [old for old, _ in held])))


def restore_commands(namespace: str, kind: str, name: str, replicas: int, autoscalers: list[Autoscaler]) -> tuple[str, ...]:
    """The kubectl commands that put a workload back at `replicas`, its autoscalers first as given
    (as they were before a hold), so that a person can finish what a run left reduced."""
    commands = []
    for a in autoscalers:
        if a.kind == "hpa":
            commands.append(f"kubectl -n {namespace} patch hpa {a.name} --type=merge -p "
                            f"'{{\"spec\":{{\"minReplicas\":{a.min_replicas},\"maxReplicas\":{a.max_replicas}}}}}'")
        elif a.paused_replicas is None:
            commands.append(f"kubectl -n {namespace} annotate scaledobject {a.name} autoscaling.keda.sh/paused-replicas-")
        else:
            commands.append(f"kubectl -n {namespace} annotate --overwrite scaledobject {a.name} "
                            f"autoscaling.keda.sh/paused-replicas={a.paused_replicas}")
    commands.append(f"kubectl -n {namespace} scale {kind}/{name} --replicas={replicas}")
    return tuple(commands)


def _hold_autoscalers(found: list[Autoscaler], replicas: int) -> tuple[list[tuple[Autoscaler, Autoscaler]],
                                                                       tuple[str, str] | None]:
    """(autoscaler as it is, as it must be for the incident) for each one that would undo `replicas`.

    An HPA is bounded at the target (minReplicas = maxReplicas); a ScaledObject paused there with
    KEDA's paused-replicas annotation. An HPA cannot hold 0 replicas: that is refused, naming it."""
    held: list[tuple[Autoscaler, Autoscaler]] = []
    for a in found:
        if a.kind == "hpa":
            if replicas < 1:
                return [], ("autoscaler", f"{a.ref} in {a.namespace} scales {a.target} and cannot hold it at 0 "
                                          "replicas (minReplicas is at least 1); delete or edit the HPA by hand "
                                          "first, or scale to 1")
            if (a.min_replicas, a.max_replicas) != (replicas, replicas):
                held.append((a, dataclasses.replace(a, min_replicas=replicas, max_replicas=replicas)))
        elif a.paused_replicas != replicas:
            held.append((a, dataclasses.replace(a, paused_replicas=replicas)))
    return held, None


def _set_autoscaler(ctx: StepContext, old: Autoscaler, new: Autoscaler, *, dry_run: bool = False,
                    expected: Autoscaler | None = None, version: bool = True) -> Autoscaler:
    if new.kind == "hpa":
        change = {"min_replicas": new.min_replicas, "max_replicas": new.max_replicas}
    else:
        change = {"paused_replicas": new.paused_replicas}
    return ctx.cluster.set_autoscaler(old.namespace, old.kind, old.name, dry_run=dry_run, expected=expected,
                                      resource_version=(old.resource_version or None) if version else None, **change)


def _release(ctx: StepContext, held: list[tuple[Autoscaler, Autoscaler]], *, strict: bool = False) -> dict:
    """Put each autoscaler back as it was before the change, from how the change left it (newest first).

    `strict`: a failure is raised (a rollback says so); otherwise it is left for the rollback to say."""
    restored: dict = {}
    for old, left in reversed(held):
        try:
            back = _set_autoscaler(ctx, left, old, expected=left, version=False)
        except RunbookError:
            if strict:
                raise
            continue
        restored[old.ref] = back.shown()
    return restored


def _ordinal(name: str) -> tuple[int, str]:
    tail = name.rsplit("-", 1)[-1]
    return (int(tail), name) if tail.isdigit() else (1 << 30, name)


class DeletePodParams(PodsParams):
    only_not_ready: bool = False  # with a selector or workload: only pods that are not ready


@action("k8s.delete_pod", kind=Kind.REMEDIATION, params=DeletePodParams)
def delete_pod(ctx: StepContext, p: DeletePodParams) -> Plan:
    """Delete pods so their controller recreates them (the SOP's fix for a hung vLLM process).

    Each delete carries the inspected pod's uid as a precondition, so a replacement with the same
    name is never deleted by a retry. Not reversible: the controller brings the pod back.
    """
    namespace = ctx.namespace(p.namespace)
    chosen = select_pods(ctx, p)
    if p.only_not_ready:
        chosen = [pod for pod in chosen if not pod.ready]
    owners = sorted({pod.owner for pod in chosen if pod.owner})
    if len(owners) > 1:
        raise InvalidInput(f"the pods to delete belong to several workloads ({', '.join(owners)}); one at a time")
    if owners:
        kind, name = base.parse_workload(owners[0])
        siblings = ctx.cluster.list_pods(namespace, ctx.cluster.get_workload(namespace, kind, name).selector)
        target = f"{namespace}/{owners[0]}"
    else:
        siblings = chosen
        target = f"{namespace}/pods/" + ",".join(pod.name for pod in chosen)
    doomed = {pod.name: pod.uid for pod in chosen}
    ready_now = [pod.name for pod in siblings if pod.ready]
    ready_after = sum(1 for name in ready_now if name not in doomed)

    def apply(dry_run: bool) -> dict:
        for name, uid in doomed.items():
            ctx.cluster.delete_pod(namespace, name, uid=uid, dry_run=dry_run)
        return {"deleted": sorted(doomed)}

    listing = ", ".join(sorted(doomed)) or "no pods"
    return Plan(target=target, summary=f"delete {listing}", namespace=namespace,
                before={"pods": sorted(doomed), "ready": f"{len(ready_now)}/{len(siblings)}"},
                after={"pods": [], "ready": f"{ready_after}/{len(siblings)} until recreated"},
                apply=apply, ready_before=len(ready_now), ready_after=ready_after, touched=len(doomed),
                total=len(siblings), noop=not doomed)


class SetArgParams(ActionParams):
    target: fields.WorkloadRef
    container: fields.K8sName
    flag: str = pydantic.Field(pattern=r"^--[a-z0-9][a-z0-9_-]*$")  # --max_model_len is --max-model-len
    factor: float | None = pydantic.Field(None, gt=0)
    value: str | int | float | None = None
    floor: float | None = None
    ceiling: float | None = None
    namespace: fields.K8sName | None = None
    # A workload synced from Git (Argo CD, Flux) gets the old value back at the next sync: refused,
    # unless its sync was paused for the incident and the playbook says `allow` (issue 16, item 8).
    gitops: Literal["refuse", "allow"] = "refuse"

    @pydantic.model_validator(mode="after")
    def _one_change(self) -> "SetArgParams":
        fields.check_flag_change(self.factor, self.value, self.floor, self.ceiling)
        return self


@action("k8s.set_arg", kind=Kind.REMEDIATION, params=SetArgParams, reversible=True)
def set_arg(ctx: StepContext, p: SetArgParams) -> Plan:
    """Change one flag of one container (e.g. `--max-model-len` × 0.9, never below `floor`).

    Handles `--flag=v`, `--flag v` (or `--max_model_len`, kept as spelled), a flag inside a
    `sh -c "vllm serve …"` string, and one in an env var's value (KServe's `VLLM_ADDITIONAL_ARGS`);
    nothing else changes. A value computed from another variable is refused, naming it. The pods
    restart with the new value; a rollback restores the old one.
    """
    namespace = ctx.namespace(p.namespace)
    kind, name = base.parse_workload(p.target)
    workload = ctx.cluster.get_workload(namespace, kind, name)
    container = workload.container(p.container)
    change = flags.plan_flag_change(container.command, container.args, p.flag, factor=p.factor, value=p.value,
                                    floor=p.floor, ceiling=p.ceiling, container=p.container, env=container.env)
    refusal = flags.factor_refusal(p.flag, change.before, change.after, p.factor, p.floor, p.ceiling)
    synced = gitops.owners(workload.labels, workload.annotations)
    if synced and refusal is None and p.gitops == "refuse":
        owner = synced[0]
        refusal = ("gitops", f"{kind}/{name} in {namespace} is synced from Git by {owner.controller} {owner.ref} "
                             f"({owner.evidence}): setting {p.flag} here would be reverted at its next sync. "
                             f"Set {p.flag} {change.after} in Git instead: {owner.how_to_change()}")
    old_command, old_args = container.command, container.args
    new_command = change.command if change.command != old_command else None
    new_args = change.args if change.args != old_args else None
    new_env = dict(change.env) or None
    old_env = {var.name: var.value for var in container.env if new_env and var.name in new_env} or None

    planned_from = container
    left_as = ContainerSpec(p.container, change.command, change.args, container.env).with_env_values(new_env or {})

    def apply(dry_run: bool) -> dict:
        # Only from the container the plan read: another hand's edit since is never written over.
        ctx.cluster.set_container_argv(namespace, kind, name, p.container, command=new_command, args=new_args,
                                       env=new_env, dry_run=dry_run, expected=planned_from,
                                       resource_version=workload.resource_version or None)
        return {p.flag: change.after, "where": change.location}

    def rollback() -> dict:
        ctx.cluster.set_container_argv(namespace, kind, name, p.container,
                                       command=old_command if new_command is not None else None,
                                       args=old_args if new_args is not None else None, env=old_env,
                                       expected=left_as)
        return {p.flag: change.before}

    try:
        value_after = float(change.after)
    except ValueError:
        value_after = None
    return Plan(target=f"{namespace}/{kind}/{name}", namespace=namespace,
                summary=f"set {change.spelling or p.flag} of {kind}/{name}/{p.container}"
                        f"{f' (env {change.env[0][0]})' if change.env else ''} {change.before} → {change.after}",
                before={p.flag: change.before}, after={p.flag: change.after}, apply=apply, rollback=rollback,
                value_after=value_after, ready_before=workload.ready_replicas,
                # A rolling restart takes one pod out at a time.
                ready_after=max(workload.ready_replicas - 1, 0), touched=min(1, workload.replicas),
                total=max(workload.replicas, 1), refusal=refusal,
                noop=change.after == change.before and refusal is None)
