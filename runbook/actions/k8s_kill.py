"""`k8s.kill_process`: signal the vLLM server process inside its container, as a plan.

The plan names the processes it found; applying it signals exactly those and nothing else.
"""

from __future__ import annotations

import pydantic

from runbook.actions import fields
from runbook.actions.base import Plan, StepContext
from runbook.actions.fanout import fan_out
from runbook.actions.k8s_pods import PodsParams, select_pods
from runbook.errors import CommandFailed
from runbook.registry import Kind, action


class KillProcessParams(PodsParams):
    container: fields.K8sName
    pattern: fields.Pattern = r"vllm\.entrypoints|vllm serve"
    signal: fields.UnixSignal = "KILL"
    timeout: float = pydantic.Field(20.0, gt=0, le=300)


@action("k8s.kill_process", kind=Kind.REMEDIATION, params=KillProcessParams)
def kill_process(ctx: StepContext, p: KillProcessParams) -> Plan:
    """Signal the processes matching `pattern` in a container (the SOP's `kill -9 $(pgrep -f vllm.entrypoints)`).

    The container restarts with its current spec. Not reversible.
    """
    chosen = select_pods(ctx, p)
    found: dict[str, list[int]] = {}
    looked = fan_out(chosen, lambda pod: ctx.cluster.exec(pod.namespace, pod.name, p.container,
                                                          ["pgrep", "-f", p.pattern], timeout=p.timeout),
                     pool_size=ctx.pool_size, deadline=max(ctx.timeout, p.timeout + 5),
                     describe=lambda pod: f"pod {pod.name}")
    for done in looked:
        pod, out = done.target, done.result
        if out is None:
            # A pod we cannot see into is not a pod we may act on blind.
            raise CommandFailed(f"cannot list the processes of {pod.name}: {done.error}")
        if out.exit_code not in (0, 1):
            raise CommandFailed(f"pgrep in {pod.name}/{p.container} failed with exit code {out.exit_code}: {out.stderr.strip()[:200]}")
        pids = [int(x) for x in out.stdout.split() if x.isdigit()]
        if pids:
            found[pod.name] = pids
    by_name = {pod.name: pod for pod in chosen}
    ready_now = sum(1 for pod in chosen if pod.ready)
    namespace = ctx.namespace(p.namespace)

    def apply(dry_run: bool) -> dict:
        if dry_run:
            return {}
        killed = {}
        for pod_name in found:
            out = ctx.cluster.exec(namespace, pod_name, p.container, ["pkill", f"-{p.signal}", "-f", p.pattern],
                                   timeout=p.timeout)
            if out.exit_code not in (0, 1):
                raise CommandFailed(f"pkill in {pod_name} failed with exit code {out.exit_code}: {out.stderr.strip()[:200]}")
            killed[pod_name] = out.exit_code == 0
        return {"killed": killed}

    owner = next((pod.owner for pod in chosen if pod.owner), "")
    return Plan(target=f"{namespace}/{owner or 'pods'}/processes",
                summary=f"send SIG{p.signal} to {sum(len(v) for v in found.values())} process(es) matching "
                        f"{p.pattern!r} in {', '.join(found) or 'no pod'}",
                before={"processes": found}, after={"signal": p.signal, "pods": sorted(found)}, apply=apply,
                ready_before=ready_now, ready_after=ready_now - sum(1 for n in found if by_name[n].ready),
                touched=len(found), total=max(len(chosen), 1), noop=not found, server_dry_run=False)
