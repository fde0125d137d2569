"""In-memory fakes of the backends, for tests of the engine and of your own playbooks.

Fakes hold state and record mutations; an unexpected call raises at once instead of returning
a default. Use them with `FakeClock` so that verification windows take no real time.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from runbook.backends.base import (CommandResult, ContainerSpec, ContainerStatus, HttpResponse, NodeInfo, Pod, PodLog,
                                   Sample, Series, Workload, logs_asked)
from runbook.errors import BackendUnavailable, Conflict, InvalidInput, NotFound, StalePlan

Value = float | Callable[[dt.datetime], float]


class FakeMetrics:
    """Signals as constants or functions of time, aggregated by sum; `down=True` is unreachable."""

    def __init__(self, signals: Mapping[str, Value] | None = None, *, down: bool = False):
        self.signals: dict[str, Value] = dict(signals or {})
        self.down = down
        self.queries: list[tuple[str, dt.datetime]] = []

    def _value(self, signal: str, at: dt.datetime) -> float | None:
        if self.down:
            raise BackendUnavailable("prometheus at fake:// is unreachable")
        self.queries.append((signal, at))
        if signal not in self.signals:
            return None
        value = self.signals[signal]
        return float(value(at) if callable(value) else value)

    def query(self, signal: str, *, at: dt.datetime, labels: Mapping[str, str] = {},
              by: Sequence[str] = ()) -> list[Sample]:
        value = self._value(signal, at)
        return [] if value is None else [Sample({k: "x" for k in by}, value)]

    def query_range(self, signal: str, *, start: dt.datetime, end: dt.datetime, step_seconds: float,
                    labels: Mapping[str, str] = {}, by: Sequence[str] = ()) -> list[Series]:
        points = []
        at = start
        while at <= end:
            value = self._value(signal, at)
            if value is not None:
                points.append((at, value))
            at += dt.timedelta(seconds=step_seconds)
        return [Series({}, tuple(points))] if points else []


@dataclasses.dataclass
class FakeWorkload:
    kind: str
    name: str
    namespace: str
    replicas: int
    selector: dict[str, str]
    containers: list[ContainerSpec]
    ready: list[bool]  # readiness of pods name-0 … name-(n-1)
    version: int = 1  # bumped by every change of replicas or containers (its resourceVersion)


class FakeCluster:
    """Workloads whose pods are `name-0…`; scale, argv patches and deletes change them in place."""

    def __init__(self, workloads: Sequence[FakeWorkload] = (), nodes: Mapping[str, NodeInfo] | None = None):
        self.workloads = {(w.namespace, w.kind, w.name): w for w in workloads}
        self.nodes = dict(nodes or {})
        self.mutations: list[tuple[Any, ...]] = []
        self.deleted: list[str] = []
        self.exec_answers: dict[tuple[str, tuple[str, ...]], CommandResult] = {}
        self.generation = 0

    def _workload(self, namespace: str, kind: str, name: str) -> FakeWorkload:
        try:
            return self.workloads[(namespace, kind, name)]
        except KeyError:
            raise NotFound(f"{kind}/{name} not found in {namespace}") from None

    def _pods(self, w: FakeWorkload) -> list[Pod]:
        return [Pod(name=f"{w.name}-{i}", namespace=w.namespace, uid=f"uid-{w.name}-{i}-{self.generation}",
                    phase="Running", ready=w.ready[i] if i < len(w.ready) else True, node="node-a",
                    ip=f"192.0.2.{i + 1}", labels=dict(w.selector), owner=f"{w.kind}/{w.name}",
                    containers=tuple(ContainerStatus(c.name, True, container_id=f"containerd://{i:064x}")
                                     for c in w.containers))
                for i in range(w.replicas)]

    def list_pods(self, namespace: str, selector: Mapping[str, str]) -> list[Pod]:
        if not selector:
            raise InvalidInput("an empty selector would match every pod")
        return [p for w in self.workloads.values() if w.namespace == namespace
                and all(w.selector.get(k) == v for k, v in selector.items()) for p in self._pods(w)]

    def get_workload(self, namespace: str, kind: str, name: str) -> Workload:
        w = self._workload(namespace, kind, name)
        ready = sum(1 for p in self._pods(w) if p.ready)
        return Workload(kind, name, namespace, w.replicas, ready, dict(w.selector), tuple(w.containers),
                        resource_version=str(w.version))

    @staticmethod
    def _check_baseline(w: FakeWorkload, resource_version: str | None, stale: str | None) -> None:
        if resource_version and resource_version != str(w.version):
            raise StalePlan(f"{w.kind}/{w.name} is at version {w.version}, not {resource_version} as planned")
        if stale:
            raise StalePlan(stale)

    def get_node(self, name: str) -> NodeInfo:
        if name not in self.nodes:
            raise NotFound(f"node {name} not found")
        return self.nodes[name]

    def scale(self, namespace: str, kind: str, name: str, replicas: int, *, dry_run: bool = False,
              expected_replicas: int | None = None, resource_version: str | None = None) -> Workload:
        w = self._workload(namespace, kind, name)
        self._check_baseline(w, resource_version, f"{kind}/{name} has {w.replicas} replicas, not {expected_replicas}"
                             if expected_replicas is not None and expected_replicas != w.replicas else None)
        if not dry_run:
            self.mutations.append(("scale", f"{kind}/{name}", w.replicas, replicas))
            w.ready = (w.ready + [True] * replicas)[:replicas]
            w.replicas = replicas
            w.version += 1
        return self.get_workload(namespace, kind, name)

    def set_container_argv(self, namespace: str, kind: str, name: str, container: str, *,
                           command: Sequence[str] | None, args: Sequence[str] | None,
                           dry_run: bool = False, expected: ContainerSpec | None = None,
                           resource_version: str | None = None, env: Mapping[str, str] | None = None) -> Workload:
        w = self._workload(namespace, kind, name)
        index = next((i for i, c in enumerate(w.containers) if c.name == container), None)
        if index is None:
            raise NotFound(f"{kind}/{name} has no container {container}")
        seen = w.containers[index]
        changed = expected is not None and (seen.command, seen.args, seen.env) != (expected.command, expected.args,
                                                                                   expected.env)
        self._check_baseline(w, resource_version, f"{kind}/{name}/{container} changed since planned" if changed else None)
        new = ContainerSpec(container, tuple(command) if command is not None else seen.command,
                            tuple(args) if args is not None else seen.args, seen.env).with_env_values(env or {})
        if not dry_run:
            w.version += 1
            self.mutations.append(("set_argv", f"{kind}/{name}", container, seen, new))
            w.containers[index] = new
        return self.get_workload(namespace, kind, name)

    def autoscalers(self, namespace: str, kind: str, name: str) -> list:
        self._workload(namespace, kind, name)
        return []  # nothing else scales these workloads (issue 16, item 8)

    def set_autoscaler(self, namespace: str, kind: str, name: str, **change: Any) -> Any:
        raise NotFound(f"{kind}/{name} not found in {namespace}")

    def delete_pod(self, namespace: str, name: str, *, uid: str, dry_run: bool = False) -> None:
        for w in self.workloads.values():
            for pod in self._pods(w):
                if pod.name == name and pod.namespace == namespace:
                    if pod.uid != uid:
                        raise Conflict(f"pod {name} has uid {pod.uid}, not {uid}")
                    if not dry_run:
                        self.mutations.append(("delete", name))
                        self.deleted.append(name)
                        w.ready[int(name.rsplit("-", 1)[1])] = True  # recreated healthy
                        self.generation += 1
                    return
        raise NotFound(f"pod {name} not found")

    def exec(self, namespace: str, pod: str, container: str, argv: Sequence[str], *, timeout: float) -> CommandResult:
        key = (pod, tuple(argv))
        if key in self.exec_answers:
            return self.exec_answers[key]
        raise AssertionError(f"unexpected exec in {pod}: {argv}")

    def logs(self, namespace: str, selector: Mapping[str, str], *, since_seconds: int, tail_lines: int | None = None,
             limit_bytes: int | None = None, container: str | None = None, previous: bool = False,
             timestamps: bool = False, with_previous: bool = False) -> list[PodLog]:
        pods = self.list_pods(namespace, selector)
        return [PodLog(p.name, "", previous=earlier) for earlier in logs_asked(previous, with_previous) for p in pods]


class FakeNodes:
    def __init__(self, answers: Mapping[tuple[str, tuple[str, ...]], CommandResult] | None = None):
        self.answers = dict(answers or {})
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    def run(self, node: str, argv: Sequence[str], *, timeout: float) -> CommandResult:
        self.calls.append((node, tuple(argv)))
        try:
            return self.answers[(node, tuple(argv))]
        except KeyError:
            raise AssertionError(f"unexpected command on {node}: {argv}") from None


class FakeHttp:
    def __init__(self, answers: Mapping[str, int] | None = None):
        self.answers = dict(answers or {})

    def get(self, url: str, *, timeout: float) -> HttpResponse:
        if url not in self.answers:
            raise BackendUnavailable(f"{url} timed out after {timeout:g}s")
        return HttpResponse(self.answers[url], 0.01)
