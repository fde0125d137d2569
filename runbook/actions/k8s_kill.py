"""`k8s.kill_process`: signal the vLLM server process inside its container, as a plan.

The plan names the processes it found, each by PID and start time in a container it names;
applying it signals exactly those, each only if it is still that process, and nothing else.
"""

from __future__ import annotations

import pydantic

from runbook.actions import base, fields, identity_kill
from runbook.actions.base import Plan, StepContext
from runbook.actions.fanout import fan_out
from runbook.actions.k8s_pods import PodsParams, select_pods
from runbook.backends.base import Pod
from runbook.errors import CommandFailed, InvalidInput, NotFound
from runbook.parsers.kill_by_identity import Target
from runbook.model.registry import Kind, action


class KillProcessParams(PodsParams):
    container: fields.K8sName
    pattern: fields.Pattern = r"vllm\.entrypoints|vllm serve"
    signal: fields.UnixSignal = "KILL"
    timeout: float = pydantic.Field(20.0, gt=0, le=300)


def _container_id(pod: Pod, container: str) -> str:
    return next((c.container_id for c in pod.containers if c.name == container), "")


def _lock_target(namespace: str, p: KillProcessParams, chosen: list[Pod]) -> str:
    """The workload, spelled as k8s.scale and k8s.set_arg spell it, so that a kill and a scale of one
    StatefulSet take one lock and count against one budget; the pods themselves only when ownerless."""
    if p.workload is not None:
        kind, name = base.parse_workload(p.workload)
        return f"{namespace}/{kind}/{name}"
    owners = sorted({pod.owner for pod in chosen if pod.owner})
    if len(owners) > 1:
        raise InvalidInput(f"the pods to signal belong to several workloads ({', '.join(owners)}); one at a time")
    if owners:
        kind, name = base.parse_workload(owners[0])
        return f"{namespace}/{kind}/{name}"
    # as k8s.delete_pod names ownerless pods: a delete and a kill of the same pods share a target
    return f"{namespace}/pods/" + ",".join(pod.name for pod in chosen)


def _current(ctx: StepContext, p: KillProcessParams) -> dict[str, tuple[str, str]]:
    """Pod name → (uid, container id) as the cluster has them now; a pod that is gone is absent."""
    # All pods of the workload or selector, so that a named pod that went away is absent, not an error.
    relist = p.model_copy(update={"names": None}) if p.selector is not None or p.workload is not None else p
    try:
        pods = select_pods(ctx, relist)
    except NotFound:
        return {}  # the workload (or a pod named alone) is gone: nothing planned is left to signal
    return {pod.name: (pod.uid, _container_id(pod, p.container)) for pod in pods}


def _scaled_away(ctx: StepContext, namespace: str, p: KillProcessParams, pods: list[Pod]) -> set[str]:
    """A StatefulSet's pods at or above its replicas: just scaled down, its controller removes them next.

    Until the controller gets to them (on a real cluster, a moment after the scale's patch) they are
    neither terminating nor gone, but signalling them would restart a server that is going away."""
    if p.workload is None:
        return set()
    kind, name = base.parse_workload(p.workload)
    if kind != "statefulset":
        return set()  # a ReplicaSet chooses which pods go: nothing to tell them by until it marks them
    replicas = ctx.cluster.get_workload(namespace, kind, name).replicas
    return {pod.name for pod in pods
            if pod.name.startswith(f"{name}-") and pod.name[len(name) + 1:].isdigit()
            and int(pod.name[len(name) + 1:]) >= replicas}


