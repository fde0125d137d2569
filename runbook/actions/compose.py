"""`compose.*`: vLLM under Docker Compose on a host reached over SSH (SOP §6: no Kubernetes) — the
service's containers, processes, health and logs, and the guarded restart and `--max-model-len` change.

Every command is an argv list (the SSH backend quotes it with shlex.join); every value in it — node,
compose file, service, container id, flag value — is checked here before it gets there.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Literal

import pydantic

from runbook.commandline import compose_commands as commands
from runbook.commandline import compose_file
from runbook.commandline import flags
from runbook.actions import fields
from runbook.actions.base import ActionResult, Plan, StepContext
from runbook.errors import CommandFailed, InvalidInput, StalePlan
from runbook.model.duration import Duration
from runbook.parsers import procs
from runbook.model.registry import ActionParams, Kind, action


def _service(value: str) -> str:
    try:
        return commands.check_service(value)
    except InvalidInput as exc:
        raise ValueError(str(exc)) from None


def _file(value: str) -> str:
    try:
        return commands.check_file(value)
    except InvalidInput as exc:
        raise ValueError(str(exc)) from None


Service = Annotated[str, pydantic.AfterValidator(_service)]
ComposeFilePath = Annotated[str, pydantic.AfterValidator(_file)]


class ServiceParams(ActionParams):
    node: fields.K8sName
    file: ComposeFilePath
    service: Service
    timeout: float = pydantic.Field(30.0, gt=0, le=600)


def _run(ctx: StepContext, node: str, argv: list[str], timeout: float) -> str:
    out = ctx.nodes.run(node, argv, timeout=timeout)
    if out.exit_code != 0:
        raise CommandFailed(f"`{' '.join(argv[:7])}` on {node} exited {out.exit_code}: {out.stderr.strip()[:300]}")
    return out.stdout


def parse_compose_ps(text: str, where: str) -> list[dict]:
    """`docker compose ps --format json`: a JSON array (Compose < 2.21) or one object per line."""
    stripped = text.strip()
    try:
        rows = json.loads(stripped) if stripped.startswith("[") else [json.loads(line) for line in
                                                                       stripped.splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise CommandFailed(f"{where}: `docker compose ps --format json` printed no JSON ({exc})") from None
    out = []
    for row in rows:
        if not isinstance(row, dict):
            raise CommandFailed(f"{where}: `docker compose ps` row {row!r} is not an object")
        container_id = str(row.get("ID", ""))
        if not commands.CONTAINER_ID.fullmatch(container_id):
            raise CommandFailed(f"{where}: container id {container_id!r} is not hexadecimal")
        out.append({"id": container_id, "name": str(row.get("Name", ""))[:128], "service": str(row.get("Service", "")),
                    "state": str(row.get("State", "")).lower(), "health": str(row.get("Health", "")).lower(),
                    "status": str(row.get("Status", ""))[:128]})
    return out


def service_containers(ctx: StepContext, p: ServiceParams) -> list[dict]:
    where = f"{p.service} on {p.node}"
    rows = parse_compose_ps(_run(ctx, p.node, commands.ps_argv(p.file, p.service), p.timeout), where)
    return [r for r in rows if r["service"] in ("", p.service)]


def _serving(row: dict) -> bool:
    return row["state"] == "running" and row["health"] != "unhealthy"


@action("compose.ps", kind=Kind.DIAGNOSTIC, params=ServiceParams)
def ps(ctx: StepContext, p: ServiceParams) -> ActionResult:
    """The service's containers (`docker compose ps`): state and health. `unhealthy` names the service
    when none of its containers runs healthy."""
    argv = commands.ps_argv(p.file, p.service)
    text = _run(ctx, p.node, argv, p.timeout)
    rows = [r for r in parse_compose_ps(text, f"{p.service} on {p.node}") if r["service"] in ("", p.service)]
    ctx.evidence("command", f"docker compose ps {p.service} on {p.node}", node=p.node, command=argv, exit_code=0,
                 stdout=text[:16000], containers=rows)
    bad = not any(_serving(r) for r in rows)
    shown = ", ".join(f"{r['name']} {r['state']}" + (f" ({r['health']})" if r["health"] else "") for r in rows) or "none"
    return ActionResult.ok(f"{p.service} on {p.node}: {shown}", containers=rows,
                           unhealthy=[p.service] if bad else [])


def _one_container(rows: list[dict], p: ServiceParams) -> dict:
    if not rows:
        raise CommandFailed(f"service {p.service} in {p.file} on {p.node} has no container")
    if len(rows) > 1:
        raise InvalidInput(f"service {p.service} on {p.node} has {len(rows)} containers; the compose actions "
                           f"act on a service of one container (the SOP's one vLLM per host)")
    return rows[0]


class ProcessesParams(ServiceParams):
    process: fields.Pattern = "vllm\\.entrypoints|vllm serve"


@action("compose.processes", kind=Kind.DIAGNOSTIC, params=ProcessesParams)
def processes(ctx: StepContext, p: ProcessesParams) -> ActionResult:
    """The service container's processes from the host (`docker top`, which needs nothing inside a hung
    container). `unhealthy` names the service when no vLLM process is found, or every one is Z or D."""
    row = _one_container(service_containers(ctx, p), p)
    argv = commands.top_argv(row["id"])
    text = _run(ctx, p.node, argv, p.timeout)
    table = procs.parse_ps(text)
    regex = re.compile(p.process)
    matching = [x for x in table if regex.search(x.args)]
    rows = [{"pid": x.pid, "ppid": x.ppid, "stat": x.stat, "args": x.args[:200]} for x in table]
    stuck = [x for x in matching if x.zombie or x.uninterruptible]
    why = (f"no process matches {p.process!r}" if not matching else
           f"process {stuck[0].pid} is in state {stuck[0].stat}" + (" (defunct)" if stuck[0].zombie else "")
           if len(stuck) == len(matching) else None)
    ctx.evidence("command", f"docker top {row['name'] or row['id'][:12]} on {p.node}", node=p.node,
                 command=argv, stdout=text[:16000], processes=rows)
    return ActionResult.ok(f"{p.service} on {p.node}: {len(matching)} vLLM process(es)" + (f"; {why}" if why else ""),
                           processes=rows, unhealthy=[p.service] if why else [], reasons={p.service: why} if why else {})


class HealthParams(ServiceParams):
    port: int = pydantic.Field(8000, ge=1, le=65535)
    path: str = pydantic.Field("/health", pattern=commands.HEALTH_PATH.pattern)
    health_timeout: float = pydantic.Field(5.0, gt=0, le=120)
    fail_unhealthy: bool = False  # the step fails (its on_fail decides) unless /health answers 200: a check after a fix



@action("compose.health", kind=Kind.DIAGNOSTIC, params=HealthParams)
def health(ctx: StepContext, p: HealthParams) -> ActionResult:
    """`curl` on the host to the service's published port (`/health` within `health_timeout`):
    `unhealthy` names the service unless it answers 200 in time."""
    argv = commands.health_argv(p.port, p.path, p.health_timeout)
    out = ctx.nodes.run(p.node, argv, timeout=max(p.timeout, p.health_timeout + 5))
    code, _, took = out.stdout.strip().partition(" ")
    timed_out = out.exit_code == 28
    ok = out.exit_code == 0 and code == "200"
    why = (f"no answer within {p.health_timeout:g}s" if timed_out else
           f"curl exited {out.exit_code}: {out.stderr.strip()[:200]}" if out.exit_code else
           f"HTTP {code}" if not ok else None)
    answer = ({"status": code, "seconds": took or "?"} if out.exit_code == 0 else {"error": why})
    ctx.evidence("probe", f"GET {p.path} on {p.node}:{p.port}", node=p.node, port=p.port, path=p.path,
                 answers={p.service: answer}, ok=ok)
    status = "failed" if p.fail_unhealthy and not ok else "ok"
    return ActionResult(status, f"{p.service} on {p.node}: {p.path} " + ("answered 200" if ok else why),
                        {"unhealthy": [] if ok else [p.service], "reasons": {} if ok else {p.service: why}})


class LogsParams(ServiceParams):
    since: Duration = 600.0
    tail: int = pydantic.Field(2000, ge=1, le=100000)
    pattern: fields.Pattern | None = None  # counted, e.g. "CUDA out of memory|torch.OutOfMemoryError"


@action("compose.logs", kind=Kind.DIAGNOSTIC, params=LogsParams)
def logs(ctx: StepContext, p: LogsParams) -> ActionResult:
    """`docker logs --since` of the service's container (stdout and stderr); with `pattern`, the lines that
    match are counted (`matches`) and kept as evidence."""
    row = _one_container(service_containers(ctx, p), p)
    seconds = int(p.since)
    argv = commands.logs_argv(row["id"], seconds, p.tail)
    out = ctx.nodes.run(p.node, argv, timeout=p.timeout)
    if out.exit_code != 0:
        raise CommandFailed(f"`docker logs` of {p.service} on {p.node} exited {out.exit_code}: {out.stderr.strip()[:300]}")
    lines = (out.stdout + out.stderr).splitlines()
    hits = [line for line in lines if re.search(p.pattern, line)] if p.pattern else []
    shown = hits if p.pattern else lines
    ctx.evidence("logs", f"docker logs --since {seconds}s {p.service} on {p.node}", node=p.node, service=p.service,
                 count=len(shown), by_pod={p.service: len(shown)}, excerpt=shown[-40:], truncated=out.truncated)
    summary = f"{p.service} on {p.node}: {len(lines)} log line(s)" + (f", {len(hits)} matching" if p.pattern else "")
    return ActionResult.ok(summary, lines=len(lines), matches=len(hits))


# --- remediations ------------------------------------------------------------------------------------

def _target(p: ServiceParams) -> str:
    # Under node/: with a cluster configured, its Lease needs kubernetes.lock_namespace, as a node's does,
    # never a namespace read from the target's first word.
    return f"node/{p.node}/compose/{p.service}"


class RestartParams(ServiceParams):
    via: Literal["compose", "docker"] = "compose"  # `docker compose restart SERVICE`, or `docker restart ID`


@action("compose.restart", kind=Kind.REMEDIATION, params=RestartParams)
def restart(ctx: StepContext, p: RestartParams) -> Plan:
    """Restart the service's container: `docker compose -f FILE restart SERVICE` (or `docker restart` of the
    planned container id). Only the container the plan saw: one recreated since is planned again."""
    row = _one_container(service_containers(ctx, p), p)
    argv = commands.restart_argv(p.file, p.service) if p.via == "compose" else commands.docker_restart_argv(row["id"])

    def apply(dry_run: bool) -> dict:
        if dry_run:
            return {}
        now = _one_container(service_containers(ctx, p), p)
        if now["id"] != row["id"]:
            raise StalePlan(f"{p.service} on {p.node} is container {now['id'][:12]} now, not {row['id'][:12]} as planned")
        _run(ctx, p.node, argv, p.timeout)
        return {"restarted": p.service, "container": row["id"][:12]}

    serving = 1 if _serving(row) else 0
    return Plan(target=_target(p), summary=f"restart {p.service} on {p.node}: {' '.join(argv)}",
                before={"container": row["id"][:12], "state": row["state"]},
                after={"container": row["id"][:12], "state": "restarted"}, apply=apply,
                ready_before=serving, ready_after=0, touched=1, total=1, server_dry_run=False)


class SetArgParams(ServiceParams):
    flag: str = pydantic.Field(pattern=r"^--[a-z0-9][a-z0-9_-]*$")
    factor: float | None = pydantic.Field(None, gt=0)
    value: int | float | None = None
    floor: float | None = None
    ceiling: float | None = None

    @pydantic.model_validator(mode="after")
    def _one_change(self) -> "SetArgParams":
        fields.check_flag_change(self.factor, self.value, self.floor, self.ceiling)
        return self


@action("compose.set_arg", kind=Kind.REMEDIATION, params=SetArgParams, reversible=True)
def set_arg(ctx: StepContext, p: SetArgParams) -> Plan:
    """Change one flag in the service's `command:` of the compose file (e.g. `--max-model-len` × 0.9, never
    below `floor`), then `docker compose -f FILE up -d SERVICE` of that one service.

    Only the flag's value is rewritten (comments and quoting stay); the old file is kept next to it as
    `FILE.runbook-<time>.bak`. The write is refused when the file's sha256 is no longer the one planned
    from (planned again). Rollback puts the backup back, if the file is still what runbook wrote, and
    ups the service again.
    """
    text = _run(ctx, p.node, commands.cat_argv(p.file), p.timeout)
    where = f"{p.file} on {p.node}"
    edit = compose_file.plan_compose_flag(text, p.service, p.flag, factor=p.factor, value=p.value, floor=p.floor,
                                          ceiling=p.ceiling, where=where)
    refusal = flags.factor_refusal(p.flag, edit.before, edit.after, p.factor, p.floor, p.ceiling)
    planned, written = compose_file.sha256(text), compose_file.sha256(edit.text)
    backup = f"{p.file}.runbook-{ctx.now.strftime('%Y%m%dT%H%M%SZ')}.bak"
    up = commands.up_argv(p.file, p.service)

    def apply(dry_run: bool) -> dict:
        if dry_run:
            return {}
        out = ctx.nodes.run(p.node, commands.write_argv(p.file, planned, backup, edit.text), timeout=p.timeout)
        if out.exit_code == 3:
            raise StalePlan(f"{where} changed since the plan: {out.stderr.strip()[:300]}")
        if out.exit_code != 0:
            raise CommandFailed(f"writing {where} exited {out.exit_code}: {out.stderr.strip()[:300]}")
        _run(ctx, p.node, up, p.timeout)
        return {p.flag: edit.after, "where": edit.location, "backup": backup}

    def rollback() -> dict:
        out = ctx.nodes.run(p.node, commands.restore_argv(p.file, written, backup, planned), timeout=p.timeout)
        if out.exit_code != 0:
            raise CommandFailed(f"restoring {where} from {backup} exited {out.exit_code}: {out.stderr.strip()[:300]}")
        _run(ctx, p.node, up, p.timeout)
        return {p.flag: edit.before, "restored_from": backup}

    try:
        value_after = float(edit.after)
    except ValueError:
        value_after = None
    return Plan(target=_target(p), summary=f"set {edit.spelling or p.flag} of {p.service} in {p.file} on {p.node} "
                                           f"{edit.before} → {edit.after}, then up -d {p.service}",
                before={p.flag: edit.before, "sha256": planned[:12]}, after={p.flag: edit.after, "backup": backup},
                apply=apply, rollback=rollback, value_after=value_after, ready_before=1, ready_after=0, touched=1,
                total=1, refusal=refusal, noop=edit.after == edit.before and refusal is None, server_dry_run=False)
