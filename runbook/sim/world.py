"""The simulated world: `Metrics`, `Cluster`, `Nodes` and `Http` from a scenario, on virtual time.

`SimulatedWorld(scenario, clock)` exposes `.metrics`, `.cluster`, `.nodes`, `.http`,
`.world_backends()` (a `runbook.backends.base.World`) and `.mutations` (every applied change, in
order: `{"op": ..., "at": datetime, ...}`; ops are scale, set_container_argv, delete_pod,
process_killed, process_signalled, container_restarted, gpu_reset, reaction and effect).

It reads `clock.now()` and never sleeps for real: every call first applies the reaction effects
that have come due, so when the engine sleeps on a `FakeClock` the world moves on. A health
check against a hung pod advances the clock by its timeout, as a real one would take that long.

Semantics in brief (the scenario format is documented in `runbook.sim.scenario`):
- metrics: a signal's series filtered by labels (subset match), grouped by `by`, aggregated per
  the signal; values are step-wise from the points and the reactions' overrides that took
  effect at or before the time asked (never later than now); unreachable raises.
- cluster: pods with deterministic uids (uuid5 of namespace/name/generation), container ids
  (`containerd://` + 64 hex), 10.244.x.y addresses; every mutation accepts `dry_run` (validate,
  change nothing); a (re)started container is ready `restart_seconds` after it started; a new
  pod is Pending for its first 5 s.
- commands: see `sim_commands` (exact argv, real output layouts).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import threading
import urllib.parse
from collections.abc import Mapping, Sequence

from runbook.backends.base import (
    WORKLOAD_KINDS, Autoscaler, CommandResult, ContainerSpec, HttpResponse, NodeInfo, Pod, PodLog, Sample, Series, TrafficRoute, World,
    Workload, logs_asked,
)
from runbook.sim.commands import run_in_pod, run_on_node
from runbook.sim.autoscalers import SimAutoscalers
from runbook.sim.routes import SimRoutes
from runbook.sim.state import PodState, WorkloadState, WorldState, flag_value
from runbook.sim.model import ContainerState
from runbook.clock import Clock
from runbook.sim.scenario import LogEntry, Scenario
from runbook.errors import BackendUnavailable, CommandFailed, Conflict, InvalidInput, NotFound, StalePlan

__all__ = ["SimulatedWorld", "SimMetrics", "SimCluster", "SimNodes", "SimHttp", "PodAnswer", "flag_value"]

MAX_RANGE_POINTS = 11_000  # Prometheus refuses finer range queries


def _utc(t: dt.datetime) -> dt.datetime:
    if t.tzinfo is None:
        return t.replace(tzinfo=dt.timezone.utc)
    return t


def _aggregate(kind: str, values: list[float]) -> float:
    if kind == "max":
        return max(values)
    if kind == "min":
        return min(values)
    if kind == "avg":
        return sum(values) / len(values)
    return sum(values)


class SimMetrics:
    """Signals from the scenario's series; raw PromQL is not simulated."""

    def __init__(self, state: WorldState):
        self._state = state

    def _check(self) -> None:
        spec = self._state.scenario.metrics
        if spec.unreachable:
            raise BackendUnavailable(f"prometheus at {spec.url} is unreachable: connection refused")

    def _groups(self, signal: str, at: dt.datetime, labels: Mapping[str, str],
                by: Sequence[str]) -> dict[tuple[tuple[str, str], ...], float]:
        spec = next((s for s in self._state.scenario.signals if s.name == signal), None)
        if spec is None:
            return {}
        groups: dict[tuple[tuple[str, str], ...], list[float]] = {}
        for i, series in enumerate(spec.series):
            if any(series.labels.get(k) != str(v) for k, v in labels.items()):
                continue
            value = self._state.signal_value(signal, i, at)
            if value is None:
                continue
            key = tuple((b, series.labels[b]) for b in by if b in series.labels)
            groups.setdefault(key, []).append(value)
        return {k: _aggregate(spec.aggregate, v) for k, v in sorted(groups.items())}

    def query(self, signal: str, *, at: dt.datetime, labels: Mapping[str, str] = {},
              by: Sequence[str] = ()) -> list[Sample]:
        self._check()
        now = self._state.tick()
        at = min(_utc(at), now)
        return [Sample(labels=dict(k), value=v) for k, v in self._groups(signal, at, labels, by).items()]

    def query_range(self, signal: str, *, start: dt.datetime, end: dt.datetime, step_seconds: float,
                    labels: Mapping[str, str] = {}, by: Sequence[str] = ()) -> list[Series]:
        self._check()
        now = self._state.tick()
        start, end = _utc(start), _utc(end)
        if step_seconds <= 0:
            raise InvalidInput(f"range query step must be > 0, found {step_seconds}")
        if end < start:
            raise InvalidInput(f"range query ends ({end.isoformat()}) before it starts ({start.isoformat()})")
        count = int((end - start).total_seconds() // step_seconds) + 1
        if count > MAX_RANGE_POINTS:
            raise InvalidInput(f"range query of {count} points per series exceeds {MAX_RANGE_POINTS}; "
                               f"use a larger step")
        series: dict[tuple[tuple[str, str], ...], list[tuple[dt.datetime, float]]] = {}
        for k in range(count):
            t = start + dt.timedelta(seconds=k * step_seconds)
            if t > now:
                break
            for key, value in self._groups(signal, t, labels, by).items():
                series.setdefault(key, []).append((t, value))
        return [Series(labels=dict(k), points=tuple(v)) for k, v in sorted(series.items())]


class SimCluster:
    def __init__(self, state: WorldState):
        self._state = state
        self._versions: dict[str, int] = {}  # workload ref → version, bumped by each change of its spec
        self.routes = SimRoutes(state)
        self.autoscalers_of = SimAutoscalers(state)
        state.on_tick.append(self._settle_autoscalers)

    def _versioned(self, w: WorkloadState, view: Workload) -> Workload:
        return dataclasses.replace(view, resource_version=str(self._versions.get(w.ref, 1)))

    def _check_baseline(self, w: WorkloadState, what: str, resource_version: str | None, stale: str | None) -> None:
        """Refuse a change whose plan saw another version of the workload, or other values (as the API would)."""
        version = str(self._versions.get(w.ref, 1))
        if resource_version and resource_version != version:
            raise StalePlan(f"{what}: {w.ref} changed since this change was planned (version {version}, "
                            f"planned from {resource_version})")
        if stale:
            raise StalePlan(f"{what}: {stale}")

    def _bump(self, w: WorkloadState) -> None:
        self._versions[w.ref] = self._versions.get(w.ref, 1) + 1

    def _settle_autoscalers(self) -> None:
        """An autoscaler that scaled a workload back changed it, as the real one's write would."""
        for w in self.autoscalers_of.settle():
            self._bump(w)

    # ------------------------------------------------------------------ reads

    def list_pods(self, namespace: str, selector: Mapping[str, str]) -> list[Pod]:
        if not selector:
            raise InvalidInput("listing pods needs a non-empty label selector")
        now = self._state.tick()
        pods = [p for p in self._state.pods.values() if p.namespace == namespace
                and all(p.labels.get(k) == str(v) for k, v in selector.items())]
        return [p.to_pod(now) for p in sorted(pods, key=lambda p: p.name)]

    def _workload(self, namespace: str, kind: str, name: str) -> WorkloadState:
        kind = kind.lower()
        if kind not in WORKLOAD_KINDS:
            raise InvalidInput(f"unknown workload kind {kind!r} (kinds: {', '.join(WORKLOAD_KINDS)})")
        w = self._state.workload(namespace, kind, name)
        if w is None:
            raise NotFound(f'{kind}s.apps "{name}" not found in namespace {namespace}')
        return w

    def get_workload(self, namespace: str, kind: str, name: str) -> Workload:
        now = self._state.tick()
        w = self._workload(namespace, kind, name)
        return self._versioned(w, w.to_workload(now))

    def get_node(self, name: str) -> NodeInfo:
        self._state.tick()
        node = self._state.nodes.get(name)
        if node is None:
            raise NotFound(f'nodes "{name}" not found')
        return NodeInfo(name=node.name, ready=node.ready, unschedulable=node.unschedulable)

    # ------------------------------------------------------------------ mutations

    def scale(self, namespace: str, kind: str, name: str, replicas: int, *, dry_run: bool = False,
              expected_replicas: int | None = None, resource_version: str | None = None) -> Workload:
        now = self._state.tick()
        w = self._workload(namespace, kind, name)
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise InvalidInput(f"replicas must be an integer ≥ 0, found {replicas!r}")
        stale = (f"{w.ref} now has {w.replicas} replicas, not the {expected_replicas} this change was planned from"
                 if expected_replicas is not None and w.replicas != expected_replicas else None)
        self._check_baseline(w, f"scale {w.ref} to {replicas}", resource_version, stale)
        if dry_run:
            return dataclasses.replace(self._versioned(w, w.to_workload(now)), replicas=replicas)
        old = w.replicas
        self._state.record("scale", workload=w.ref, namespace=namespace, before=old, after=replicas)
        self._state.scale(w, replicas)
        self._bump(w)
        self.autoscalers_of.scaled(namespace, w.ref)
        self._state.fire("scaled", workload=w.ref, old=old, new=replicas)
        return self._versioned(w, w.to_workload(self._state.now()))

    def set_container_argv(self, namespace: str, kind: str, name: str, container: str, *,
                           command: Sequence[str] | None, args: Sequence[str] | None,
                           dry_run: bool = False, expected: ContainerSpec | None = None,
                           resource_version: str | None = None, env: Mapping[str, str] | None = None) -> Workload:
        now = self._state.tick()
        w = self._workload(namespace, kind, name)
        spec = w.to_workload(now).container(container)  # NotFound with the known containers
        stale = (f"the command line of {w.ref}/{container} changed since this change was planned"
                 if expected is not None and (spec.command, spec.args, spec.env) != (expected.command, expected.args,
                                                                                     expected.env) else None)
        self._check_baseline(w, f"set the command line of {w.ref}/{container}", resource_version, stale)
        for what, value in (("command", command), ("args", args)):
            if value is not None and (isinstance(value, str) or not all(isinstance(a, str) for a in value)):
                raise InvalidInput(f"{what} must be a list of strings, found {value!r}")
        old_command, old_args = w.containers[container]
        new = (tuple(command) if command is not None else old_command, tuple(args) if args is not None else old_args)
        old_env = spec.env
        new_env = spec.with_env_values(env or {}).env  # InvalidInput for a var it lacks or reads from elsewhere
        if dry_run:
            containers = dict(w.containers)
            containers[container] = new
            preview = WorkloadState(spec=w.spec, replicas=w.replicas, containers=containers, pods=w.pods,
                                    env={**w.env, container: new_env})
            return self._versioned(w, preview.to_workload(now))
        if new == (old_command, old_args) and new_env == old_env:
            return self._versioned(w, w.to_workload(now))
        before = {"command": list(old_command), "args": list(old_args)}
        after = {"command": list(new[0]), "args": list(new[1])}
        if new_env != old_env:  # only the vars that changed: the others may hold what is nobody's business
            before["env"] = {a.name: a.value for a, b in zip(old_env, new_env) if a != b}
            after["env"] = {b.name: b.value for a, b in zip(old_env, new_env) if a != b}
        self._state.record("set_container_argv", workload=w.ref, namespace=namespace, container=container,
                           before=before, after=after)
        w.containers[container] = new
        w.env[container] = new_env
        self._bump(w)
        for pod in list(w.pods):
            c = pod.container(container)
            if c is not None:
                self._state.restart_container(pod, c, reason="Completed", exit_code=0)
        self._state.fire("arg_changed", workload=w.ref, container=container,
                         old_argv=old_command + old_args, new_argv=new[0] + new[1], old_env=old_env, new_env=new_env)
        return self._versioned(w, w.to_workload(self._state.now()))

    def delete_pod(self, namespace: str, name: str, *, uid: str, dry_run: bool = False) -> None:
        self._state.tick()
        pod = self._pod(namespace, name)
        if pod.uid != uid:
            raise Conflict(f"pod {namespace}/{name} has uid {pod.uid}, not {uid}: it was replaced; re-read it")
        if dry_run:
            return
        entry = self._state.record("delete_pod", namespace=namespace, pod=name, uid=uid)
        entry["replacement_uid"] = self._state.recreate_pod(pod).uid
        self._state.fire("pod_deleted", pod=name)

    # ------------------------------------------------------------------ traffic routes (issue 16, item 3)

    def get_route(self, namespace: str, kind: str, name: str) -> TrafficRoute:
        return self.routes.get(namespace, kind, name)

    def set_route(self, namespace: str, kind: str, name: str, **change) -> TrafficRoute:
        return self.routes.set(namespace, kind, name, **change)

    # ------------------------------------------------------------------ autoscalers (issue 16, item 8)

    def autoscalers(self, namespace: str, kind: str, name: str) -> list[Autoscaler]:
        self._state.tick()
        self._workload(namespace, kind, name)  # NotFound as the API would say it
        return self.autoscalers_of.for_workload(namespace, kind, name)

    def set_autoscaler(self, namespace: str, kind: str, name: str, **change) -> Autoscaler:
        self._state.tick()
        return self.autoscalers_of.set(namespace, kind, name, **change)

    # ------------------------------------------------------------------ exec and logs

    def _pod(self, namespace: str, name: str) -> PodState:
        pod = self._state.pods.get((namespace, name))
        if pod is None:
            raise NotFound(f'pods "{name}" not found in namespace {namespace}')
        return pod

    def exec(self, namespace: str, pod: str, container: str, argv: Sequence[str], *,
             timeout: float) -> CommandResult:
        now = self._state.tick()
        target = self._pod(namespace, pod)
        if target.container(container) is None:
            known = ", ".join(c.name for c in target.containers)
            raise NotFound(f"container {container} is not valid for pod {pod} (containers: {known})")
        if not argv:
            raise InvalidInput("exec needs a command")
        if target.phase(now) != "Running":
            raise CommandFailed(f'unable to upgrade connection: container not found ("{container}")')
        return run_in_pod(self._state, target, container, argv, timeout)

    def logs(self, namespace: str, selector: Mapping[str, str], *, since_seconds: int,
             tail_lines: int | None = None, limit_bytes: int | None = None,
             container: str | None = None, previous: bool = False, timestamps: bool = False,
             with_previous: bool = False) -> list[PodLog]:
        if not selector:
            raise InvalidInput("reading logs needs a non-empty label selector")
        now = self._state.tick()
        listed = sorted((p for p in self._state.pods.values() if p.namespace == namespace and
                         all(p.labels.get(k) == str(v) for k, v in selector.items())), key=lambda p: p.name)
        # One listing for both logs, as the API backend reads them.
        return [log for earlier in logs_asked(previous, with_previous)
                for log in self._logs(listed, now, since_seconds, tail_lines, limit_bytes, container, earlier, timestamps)]

    def _logs(self, listed: list, now: dt.datetime, since_seconds: int, tail_lines: int | None, limit_bytes: int | None,
              container: str | None, previous: bool, timestamps: bool) -> list[PodLog]:
        out = []
        for pod in listed:
            name = container or pod.containers[0].name
            c = pod.container(name)
            if c is None:
                continue
            window = log_window(c, now, since_seconds, previous=previous)
            if window is None:  # previous=True and no restart: the API's 400, read as "no previous log"
                out.append(PodLog(pod=pod.name, text="", absent=True, previous=True))
                continue
            lines = _log_lines(self._state, pod, name, *window, timestamps=timestamps)
            if tail_lines is not None:
                lines = lines[-tail_lines:] if tail_lines > 0 else []
            text = "".join(line + "\n" for line in lines)
            truncated = False
            if limit_bytes is not None and len(text.encode()) > limit_bytes:
                text = text.encode()[:limit_bytes].decode(errors="ignore")
                truncated = True
            out.append(PodLog(pod=pod.name, text=text, truncated=truncated, previous=previous))
        return out


def log_window(c: ContainerState, now: dt.datetime, since_seconds: int | None, *,
               previous: bool = False) -> tuple[dt.datetime, dt.datetime] | None:
    """The times a container's log covers: since its start (or, with `previous`, up to its last
    termination); None where `previous` asks for a container that never terminated."""
    if previous:
        if c.last_termination is None:
            return None
        end = c.last_termination[1]
        start = end - dt.timedelta(days=365) if since_seconds is None else now - dt.timedelta(seconds=since_seconds)
        return start, end
    start = c.started_at if since_seconds is None else max(now - dt.timedelta(seconds=since_seconds), c.started_at)
    return start, now


def _log_lines(state: WorldState, pod: PodState, container: str, start: dt.datetime, end: dt.datetime, *,
               timestamps: bool = False) -> list[str]:
    timed: list[tuple[dt.datetime, int, str]] = []
    for order, entry in enumerate(pod.logs):
        if entry.container not in (None, container):
            continue
        for n, t in enumerate(_times(state, entry, end)):
            if start <= t <= end:
                text = _render(entry.text, t, n, pod)
                # The kubelet's timestamps=true prefix: RFC 3339 with nanoseconds, in UTC.
                stamp = t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond:06d}000Z "
                timed.append((t, order, stamp + text if timestamps else text))
    return [text for _, _, text in sorted(timed, key=lambda x: (x[0], x[1]))]