@action("k8s.kill_process", kind=Kind.REMEDIATION, params=KillProcessParams)
def kill_process(ctx: StepContext, p: KillProcessParams) -> Plan:
    """Signal the processes matching `pattern` in a container (the SOP's `kill -9 $(pgrep -f vllm.entrypoints)`).

    The pattern chooses the processes when planning; the apply signals those PIDs only, each only
    while its pod, container and start time are still the plan's (a restarted server is PID 1
    again, but not the process that was planned). The container restarts with its current spec.
    Not reversible.
    """
    # A terminating pod (a scale-down's, a rollout's) is going away with its processes: on a real
    # cluster it is listed until its kubelet is done, but there is nothing in it to signal.
    namespace = ctx.namespace(p.namespace)
    pods = select_pods(ctx, p)
    leaving = _scaled_away(ctx, namespace, p, pods)
    chosen = [pod for pod in pods if not pod.deleting and pod.name not in leaving]
    target = _lock_target(namespace, p, chosen)

    def look(pod: Pod) -> list[dict]:
        where = f"{pod.name}/{p.container}"
        out = ctx.cluster.exec(namespace, pod.name, p.container, ["pgrep", "-f", p.pattern], timeout=p.timeout)
        if out.exit_code not in (0, 1):
            raise CommandFailed(f"pgrep in {where} failed with exit code {out.exit_code}: {out.stderr.strip()[:200]}")
        pids = [int(x) for x in out.stdout.split() if x.isdigit()]
        if not pids:
            return []
        # exit 1: one of them ended since pgrep saw it; the others are still read
        stat = ctx.cluster.exec(namespace, pod.name, p.container, ["cat", *(f"/proc/{pid}/stat" for pid in pids)],
                                timeout=p.timeout)
        if stat.exit_code not in (0, 1):
            raise CommandFailed(f"cat /proc/<pid>/stat in {where} failed with exit code {stat.exit_code}: "
                                f"{stat.stderr.strip()[:200]}")
        found = identity_kill.read_stats(stat.stdout, f"/proc/<pid>/stat in {where}")
        return [{"pid": pid, "start_ticks": found[pid].start_ticks, "state": found[pid].state,
                 "command": found[pid].comm, "container_id": _container_id(pod, p.container)}
                for pid in pids if pid in found]

    looked = fan_out(chosen, look, pool_size=ctx.pool_size, deadline=max(ctx.timeout, 2 * p.timeout + 5),
                     describe=lambda pod: f"pod {pod.name}")
    found: dict[str, list[dict]] = {}
    for done in looked:
        pod, rows = done.target, done.result
        if rows is None:
            # A pod we cannot see into is not a pod we may act on blind.
            if isinstance(done.error, CommandFailed):
                raise done.error
            raise CommandFailed(f"cannot list the processes of {pod.name}: {done.error}")
        if rows:
            found[pod.name] = rows
    by_name = {pod.name: pod for pod in chosen}
    planned = {name: (by_name[name].uid, _container_id(by_name[name], p.container)) for name in found}
    ready_now = sum(1 for pod in chosen if pod.ready)

    def apply(dry_run: bool) -> dict:
        if dry_run:
            return {}
        # The pod and its container as planned, read again: a replaced pod or a restarted
        # container holds other processes, whatever their PIDs.
        now = _current(ctx, p)
        signalled: dict[str, list[int]] = {}
        left: list[dict] = []
        for pod_name, rows in found.items():
            if now.get(pod_name) != planned[pod_name]:
                reason, why = ("gone", "the pod is gone") if pod_name not in now else \
                    ("restarted", "the pod was replaced") if now[pod_name][0] != planned[pod_name][0] else \
                    ("restarted", "the container restarted")
                left += [{"pod": pod_name, "pid": r["pid"], "reason": reason, "detail": why} for r in rows]
                continue
            targets = [Target(r["pid"], r["start_ticks"]) for r in rows]
            verdicts = identity_kill.signal(
                lambda argv, pod_name=pod_name: ctx.cluster.exec(namespace, pod_name, p.container, argv,
                                                                 timeout=p.timeout),
                p.signal, targets, f"{pod_name}/{p.container}")
            if any(v.verdict == "signalled" for v in verdicts):
                signalled[pod_name] = [v.pid for v in verdicts if v.verdict == "signalled"]
            left += [{"pod": pod_name, **identity_kill.not_signalled(v, t)}
                     for v, t in zip(verdicts, targets) if v.verdict != "signalled"]
        return {"signalled": signalled, "not_signalled": left}

    count = sum(len(v) for v in found.values())
    killed_ready = sum(1 for n in found if by_name[n].ready)
    return Plan(target=target, namespace=namespace,
                summary=f"send SIG{p.signal} to {count} process(es) matching `{p.pattern}` in {', '.join(found) or 'no pod'}",
                # Readiness before → after, as a delete shows it: a killed server is unready until it restarts.
                before={"processes": found, "ready": f"{ready_now}/{len(chosen)}"},
                after={"signal": p.signal, "pods": sorted(found),
                       "ready": f"{ready_now - killed_ready}/{len(chosen)} until restarted"}, apply=apply,
                ready_before=ready_now, ready_after=ready_now - killed_ready,
                touched=len(found), total=max(len(chosen), 1), noop=not found, server_dry_run=False)
