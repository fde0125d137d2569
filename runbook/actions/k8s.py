"""`k8s.pods`, `k8s.exec`, `k8s.workload`: read-only looks into pods (`k8s.logs` is in k8s_logs).

`k8s.exec` can parse what it ran (nvidia-smi memory, ps, sockets) and names the pods whose
answer looks unhealthy, so later steps can act on exactly those.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Literal

import pydantic

from runbook.commandline import flags as flag_values
from runbook.actions import fields
from runbook.actions.base import ActionResult, StepContext
from runbook.actions.fanout import fan_out_in_order
from runbook.actions import base
from runbook.backends.base import CommandResult
from runbook.actions.k8s_pods import PodsParams, pod_row, select_pods
from runbook.parsers import nvidia_smi, procs, sockets
from runbook.parsers.errors import ParseError
from runbook.model.registry import ActionParams, Kind, action

MAX_OUTPUT_CHARS = 16_000


@action("k8s.pods", kind=Kind.DIAGNOSTIC, params=PodsParams)
def pods(ctx: StepContext, p: PodsParams) -> ActionResult:
    """List pods with phase, readiness, restarts, node and last termination reason (OOMKilled…).

    Result: `pods`, and the names in `ready`, `not_ready` and `oom_killed`.
    """
    found = select_pods(ctx, p)
    rows = [pod_row(pod) for pod in found]
    ready = [pod.name for pod in found if pod.ready]
    not_ready = [pod.name for pod in found if not pod.ready and not pod.deleting]
    oom = [pod.name for pod in found if pod.last_termination_reason == "OOMKilled"]
    ctx.evidence("pods", f"pods in {ctx.namespace(p.namespace)}", pods=rows)
    return ActionResult.ok(f"{len(ready)}/{len(found)} ready" + (f"; not ready: {', '.join(not_ready)}" if not_ready else "")
                           + (f"; OOMKilled: {', '.join(oom)}" if oom else ""),
                           pods=rows, ready=ready, not_ready=not_ready, oom_killed=oom, total=len(found))


class ExecParams(PodsParams):
    container: fields.K8sName
    command: fields.Argv
    timeout: float = pydantic.Field(20.0, gt=0, le=600)
    parse: Literal["text", "nvidia-smi-memory", "ps", "sockets"] = "text"
    process: fields.Pattern | None = None  # with parse: ps, the process that must exist and be healthy
    port: int | None = pydantic.Field(None, ge=1, le=65535)  # with parse: sockets, the port that must listen
    above: float | None = pydantic.Field(None, ge=0, le=1)  # with parse: nvidia-smi-memory, used share flagged


def _judge(p: ExecParams, stdout: str) -> tuple[dict, str | None]:
    """Parsed output and, when the pod looks unhealthy, why."""
    if p.parse == "nvidia-smi-memory":
        reports = nvidia_smi.parse_memory_report(stdout)
        rows = [{"bus_id": r.bus_id, "used_mib": r.fb_used_mib, "total_mib": r.fb_total_mib,
                 "free_mib": r.fb_free_mib} for r in reports]
        worst = max((r["used_mib"] / r["total_mib"] for r in rows if r["used_mib"] is not None and r["total_mib"]),
                    default=None)
        bad = f"GPU memory {worst:.0%} used" if worst is not None and p.above is not None and worst > p.above else None
        return {"gpus": rows, "used_ratio": worst}, bad
    if p.parse == "ps":
        table = procs.parse_ps(stdout)
        if p.process is None:
            return {"processes": len(table), "zombies": [x.pid for x in table if x.zombie]}, None
        regex = re.compile(p.process)
        matching = [x for x in table if regex.search(x.args)]
        rows = [{"pid": x.pid, "stat": x.stat, "args": x.args[:200]} for x in matching]
        if not matching:
            return {"matching": rows}, f"no process matches {p.process!r}"
        stuck = [x for x in matching if x.zombie or x.uninterruptible]
        if stuck and len(stuck) == len(matching):
            return {"matching": rows}, f"process {stuck[0].pid} is in state {stuck[0].stat}" + (" (defunct)" if stuck[0].zombie else "")
        return {"matching": rows}, None
    if p.parse == "sockets":
        table = sockets.parse_ss_listening(stdout) if not stdout.lstrip().startswith("sl") else sockets.parse_proc_net_tcp(stdout)
        ports = sorted({s.local_port for s in table if s.state == "LISTEN"})
        if p.port is not None and p.port not in ports:
            return {"listening": ports}, f"nothing listens on port {p.port}"
        return {"listening": ports}, None
    return {}, None


@action("k8s.exec", kind=Kind.DIAGNOSTIC, params=ExecParams)
def exec_in_pods(ctx: StepContext, p: ExecParams) -> ActionResult:
    """Run a command (an argv list, no shell) in a container of each selected pod, with a timeout.

    With `parse` the output is read as nvidia-smi memory, ps or sockets; the result names the
    pods that look unhealthy (`unhealthy`, with `reasons`) and those that did not answer (`errors`).
    """
    answers: dict[str, dict] = {}
    unhealthy: list[str] = []
    reasons: dict[str, str] = {}
    errors: dict[str, str] = {}
    chosen = select_pods(ctx, p)

    def run_in(pod):
        return ctx.cluster.exec(pod.namespace, pod.name, p.container, p.command, timeout=p.timeout)

    # Each pod's answer is read and journaled while the later pods' execs are still running.
    with fan_out_in_order(chosen, run_in, pool_size=ctx.pool_size, deadline=max(ctx.timeout, p.timeout + 5),
                          describe=lambda pod: f"pod {pod.name}") as outcomes:
        for done in outcomes:
            pod, out = done.target, done.result
            if out is None:
                errors[pod.name] = str(done.error)
                continue
            answer, error, bad = _read_answer(p, out)
            if error:
                errors[pod.name] = error
            if bad:
                unhealthy.append(pod.name)
                reasons[pod.name] = bad
            answers[pod.name] = answer
            ctx.evidence("command", f"{' '.join(p.command)} in {pod.name}/{p.container}", pod=pod.name,
                         command=p.command, **answer)
    summary = f"ran `{' '.join(p.command)}` in {len(answers)} pod(s)"
    if unhealthy:
        summary += "; unhealthy: " + ", ".join(f"{n} ({reasons[n]})" for n in unhealthy)
    if errors:
        summary += "; no answer from " + ", ".join(sorted(errors))
    return ActionResult.ok(summary, answers=answers, unhealthy=unhealthy, reasons=reasons, errors=errors,
                           at=ctx.now.isoformat() if isinstance(ctx.now, dt.datetime) else None)


def _read_answer(p: ExecParams, out: CommandResult) -> tuple[dict, str | None, str | None]:
    """(one pod's answer as journaled, why its output is not usable, why it looks unhealthy)."""
    answer: dict = {"exit_code": out.exit_code, "stdout": out.stdout[:MAX_OUTPUT_CHARS],
                    "stderr": out.stderr[:2000], "truncated": out.truncated or len(out.stdout) > MAX_OUTPUT_CHARS}
    if out.exit_code != 0 and p.parse != "ps":
        return answer, f"exit code {out.exit_code}: {out.stderr.strip()[:300]}", None
    error = None
    try:
        parsed, bad = _judge(p, out.stdout)
    except ParseError as exc:
        error, parsed, bad = f"could not read the output: {exc}", {}, None
    answer["parsed"] = parsed
    return answer, error, bad


class WorkloadParams(ActionParams):
    target: fields.WorkloadRef
    container: fields.K8sName
    flags: tuple[str, ...] = pydantic.Field((), max_length=16)
    namespace: fields.K8sName | None = None


@action("k8s.workload", kind=Kind.DIAGNOSTIC, params=WorkloadParams)
def workload(ctx: StepContext, p: WorkloadParams) -> ActionResult:
    """A workload's replicas and the current values of some flags of one container (issue 16, item 9).

    Result: `replicas`, `ready_replicas` and `flags` (flag → its value, a number where it reads as
    one, None where unset), so a later step's `when` can tell whether a flag is at its floor.
    """
    namespace = ctx.namespace(p.namespace)
    kind, name = base.parse_workload(p.target)
    found = ctx.cluster.get_workload(namespace, kind, name)
    spec = found.container(p.container)
    values: dict[str, object] = {}
    for flag in p.flags:
        raw = flag_values.find_flag(spec.command, spec.args, flag, container=p.container, env=spec.env)
        values[flag] = _number(raw)
    shown = ", ".join(f"{flag}={value}" for flag, value in values.items())
    ctx.evidence("text", f"{found.ref} in {namespace}", replicas=found.replicas, ready_replicas=found.ready_replicas,
                 flags=values)
    return ActionResult.ok(f"{found.ref}: {found.ready_replicas}/{found.replicas} ready" + (f"; {shown}" if shown else ""),
                           replicas=found.replicas, ready_replicas=found.ready_replicas, flags=values)


def _number(raw: str | None) -> object:
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        try:
            return float(raw)
        except ValueError:
            return raw