def _times(state: WorldState, entry: LogEntry, end: dt.datetime) -> list[dt.datetime]:
    if entry.at is not None:
        return [state.at(entry.at)]
    assert entry.every is not None
    stop = end
    if entry.until is not None:
        stop = min(stop, state.at(entry.until))
    if entry.id is not None and entry.id in state.stopped_logs:
        stop = min(stop, state.stopped_logs[entry.id])
    out, t = [], state.at(entry.from_)
    step = dt.timedelta(seconds=entry.every)
    while t <= stop:
        out.append(t)
        t += step
    return out


def _render(text: str, t: dt.datetime, n: int, pod: PodState) -> str:
    t = t.astimezone(dt.timezone.utc)
    return _token_ids(text.replace("{ts}", t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z")
            .replace("{clf}", t.strftime("%d/%b/%Y:%H:%M:%S +0000"))
            .replace("{vllm_ts}", t.strftime("%m-%d %H:%M:%S"))
            .replace("{nginx_ts}", t.strftime("%Y/%m/%d %H:%M:%S"))
            .replace("{n}", str(n)).replace("{pod}", pod.name).replace("{ip}", pod.ip))


# `{token_ids:N}`: N token ids, as vLLM's request logger prints a prompt's `prompt_token_ids` (issue 16, item 2).
_TOKEN_IDS = re.compile(r"\{token_ids:(\d{1,6})\}")


def _token_ids(text: str) -> str:
    if "{token_ids:" not in text:
        return text
    return _TOKEN_IDS.sub(lambda m: ", ".join(str(128000 + (i * 7919) % 4096) for i in range(int(m.group(1)))), text)


class SimNodes:
    def __init__(self, state: WorldState):
        self._state = state

    def run(self, node: str, argv: Sequence[str], *, timeout: float) -> CommandResult:
        self._state.tick()
        target = self._state.nodes.get(node)
        if target is None:
            known = ", ".join(self._state.nodes) or "none"
            raise NotFound(f"no node {node!r} in the inventory (nodes: {known})")
        if not argv:
            raise InvalidInput("a node command needs an argv")
        return run_on_node(self._state, target, argv, timeout)


@dataclasses.dataclass(frozen=True)
class PodAnswer:
    """What a pod's address does with one GET: answers, holds it unanswered, or refuses it (why)."""

    response: HttpResponse | None = None
    hangs: bool = False
    refused: str | None = None


class SimHttp:
    """GETs to pod addresses: `/health` answers per the pod's health."""

    def __init__(self, state: WorldState):
        self._state = state

    def answer(self, url: str) -> PodAnswer:
        """What the pod behind `url` does now, without the client's wait (a stand-in server asks this)."""
        now = self._state.tick()
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
        pod = self._state.pod_by_ip(host)
        if pod is None:
            return PodAnswer(refused=f"no route to host {host}")
        if pod.serving(now) and pod.health == "hang":
            return PodAnswer(hangs=True)
        if port not in pod.listening(now):
            return PodAnswer(refused="connection refused")
        if pod.health == "error":
            return PodAnswer(HttpResponse(status=503, elapsed_seconds=0.002,
                                          body='{"object":"error","message":"Service Unavailable","code":503}'))
        if parts.path in ("/health", "/ping"):
            return PodAnswer(HttpResponse(status=200, elapsed_seconds=0.004, body=""))
        return PodAnswer(HttpResponse(status=404, elapsed_seconds=0.003, body='{"detail":"Not Found"}'))

    def get(self, url: str, *, timeout: float) -> HttpResponse:
        answer = self.answer(url)
        if answer.hangs:
            self._state.wait(timeout)
            raise BackendUnavailable(f"GET {url} timed out after {timeout:g}s")
        if answer.response is None:
            raise BackendUnavailable(f"GET {url}: {answer.refused}")
        return answer.response


class SimulatedWorld:
    """A scenario's world on `clock`: the four backends over one shared state."""

    def __init__(self, scenario: Scenario, clock: Clock):
        self.scenario = scenario
        self.clock = clock
        self.state = WorldState(scenario, clock)
        self.metrics = SimMetrics(self.state)
        self.cluster = SimCluster(self.state)
        self.nodes = SimNodes(self.state)
        self.http = SimHttp(self.state)

    @property
    def mutations(self) -> list[dict[str, object]]:
        return self.state.mutations

    def world_backends(self) -> World:
        # Steps fan out over pods from threads; the world's state is one object, so calls take turns.
        lock = threading.RLock()
        return World(metrics=_Serialized(self.metrics, lock), cluster=_Serialized(self.cluster, lock),
                     nodes=_Serialized(self.nodes, lock), http=_Serialized(self.http, lock))


class _Serialized:
    """Every method call on the wrapped backend holds the world's lock."""

    def __init__(self, backend: object, lock: threading.RLock):
        self._backend, self._lock = backend, lock

    def __getattr__(self, name: str):
        value = getattr(self._backend, name)
        if not callable(value):
            return value

        def locked(*args, **kwargs):
            with self._lock:
                return value(*args, **kwargs)

        return locked


def build_world(scenario: Scenario, clock: Clock) -> SimulatedWorld:
    """The simulated world of a scenario on `clock` (normally `FakeClock(scenario.start)`)."""
    return SimulatedWorld(scenario, clock)
