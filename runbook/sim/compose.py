"""A Docker Compose project on a simulated host (a scenario node's `compose:`): what `docker compose ps`,
`docker top`, `docker logs`, `curl` to the port, `cat` and the compose actions' file scripts answer there.

Exact argv lists, as `runbook.commandline.compose_commands` builds them. A restart, or an `up -d` after the file's
command changed, starts a fresh vLLM process that answers /health `restart_seconds` later.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any, Annotated, Literal, Protocol

import pydantic

from runbook.commandline import compose_commands as cc
from runbook.commandline import compose_file
from runbook.backends.base import CommandResult
from runbook.errors import InvalidInput
from runbook.model.duration import parse_duration
from runbook.sim import formats as fmt


class WorldState(Protocol):
    """What a Compose host needs of the simulated world's state (runbook.sim.state.WorldState), named
    here so that this module, which the scenario model reads, does not import the state back."""

    scenario: Any
    compose: dict[str, "Runtime"]

    def at(self, offset: float) -> dt.datetime: ...

    def now(self) -> dt.datetime: ...

    def wait(self, seconds: float) -> None: ...

    def record(self, op: str, **data: Any) -> dict[str, Any]: ...

    def fire(self, kind: str, **event: Any) -> None: ...


def _offset(value: object) -> float:
    """Seconds relative to the scenario's start: a number or a duration with an optional sign (`-4d`)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value.strip()[:1] in "-+" and value.strip():
        sign = -1 if value.strip().startswith("-") else 1
        return sign * parse_duration(value.strip()[1:])
    return parse_duration(value)


Offset = Annotated[float, pydantic.BeforeValidator(_offset)]


