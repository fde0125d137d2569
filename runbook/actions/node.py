"""`node.*`: diagnostics and remediations on GPU hosts, through the `Nodes` backend (SSH).

`node.run` runs only read-only commands from an allow-list; `node.gpu_holders` finds GPU memory
no live process accounts for and who holds the devices; `node.kill_pids` and `node.gpu_reset`
are the guarded fixes for a lingering CUDA context.
"""

from __future__ import annotations

import re


import pydantic

from runbook.actions import base, fields, identity_kill
from runbook.actions.base import ActionResult, Plan, StepContext
from runbook.actions.fanout import fan_out
from runbook.errors import BackendError, CommandFailed
from runbook.parsers import nvidia_smi, procs
from runbook.parsers.errors import ParseError
from runbook.parsers.kill_by_identity import Target
from runbook.model.registry import ActionParams, Kind, action

QUERY_GPU = ["nvidia-smi", "--query-gpu=index,uuid,memory.used,memory.total,utilization.gpu",
             "--format=csv,noheader,nounits"]
QUERY_APPS = ["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory,process_name",
              "--format=csv,noheader,nounits"]
# A fixed string with a glob the remote shell expands; nothing from outside is ever put in it.
FUSER_NVIDIA = ["sh", "-c", "fuser -v /dev/nvidia* 2>&1"]
PS = ["ps", "-eo", "pid,ppid,stat,etimes,args"]

_READ_ONLY = {"nvidia-smi", "ps", "cat", "fuser", "ss", "netstat", "free", "df", "uptime", "dmesg", "lsof",
              "pgrep", "ls", "journalctl"}
_NVIDIA_SMI_QUERY = re.compile(r"^(-q|-x|-L|--query(-[a-z-]+)?=[a-z0-9_.,]+|--format=[a-z,]+|-d|-i|--id=[0-9,]+|"
                               r"[A-Z,]+|[0-9,]+|--display=[A-Z,]+|topo|-m)$")


def check_read_only(argv: list[str]) -> list[str]:
    """Refuse anything but the allow-listed read-only commands (a diagnostic runs even in dry-run)."""
    if argv == FUSER_NVIDIA:
        return argv
    program = argv[0].rsplit("/", 1)[-1]
    if program not in _READ_ONLY:
        raise ValueError(f"node.run runs read-only diagnostics only ({', '.join(sorted(_READ_ONLY))}); "
                         f"{program!r} is not one — use node.kill_pids or node.gpu_reset to change things")
    if program == "nvidia-smi" and not all(_NVIDIA_SMI_QUERY.fullmatch(a) for a in argv[1:]):
        raise ValueError("node.run allows nvidia-smi queries only (-q, -x, -L, --query-*, --format, -d, -i)")
    if program == "fuser" and any(a.startswith("-") and "k" in a for a in argv[1:] if not a.startswith("--")):
        raise ValueError("fuser -k kills processes; use node.kill_pids")
    if program == "cat" and not all(a.startswith("/proc/") or a.startswith("/sys/") for a in argv[1:]):
        raise ValueError("node.run reads /proc and /sys files only")
    return argv


class RunParams(ActionParams):
    node: fields.K8sName
    command: fields.Argv
    timeout: float = pydantic.Field(20.0, gt=0, le=600)

    @pydantic.field_validator("command")
    @classmethod
    def _read_only(cls, argv: list[str]) -> list[str]:
        return check_read_only(argv)


def _run(ctx: StepContext, node: str, argv: list[str], timeout: float, *, ok_codes: tuple[int, ...] = (0,)) -> str:
    out = ctx.nodes.run(node, argv, timeout=timeout)
    if out.exit_code not in ok_codes:
        raise CommandFailed(f"`{' '.join(argv)}` on {node} exited {out.exit_code}: {out.stderr.strip()[:300]}")
    return out.stdout


@action("node.run", kind=Kind.DIAGNOSTIC, params=RunParams)
def run(ctx: StepContext, p: RunParams) -> ActionResult:
    """Run an allow-listed read-only command on a GPU node (nvidia-smi queries, ps, cat /proc/…, fuser -v)."""
    out = ctx.nodes.run(p.node, p.command, timeout=p.timeout)
    ctx.evidence("command", f"{' '.join(p.command)} on {p.node}", node=p.node, command=p.command,
                 exit_code=out.exit_code, stdout=out.stdout[:16000], stderr=out.stderr[:2000], truncated=out.truncated)
    status = "ok" if out.exit_code == 0 else "failed"
    return ActionResult(status, f"`{' '.join(p.command)}` on {p.node} exited {out.exit_code}",
                        {"exit_code": out.exit_code, "stdout": out.stdout[:16000]})


class HoldersParams(ActionParams):
    node: fields.K8sName
    namespace: fields.K8sName | None = None
    serving_selector: fields.Selector | None = None  # pods whose processes must never be touched
    unaccounted_mib: float = pydantic.Field(1024.0, ge=0)  # memory gap that makes a GPU suspect
    timeout: float = pydantic.Field(20.0, gt=0, le=600)


def serving_containers(ctx: StepContext, namespace: str | None, selector: str | None) -> dict[str, str]:
    """Container id → pod name, for the ready pods of the serving selector."""
    if selector is None or ctx.world.cluster is None:
        return {}
    pods = ctx.cluster.list_pods(ctx.namespace(namespace), base.parse_selector(selector))
    return {procs.normalize_container_id(c.container_id): pod.name
            for pod in pods if pod.ready for c in pod.containers if c.container_id}


@action("node.gpu_holders", kind=Kind.DIAGNOSTIC, params=HoldersParams)
def gpu_holders(ctx: StepContext, p: HoldersParams) -> ActionResult:
    """GPU memory used vs accounted to live processes, and who holds the GPU device files.

    Each holder is mapped through `/proc/<pid>/cgroup` to a container: `serving` (a ready pod of
    `serving_selector`), `orphan` (a container that is no ready serving pod's), `host` (no container:
    nvidia-persistenced, Xorg, a host monitor), `unknown` (unreadable cgroup) or `gone`. Result:
    `suspect_gpus`, `holders`, and `orphan_pids` — the candidates for node.kill_pids: orphans that
    hold a suspect GPU and whose memory nvidia-smi does not already account for.
    """
    gpus = nvidia_smi.parse_query_gpu(_run(ctx, p.node, QUERY_GPU, p.timeout))
    apps = nvidia_smi.parse_compute_apps(_run(ctx, p.node, QUERY_APPS, p.timeout))
    fuser_out = ctx.nodes.run(p.node, FUSER_NVIDIA, timeout=p.timeout)
    entries = procs.parse_fuser(fuser_out.stdout + "\n" + fuser_out.stderr)
    serving = serving_containers(ctx, p.namespace, p.serving_selector)
    gpu_rows = []
    suspect = []
    for gpu in gpus:
        accounted = sum(a.used_memory_mib or 0 for a in apps if a.gpu_uuid == gpu.uuid)
        gap = (gpu.memory_used_mib or 0) - accounted
        row = {"index": gpu.index, "uuid": gpu.uuid, "used_mib": gpu.memory_used_mib,
               "total_mib": gpu.memory_total_mib, "accounted_mib": accounted, "unaccounted_mib": gap,
               "processes": [a.pid for a in apps if a.gpu_uuid == gpu.uuid]}
        gpu_rows.append(row)
        if gap > p.unaccounted_mib:
            suspect.append(gpu.index)
    accounted_pids = {a.pid for a in apps}
    holders: dict[int, dict] = {}
    for entry in entries:
        holder = holders.setdefault(entry.pid, {"pid": entry.pid, "command": entry.command, "user": entry.user,
                                                "devices": []})
        holder["devices"].append(entry.path)
    # One `cat /proc/<pid>/cgroup` per holder, concurrently: on a busy node there are dozens of holders.
    cgroups = fan_out(list(holders), lambda pid: ctx.nodes.run(p.node, ["cat", f"/proc/{pid}/cgroup"],
                                                               timeout=p.timeout),
                      pool_size=ctx.pool_size, deadline=max(ctx.timeout, p.timeout + 5),
                      describe=lambda pid: f"/proc/{pid}/cgroup on {p.node}")
    for done in cgroups:
        pid, holder, cgroup = done.target, holders[done.target], done.result
        if cgroup is None:
            raise done.error  # as before: a node that cannot be read fails the step
        if cgroup.exit_code != 0:
            holder.update(container_id=None, pod=None, role="gone")
            continue
        try:
            container = procs.parse_cgroup(cgroup.stdout)
            readable = True
        except ParseError:
            container, readable = None, False
        pod = serving.get(container) if container else None
        # A process in no container is a host daemon (nvidia-persistenced, Xorg, DCGM on real nodes),
        # never a dead container's leftover: it is reported, not offered for killing.
        role = "serving" if pod else "orphan" if container else "host" if readable else "unknown"
        holder.update(container_id=container, pod=pod, role=role, accounted=pid in accounted_pids)
        holder["gpus"] = sorted({int(d.removeprefix("/dev/nvidia")) for d in holder["devices"]
                                 if re.fullmatch(r"/dev/nvidia\d+", d)})
    # An orphan matters only when it holds a suspect GPU (or a device with no index, like nvidia-uvm, alone)
    # and nvidia-smi does not list it: a listed process's memory is accounted, not the unexplained gap.
    orphans = sorted(pid for pid, h in holders.items() if h.get("role") == "orphan" and not h.get("accounted")
                     and (set(h.get("gpus", [])) & set(suspect) or (not h.get("gpus") and suspect)))
    ctx.evidence("gpu", f"GPU memory and device holders on {p.node}", node=p.node, gpus=gpu_rows,
                 holders=list(holders.values()), suspect_gpus=suspect)
    summary = (f"{p.node}: {len(suspect)} GPU(s) with memory no process accounts for"
               + (f" (GPU {', '.join(map(str, suspect))})" if suspect else "")
               + f"; {len(orphans)} orphan holder(s)" + (f": {', '.join(map(str, orphans))}" if orphans else ""))
    return ActionResult.ok(summary, gpus=gpu_rows, suspect_gpus=suspect, holders=list(holders.values()),
                           orphan_pids=orphans)