class _Model(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")


class ComposeProcess(_Model):
    pid: int = pydantic.Field(gt=1)
    ppid: int = pydantic.Field(1, ge=0)
    stat: str = pydantic.Field("Ssl", pattern=r"^[RSDZTtWXIKNLsl<+]{1,6}$")
    args: str


class ComposeLog(_Model):
    at: Offset
    text: str  # `{vllm_ts}` becomes vLLM's timestamp (03-18 09:01:02)


class ComposeProject(_Model):
    """`nodes[].compose`: one service of one compose file, its one container as it is at the start."""

    file: str
    service: str = "vllm"
    text: str  # the compose file as it is on the host
    container_id: str = pydantic.Field(pattern=r"^[0-9a-f]{64}$")
    health: Literal["ok", "hang"] = "ok"  # hang: /health never answers (curl times out)
    port: int = 8000
    started: Offset = -345600.0
    processes: list[ComposeProcess] = pydantic.Field(min_length=1)
    logs: list[ComposeLog] = []
    restart_seconds: float = pydantic.Field(40.0, ge=0)

    @pydantic.field_validator("file")
    @classmethod
    def _file(cls, value: str) -> str:
        try:
            return cc.check_file(value)
        except InvalidInput as exc:
            raise ValueError(str(exc)) from None

    @pydantic.model_validator(mode="after")
    def _service_in_file(self) -> ComposeProject:
        cc.check_service(self.service)
        compose_file.service_command(self.text, self.service, f"compose file {self.file}")
        return self


class ComposeRestarted(_Model):
    """Trigger: the service's container was restarted (or recreated by `up -d`)."""

    node: str
    service: str = "vllm"


class ComposeArgChanged(_Model):
    """Trigger: `up -d` recreated the service with another value of `flag` in its command."""

    node: str
    service: str = "vllm"
    flag: str = pydantic.Field(pattern=r"^--[A-Za-z0-9][A-Za-z0-9_-]*$")
    at_most: float | None = None
    at_least: float | None = None


@dataclasses.dataclass
class Runtime:
    """The project as it is now: the file (and its backups), the container and what runs in it."""

    spec: ComposeProject
    text: str
    container_id: str
    running_argv: list[str]
    started_at: dt.datetime
    ready_at: dt.datetime | None  # None: the scenario's `health` holds (hang or ok) until a restart
    processes: list[ComposeProcess]
    logs: list[tuple[dt.datetime, str]]
    files: dict[str, str]  # backups and other files written beside the compose file
    generation: int = 0

    @property
    def name(self) -> str:
        project = self.spec.file.rsplit("/", 2)[-2] or "project"
        return f"{project}-{self.spec.service}-1"


def projects(state: WorldState) -> dict[str, Runtime]:
    """Every scenario node's compose project, as it is at the start."""
    out = {}
    for node in state.scenario.nodes:
        spec = getattr(node, "compose", None)
        if spec is None:
            continue
        out[node.name] = Runtime(
            spec=spec, text=spec.text, container_id=spec.container_id,
            running_argv=compose_file.service_command(spec.text, spec.service), started_at=state.at(spec.started),
            ready_at=None, processes=list(spec.processes),
            logs=[(state.at(entry.at), entry.text) for entry in spec.logs], files={})
    return out


def _ok(stdout: str = "", stderr: str = "") -> CommandResult:
    return CommandResult(stdout=stdout, stderr=stderr)


def _fail(stderr: str, code: int = 1) -> CommandResult:
    return CommandResult(stdout="", stderr=stderr, exit_code=code)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _healthy(p: Runtime, now: dt.datetime) -> bool | None:
    """True answering, False hung, None not listening yet (starting)."""
    if p.ready_at is None:
        return p.spec.health == "ok"
    return True if now >= p.ready_at else None


def answer(state: WorldState, node: str, argv: Sequence[str], timeout: float) -> CommandResult | None:
    """What the node's compose project answers to `argv`; None when the command is not about it."""
    p = state.compose.get(node)
    if p is None:
        return None
    argv = list(argv)
    now = state.now()
    spec = p.spec
    if argv == cc.ps_argv(spec.file, spec.service):
        health = {True: "", False: "", None: "starting"}[_healthy(p, now)]
        row = {"ID": p.container_id, "Name": p.name, "Service": spec.service, "State": "running",
               "Health": health, "Status": "Up"}
        return _ok(json.dumps(row) + "\n")
    if argv == cc.top_argv(p.container_id):
        rows = [fmt.PsRow(x.pid, x.ppid, x.stat, max(0, int((now - p.started_at).total_seconds())), x.args)
                for x in p.processes]
        return _ok(fmt.ps_eo(rows))
    if argv[:2] == ["docker", "logs"] and len(argv) == 7 and argv[-1] == p.container_id:
        since = int(argv[3].removesuffix("s"))
        tail = int(argv[5])
        lines = [text.replace("{vllm_ts}", t.strftime("%m-%d %H:%M:%S")) for t, text in p.logs
                 if now - dt.timedelta(seconds=since) <= t <= now][-tail:]
        return _ok(stderr="".join(line + "\n" for line in lines))  # vLLM logs to stderr
    if argv[:1] == ["curl"] and "-m" in argv and argv[-1].startswith(f"http://127.0.0.1:{spec.port}/"):
        limit = float(argv[argv.index("-m") + 1])
        healthy = _healthy(p, now)
        if healthy is None:
            return _fail(f"curl: (7) Failed to connect to 127.0.0.1 port {spec.port}: Connection refused\n", 7)
        if not healthy:
            state.wait(limit)
            return _fail(f"curl: (28) Operation timed out after {int(limit * 1000)} milliseconds with 0 bytes "
                         f"received\n", 28)
        return _ok("200 0.004117")
    if argv == cc.cat_argv(spec.file):
        return _ok(p.text)
    if argv[:3] == ["sh", "-c", cc.WRITE_SCRIPT] and argv[4] == spec.file:
        _, want, backup, new = argv[4:8]
        if _sha(p.text) != want:
            return _fail(f"runbook: {spec.file} changed since the plan (sha256 {_sha(p.text)}, planned {want})\n", 3)
        if backup in p.files:
            return _fail(f"runbook: backup {backup} already exists\n", 4)
        p.files[backup], p.text = p.text, new
        state.record("compose_file_written", node=node, file=spec.file, backup=backup)
        return _ok()
    if argv[:3] == ["sh", "-c", cc.RESTORE_SCRIPT] and argv[4] == spec.file:
        _, written, backup, original = argv[4:8]
        if _sha(p.text) == original:
            return _ok()
        if _sha(p.text) != written or _sha(p.files.get(backup, "")) != original:
            return _fail(f"runbook: {spec.file} changed since runbook wrote it; restore {backup} by hand\n", 3)
        p.text = p.files[backup]
        state.record("compose_file_restored", node=node, file=spec.file, backup=backup)
        return _ok()
    if argv == cc.restart_argv(spec.file, spec.service) or argv == cc.docker_restart_argv(p.container_id):
        _start(state, node, p, now, recreate=False)
        return _ok(stderr=f" Container {p.name}  Restarting\n Container {p.name}  Started\n")
    if argv == cc.up_argv(spec.file, spec.service):
        new_argv = compose_file.service_command(p.text, spec.service)
        if new_argv == p.running_argv:
            return _ok(stderr=f" Container {p.name}  Running\n")
        old_argv, p.running_argv = p.running_argv, new_argv
        _start(state, node, p, now, recreate=True)
        state.fire("compose_arg_changed", node=node, service=spec.service, old_argv=old_argv, new_argv=new_argv)
        return _ok(stderr=f" Container {p.name}  Recreate\n Container {p.name}  Recreated\n"
                          f" Container {p.name}  Starting\n Container {p.name}  Started\n")
    if argv[:1] == ["docker"]:
        return _fail(f"runbook drill: this host's compose project has no answer for {' '.join(argv)!r}\n", 1)
    return None


def _start(state: WorldState, node: str, p: Runtime, now: dt.datetime, *, recreate: bool) -> None:
    """A fresh vLLM process in the container (a new container when recreated), serving `restart_seconds` later."""
    p.generation += 1
    if recreate:
        p.container_id = hashlib.sha256(f"{p.spec.container_id}/{p.generation}".encode()).hexdigest()
    main = next((x for x in p.spec.processes if re.search(r"vllm", x.args)), p.spec.processes[0])
    pid = max(x.pid for x in p.spec.processes) + 1000 * p.generation
    p.processes = [ComposeProcess(pid=pid, ppid=pid - 21, stat="Ssl",
                                  args=" ".join(["python3", "-m", "vllm.entrypoints.openai.api_server",
                                                 *p.running_argv]) if recreate else main.args)]
    p.started_at = now
    p.ready_at = now + dt.timedelta(seconds=p.spec.restart_seconds)
    p.logs.append((p.ready_at, "INFO:     Application startup complete."))
    state.record("compose_restarted", node=node, service=p.spec.service, recreated=recreate,
                 container=p.container_id[:12])
    state.fire("compose_restarted", node=node, service=p.spec.service)


def flag_number(argv: Sequence[str], flag: str) -> float | None:
    """The numeric value of `flag` (`--flag=v` or `--flag v`) in argv; None when absent or not a number."""
    for i, word in enumerate(argv):
        value = word.split("=", 1)[1] if word.startswith(flag + "=") else (
            argv[i + 1] if word == flag and i + 1 < len(argv) else None)
        if value is not None:
            try:
                return float(value)
            except ValueError:
                return None
    return None


def matches(on: ComposeRestarted | ComposeArgChanged, kind: str, event: dict) -> bool:
    if event.get("node") != on.node or event.get("service") != on.service:
        return False
    if kind == "compose_restarted":
        return True
    assert isinstance(on, ComposeArgChanged)
    old, new = flag_number(event["old_argv"], on.flag), flag_number(event["new_argv"], on.flag)
    if new is None or old == new:
        return False
    return (on.at_most is None or new <= on.at_most) and (on.at_least is None or new >= on.at_least)