class KillPidsParams(ActionParams):
    node: fields.K8sName
    pids: list[int] = pydantic.Field(max_length=64)
    signal: fields.UnixSignal = "KILL"
    namespace: fields.K8sName | None = None
    serving_selector: fields.Selector | None = None
    timeout: float = pydantic.Field(20.0, gt=0, le=300)

    @pydantic.field_validator("pids", mode="before")
    @classmethod
    def _integers(cls, value: object) -> object:
        # A PID from command output must be a plain integer, never text that a shell could read.
        if isinstance(value, list):
            for item in value:
                if isinstance(item, bool) or not (isinstance(item, int) or (isinstance(item, str) and item.isdigit())):
                    raise ValueError(f"PID {item!r} is not a whole number")
        return value


def _serving_namespace(ctx: StepContext, given: str | None) -> str | None:
    """The namespace of the pods the node serves (the step's, else the playbook's): where a cluster keeps
    the node's lock and change record. None when the playbook names none."""
    return ctx.namespace(given) if given or ctx.params.get("namespace") else None


@action("node.kill_pids", kind=Kind.REMEDIATION, params=KillPidsParams)
def kill_pids(ctx: StepContext, p: KillPidsParams) -> Plan:
    """Signal processes on a node by PID (the holders of a lingering CUDA context).

    Each process is planned by PID, start time (field 22 of /proc/<pid>/stat) and container; the
    signal goes only to a process that still has all three right before it. A PID that came back
    as another process is left alone, and the outcome says so. Refused for PID 1 and below and for
    any process that belongs to a ready pod of `serving_selector`. Not reversible.
    """
    serving = serving_containers(ctx, p.namespace, p.serving_selector)
    rows: list[dict] = []
    refusal = None
    for pid in p.pids:
        if pid <= 1:
            refusal = refusal or ("pid", f"PID {pid} is init or the kernel; never killed")
            continue
        # The start time first: whatever is read after it (the cgroup) is checked against a process
        # the apply will recognise, so a PID reused in between is never signalled.
        stat = ctx.nodes.run(p.node, ["cat", f"/proc/{pid}/stat"], timeout=p.timeout)
        if stat.exit_code != 0:
            rows.append({"pid": pid, "alive": False})
            continue
        found = identity_kill.read_stats(stat.stdout, f"/proc/{pid}/stat on {p.node}").get(pid)
        if found is None:
            raise CommandFailed(f"/proc/{pid}/stat on {p.node} describes another PID: {stat.stdout.strip()[:200]}")
        cgroup = ctx.nodes.run(p.node, ["cat", f"/proc/{pid}/cgroup"], timeout=p.timeout)
        if cgroup.exit_code != 0:
            rows.append({"pid": pid, "alive": False})  # it ended while we looked
            continue
        try:
            container = procs.parse_cgroup(cgroup.stdout)
        except ParseError:
            container = None
        if container and container in serving:
            refusal = refusal or ("serving_pod", f"PID {pid} belongs to ready serving pod {serving[container]}; never killed")
        rows.append({"pid": pid, "alive": True, "start_ticks": found.start_ticks, "state": found.state,
                     "command": found.comm, "container_id": container})
    targets = [Target(r["pid"], r["start_ticks"], r["container_id"]) for r in rows if r["alive"]]

    def apply(dry_run: bool) -> dict:
        if dry_run:
            return {}
        verdicts = identity_kill.signal(lambda argv: ctx.nodes.run(p.node, argv, timeout=p.timeout), p.signal,
                                        targets, p.node)
        return {"signalled": [v.pid for v in verdicts if v.verdict == "signalled"],
                "not_signalled": [identity_kill.not_signalled(v, t) for v, t in zip(verdicts, targets)
                                  if v.verdict != "signalled"]}

    pids = ", ".join(str(t.pid) for t in targets) or "none"
    # The node is the target, as for node.gpu_reset: a kill and a reset on one node take one lock and one budget.
    return Plan(target=f"node/{p.node}", namespace=_serving_namespace(ctx, p.namespace),
                summary=f"send SIG{p.signal} to PID {pids} on {p.node}",
                before={"processes": rows}, after={"signal": p.signal, "pids": [t.pid for t in targets]}, apply=apply,
                refusal=refusal, noop=not targets and refusal is None, server_dry_run=False)


class GpuResetParams(ActionParams):
    node: fields.K8sName
    gpu: int = pydantic.Field(ge=0, le=63)
    require_cordon: bool = True
    timeout: float = pydantic.Field(60.0, gt=0, le=600)


@action("node.gpu_reset", kind=Kind.REMEDIATION, params=GpuResetParams)
def gpu_reset(ctx: StepContext, p: GpuResetParams) -> Plan:
    """`nvidia-smi --gpu-reset -i N`: the last resort for memory held with no process left.

    Refused while any process uses or holds that GPU, and (unless `require_cordon: false`) while
    the node is not cordoned. Not reversible.
    """
    gpus = nvidia_smi.parse_query_gpu(_run(ctx, p.node, QUERY_GPU, p.timeout))
    gpu = next((g for g in gpus if g.index == p.gpu), None)
    if gpu is None:
        raise CommandFailed(f"{p.node} has no GPU {p.gpu} (GPUs: {', '.join(str(g.index) for g in gpus)})")
    apps = [a for a in nvidia_smi.parse_compute_apps(_run(ctx, p.node, QUERY_APPS, p.timeout)) if a.gpu_uuid == gpu.uuid]
    fuser_out = ctx.nodes.run(p.node, FUSER_NVIDIA, timeout=p.timeout)
    holders = sorted({e.pid for e in procs.parse_fuser(fuser_out.stdout + "\n" + fuser_out.stderr)
                      if e.path == f"/dev/nvidia{p.gpu}"})
    refusal = None
    if apps or holders:
        refusal = ("gpu_in_use", f"GPU {p.gpu} on {p.node} is still used by PID "
                                 f"{', '.join(str(x) for x in sorted({a.pid for a in apps} | set(holders)))}")
    elif p.require_cordon:
        try:
            info = ctx.cluster.get_node(p.node)
        except (BackendError, base.MissingBackend) as exc:
            refusal = ("cordon", f"cannot tell whether {p.node} is cordoned ({exc}); cordon it first")
        else:
            if not info.unschedulable:
                refusal = ("cordon", f"{p.node} is not cordoned; `kubectl cordon {p.node}` first so nothing is scheduled on it")

    def apply(dry_run: bool) -> dict:
        if dry_run:
            return {}
        _run(ctx, p.node, ["nvidia-smi", "--gpu-reset", "-i", str(p.gpu)], p.timeout)
        return {"reset": p.gpu}

    # The node, not the GPU, is the target: a reset and a kill on one node exclude each other.
    return Plan(target=f"node/{p.node}", namespace=_serving_namespace(ctx, None), summary=f"reset GPU {p.gpu} on {p.node}",
                before={"gpu": p.gpu, "memory_used_mib": gpu.memory_used_mib},
                after={"gpu": p.gpu, "memory_used_mib": 0}, apply=apply,
                refusal=refusal, server_dry_run=False)


