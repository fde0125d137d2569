"""Scenario files: the simulated world a drill runs a playbook against.

A scenario is one YAML file (bundled ones live in `runbook/scenarios/`). It describes a world at
the moment an alert fires (T0 = `start`), its history, and how it reacts to remediations.
Every time in the file is **seconds relative to T0** unless said otherwise: a number (`-300`,
`60`) or a duration with a sign (`-5m`, `-24h`, `90s`). Every mapping rejects unknown keys.

```yaml
name: oom-surge                   # [a-z0-9-]; bundled files are named NAME.yaml
playbook: oom-surge               # the bundled playbook it drills
expect: resolved                  # resolved | refused | mitigated: how a correct playbook run ends
description: >-                   # shown at the start of the drill
  ...
start: 2026-03-14T03:12:07Z       # T0, with a timezone
onset: -7m                        # optional: when the playbook's detect condition starts to hold;
                                  #   the RCA report finds its onset milestone there (within a step)
alert: {source: alertmanager, name: VllmOomSurge, labels: {...}, annotations: {...}}
params: {}                        # playbook param overrides
metrics: {unreachable: false, url: sim://prometheus.monitoring.svc:9090}

nodes:
  - name: gpu-node-0
    ready: true                   # default true
    unschedulable: false          # cordoned; default false
    gpus:
      - {index: 0, name: NVIDIA A10, memory_total_mib: 23028, utilization_pct: 97,
         baseline_used_mib: 0,     # used memory no listed process accounts for (default 0)
         uuid: GPU-..., bus_id: 00000000:00:1E.0, reserved_mib: ..., bar1_total_mib: ...}  # optional
    processes:                    # host processes that belong to no live pod (pod processes
      - pid: 48213                #   are derived from the pods below)
        ppid: 1
        stat: Sl                  # ps STAT: S, Sl, D, Z, ...
        args: python3 -m vllm.entrypoints.openai.api_server --model=...
        user: root
        started: -2d              # when it started (etimes)
        container_id: <64 hex>    # its cgroup: kubepods .../pod<pod_uid>.slice/cri-containerd-<id>.scope
        pod_uid: <uuid>           #   (or `cgroup: "0::/..."` verbatim; neither: a system.slice scope)
        gpu_index: 1
        gpu_memory_mib: 79872
        alive: true               # false: already exited, its memory still held (needs a GPU reset)
        visible_to_nvidia_smi: false   # false: not in --query-compute-apps (container gone)
        holds_devices: [/dev/nvidia1, /dev/nvidiactl, /dev/nvidia-uvm]  # default: ctl, nvidiaN, uvm
        frees_memory_on_kill: true
        free_after: 5s            # memory released this long after it dies
        ignores_term: false       # SIGTERM not handled

workloads:
  - kind: statefulset             # statefulset (pods NAME-0..N-1) | deployment (NAME-<hash>-<5>)
    name: vllm-server
    namespace: llm
    replicas: 3
    selector: {app: vllm-server}  # pod labels = selector + labels
    labels: {}
    containers: [{name: vllm, command: [python3, -m, ...], args: [--port=8000, ...],
                  env: [{name: VLLM_ADDITIONAL_ARGS, value: "--max-model-len 8192"},   # flags set_arg finds
                        {name: HF_TOKEN, value_from: secretKeyRef huggingface/token}]}]  # set elsewhere
    restart_seconds: 45           # a (re)started container is ready this long after it starts
    placement: [{node: gpu-node-0, gpu_index: 0}, ...]   # by ordinal, cycled
    gpu_memory_mib: 21870         # the main process's GPU memory
    qos: burstable                # cgroup slice: burstable | guaranteed | besteffort
    started: -5d
    logs: []                      # log entries (below) of every pod

pods:                             # per-pod overrides of workload pods, by name
  - name: vllm-server-2
    ready: false                  # readiness probe result
    health: hang                  # GET /health: ok | hang (times out) | error (503)
    node: gpu-node-1
    gpu_index: 0
    gpu_memory_mib: 22106
    listening_ports: []           # default: the --port flag of the args, else 8000
    processes:                    # the pod's process table (default: pid 1 = the container's argv)
      - {pid: 1, ppid: 0, stat: Dsl, args: null, host_pid: 3121, main: true}   # args null: argv
      - {pid: 87, ppid: 1, stat: Z, args: "[python3] <defunct>"}
    last_termination: {reason: OOMKilled, at: -4m, exit_code: 137}
    restart_count: 2
    started: -3h
    logs: []

extra_pods:                       # pods of other workloads, e.g. the gateway
  - {name: api-gateway-7d9f-abc, namespace: llm, labels: {app: api-gateway},
     owner: deployment/api-gateway, node: cpu-node-0, containers: [gateway], logs: [...]}

routes:                           # traffic routes (canary-rollback), changed by k8s.route_to_stable
  - {kind: service, name: vllm, namespace: llm, selector: {app: vllm, version: v2}}
  - {kind: ingress, name: vllm-canary, namespace: llm, weights: {vllm-v2: 20}}   # its canary-weight
  - {kind: httproute, name: vllm, namespace: llm, weights: {vllm-v1: 80, vllm-v2: 20}}

autoscalers:                      # what else scales a workload (issue 16, item 8); held by k8s.scale
  - {kind: hpa, name: vllm-server, namespace: llm, target: statefulset/vllm-server,
     min_replicas: 2, max_replicas: 6, sync_seconds: 15s}   # puts replicas back in [2, 6] 15 s after a scale
  - {kind: scaledobject, name: vllm, namespace: llm, target: deployment/vllm, min_replicas: 1,
     max_replicas: 4, paused_replicas: null}                # KEDA's autoscaling.keda.sh/paused-replicas

# log entries: one line at a time, or one line repeated `every` from `from` (default -1h) until
# `until` (default: forever, or a reaction's `stop_logs: ID`). `{ts}` in the text becomes the
# ISO time (2026-03-14T03:10:02.000Z), `{clf}` the access-log time (14/Mar/2026:03:10:02 +0000),
# `{vllm_ts}` vLLM's (03-14 03:10:02), `{nginx_ts}` nginx's error log (2026/03/14 03:10:02),
# `{n}` the repetition's number, `{pod}`/`{ip}` the pod's name and address.
#   - {at: -200, text: "..."}
#   - {id: gw-503, every: 20s, from: -4m, text: '... "POST /v1/completions HTTP/1.1" 503 ...'}

signals:
  - name: oom_failures_per_min
    aggregate: sum                # sum | max | min | avg over the series of one group
    help: what it is
    series:
      - labels: {namespace: llm, pod: vllm-server-0}
        points: [[-1d, 0], [-5m, 3], [0, 7]]   # step-wise: a value holds until the next point;
                                                # null: no sample from then (a scrape that fails)

reactions:                        # how the world answers remediations
  - name: lower-max-model-len-stops-ooms
    on: {arg_changed: {workload: statefulset/vllm-server, container: vllm,
                       flag: --max-model-len, at_most: 7000}}
    effects:                      # times relative to the triggering event
      - {after: 60, signal: oom_failures_per_min, value: 0}          # every series
      - {after: 60, signal: kv_cache_usage, labels: {pod: vllm-server-0}, value: 0.78}
      - {signal: waiting_requests, points: [[30, 40], [90, 12]]}      # several steps
      - {signal: x, labels: {...}, absent: true}                      # series stops
      - {after: 40, pod: vllm-server-2, ready: true, health: ok}
      - {after: 5, free_gpu_memory: {node: gpu-node-2, gpu_index: 1}}
      - {after: 30, stop_logs: gw-503}
    once: true                    # default: fires the first time only
  # triggers: arg_changed {workload, container?, flag, at_most? | at_least? | equals? | absent?}
  #           scaled {workload, replicas_at_most? | replicas_at_least?}
  #           pod_deleted {pod}   process_killed {pod, pattern}   (regex searched in args)
  #           node_pid_killed {node, pid}   gpu_reset {node, gpu_index}
  #           route_changed {route: service/vllm, selects?: {version: v1}, weights?: {vllm-v2: 0}}

commands:                         # canned answers, before the world's own (exact argv)
  - {pod: vllm-server-0, argv: [curl, -s, localhost:8000/metrics], stdout: "...", exit_code: 0}
  - {node: gpu-node-2, argv: [dmesg], stdout: "...", hang: false}   # hang: times out

recorded:                         # written by `runbook drill --from INCIDENT` (runbook.drill.record)
  incident: 20260314-031207-oom-surge-6fc6
  missing: [...]                  # what the journal did not hold, and so is not replayed
  assumed: [...]                  # what was filled in to make a world, and how
```

Series whose `pod` label names a workload pod that has been scaled away drop out of queries
from that moment (as Prometheus marks them stale), and come back if the pod does.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.resources
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic

from runbook.errors import InvalidInput
from runbook.model.duration import parse_duration
from runbook.model.patterns import checked_regex
from runbook.sim.compose import ComposeArgChanged, ComposeProject, ComposeRestarted

__all__ = [
    "Scenario", "load_scenario", "list_scenarios", "scenario_names", "workload_pod_name",
]


# ---------------------------------------------------------------------------- value types

def _offset(value: object) -> float:
    """Seconds relative to T0: a number or a duration with an optional sign (`-5m`)."""
    if isinstance(value, str) and value.strip().startswith("-"):
        return -parse_duration(value.strip()[1:])
    if isinstance(value, str) and value.strip().startswith("+"):
        return parse_duration(value.strip()[1:])
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return parse_duration(value)


def _labels(value: object) -> object:
    if isinstance(value, Mapping):
        return {str(k): (str(v).lower() if isinstance(v, bool) else str(v)) if isinstance(v, (int, float, bool))
                else v for k, v in value.items()}
    return value


Offset = Annotated[float, pydantic.BeforeValidator(_offset)]
Duration = Annotated[float, pydantic.BeforeValidator(parse_duration)]
Labels = Annotated[dict[str, str], pydantic.BeforeValidator(_labels)]
Health = Literal["ok", "hang", "error"]
_NAME = r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$"


class _Model(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)


def _exactly_one(model: pydantic.BaseModel, fields: tuple[str, ...], what: str) -> str:
    present = [f for f in fields if getattr(model, f) is not None]
    if len(present) != 1:
        found = ", ".join(present) or "none"
        raise ValueError(f"{what}: give exactly one of {', '.join(fields)} (found: {found})")
    return present[0]


# ---------------------------------------------------------------------------- world parts

class Alert(_Model):
    source: Literal["alertmanager", "pagerduty"] = "alertmanager"
    name: str
    labels: Labels = {}
    annotations: Labels = {}


class MetricsSpec(_Model):
    unreachable: bool = False
    url: str = "sim://prometheus.monitoring.svc:9090"


class Gpu(_Model):
    index: int = pydantic.Field(ge=0)
    name: str = "NVIDIA A10"
    uuid: str | None = None
    bus_id: str | None = None
    memory_total_mib: int = pydantic.Field(gt=0)
    reserved_mib: int | None = pydantic.Field(default=None, ge=0)
    baseline_used_mib: int = pydantic.Field(default=0, ge=0)
    utilization_pct: int = pydantic.Field(default=0, ge=0, le=100)
    bar1_total_mib: int | None = pydantic.Field(default=None, gt=0)


class NodeProcess(_Model):
    pid: int = pydantic.Field(ge=2)
    ppid: int = pydantic.Field(default=1, ge=0)
    stat: str = pydantic.Field(default="Sl", pattern=r"^[RSDZTtWXIK][<NLsl+]*$")
    args: str = pydantic.Field(min_length=1)
    user: str = "root"
    started: Offset = -86400.0
    container_id: str | None = pydantic.Field(default=None, pattern=r"^[0-9a-f]{64}$")
    pod_uid: str | None = None
    cgroup: str | None = None
    gpu_index: int | None = pydantic.Field(default=None, ge=0)
    gpu_memory_mib: int = pydantic.Field(default=0, ge=0)
    alive: bool = True
    visible_to_nvidia_smi: bool = True
    holds_devices: list[str] | None = None
    frees_memory_on_kill: bool = True
    free_after: Duration = 0.0
    ignores_term: bool = False


class Node(_Model):
    name: str = pydantic.Field(pattern=_NAME)
    ready: bool = True
    unschedulable: bool = False
    gpus: list[Gpu] = []
    processes: list[NodeProcess] = []
    compose: ComposeProject | None = None  # a Docker Compose host: its vLLM service (runbook.sim.compose)

    @pydantic.model_validator(mode="after")
    def _unique(self) -> Node:
        _no_duplicates([g.index for g in self.gpus], f"node {self.name}: GPU index")
        _no_duplicates([p.pid for p in self.processes], f"node {self.name}: process pid")
        for p in self.processes:
            if p.gpu_index is not None and p.gpu_index not in {g.index for g in self.gpus}:
                raise ValueError(f"node {self.name}: process {p.pid} uses GPU {p.gpu_index}, "
                                 f"which the node does not have")
        return self


class EnvEntry(_Model):
    """One env var of a container, as Kubernetes has it: a written value, or one from elsewhere."""

    name: str = pydantic.Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
    value: str | None = None  # neither given: the empty string, as in Kubernetes
    value_from: str | None = pydantic.Field(None, min_length=1)  # where its valueFrom points, in words

    @pydantic.model_validator(mode="after")
    def _one_source(self) -> EnvEntry:
        if self.value is not None and self.value_from is not None:
            raise ValueError(f"env {self.name}: give `value` or `value_from`, not both")
        return self


class Container(_Model):
    name: str = pydantic.Field(pattern=_NAME)
    command: list[str] = []
    args: list[str] = []
    env: list[EnvEntry] = []


class Placement(_Model):
    node: str
    gpu_index: int | None = pydantic.Field(default=None, ge=0)


class LogEntry(_Model):
    text: str
    at: Offset | None = None
    every: Duration | None = pydantic.Field(default=None, gt=0)
    from_: Offset = pydantic.Field(default=-3600.0, alias="from")
    until: Offset | None = None
    id: str | None = None
    container: str | None = None

    @pydantic.model_validator(mode="after")
    def _shape(self) -> LogEntry:
        _exactly_one(self, ("at", "every"), "log entry")
        if self.at is not None and ("from_" in self.model_fields_set or self.until is not None):
            raise ValueError("log entry: `from` and `until` go with `every`, not with `at`")
        return self


class Workload(_Model):
    kind: Literal["statefulset", "deployment"]
    name: str = pydantic.Field(pattern=_NAME)
    namespace: str = pydantic.Field(pattern=_NAME)
    replicas: int = pydantic.Field(ge=0)
    selector: Labels = pydantic.Field(min_length=1)
    labels: Labels = {}
    annotations: Labels = {}  # the workload's own, e.g. argocd.argoproj.io/tracking-id (issue 16, item 8)
    containers: list[Container] = pydantic.Field(min_length=1)
    restart_seconds: Duration = 45.0
    placement: list[Placement] = []
    gpu_memory_mib: int = pydantic.Field(default=0, ge=0)
    qos: Literal["burstable", "guaranteed", "besteffort"] = "burstable"
    started: Offset = -5 * 86400.0
    logs: list[LogEntry] = []

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.name}"

    @pydantic.model_validator(mode="after")
    def _unique(self) -> Workload:
        _no_duplicates([c.name for c in self.containers], f"{self.ref}: container")
        return self


class PodProcess(_Model):
    pid: int = pydantic.Field(ge=1)
    ppid: int = pydantic.Field(default=0, ge=0)
    stat: str = pydantic.Field(default="Sl", pattern=r"^[RSDZTtWXIK][<NLsl+]*$")
    args: str | None = None  # None: the container's command + args
    user: str = "root"
    host_pid: int | None = pydantic.Field(default=None, ge=2)
    started: Offset | None = None  # None: when the container started
    main: bool | None = None  # None: pid 1 is the main process
    container: str | None = None
    gpu_memory_mib: int | None = pydantic.Field(default=None, ge=0)  # None: main gets the pod's
    visible_to_nvidia_smi: bool = True
    holds_devices: list[str] | None = None
    ignores_term: bool = False


class Termination(_Model):
    reason: str
    at: Offset
    exit_code: int = 137


class PodOverride(_Model):
    name: str
    ready: bool | None = None
    health: Health | None = None
    node: str | None = None
    gpu_index: int | None = pydantic.Field(default=None, ge=0)
    gpu_memory_mib: int | None = pydantic.Field(default=None, ge=0)
    processes: list[PodProcess] | None = None
    listening_ports: list[int] | None = None
    last_termination: Termination | None = None
    restart_count: int | None = pydantic.Field(default=None, ge=0)
    started: Offset | None = None
    logs: list[LogEntry] = []

    @pydantic.model_validator(mode="after")
    def _unique(self) -> PodOverride:
        if self.processes is not None:
            _no_duplicates([p.pid for p in self.processes], f"pod {self.name}: process pid")
        return self


class ExtraPod(_Model):
    name: str = pydantic.Field(pattern=_NAME)
    namespace: str = pydantic.Field(pattern=_NAME)
    labels: Labels = pydantic.Field(min_length=1)
    owner: str = ""
    node: str = ""
    containers: list[str] = pydantic.Field(default=["main"], min_length=1)
    ready: bool = True
    restart_count: int = pydantic.Field(default=0, ge=0)
    started: Offset = -8 * 86400.0
    logs: list[LogEntry] = []


class SignalSeries(_Model):
    labels: Labels = {}
    points: list[tuple[Offset, float | None]] = pydantic.Field(min_length=1)  # None: no sample (stale)

    @pydantic.model_validator(mode="after")
    def _sorted(self) -> SignalSeries:
        times = [t for t, _ in self.points]
        if any(b <= a for a, b in zip(times, times[1:])):
            raise ValueError(f"series {self.labels}: point times must increase strictly, found {times}")
        return self


class Signal(_Model):
    name: str = pydantic.Field(pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")
    aggregate: Literal["sum", "max", "min", "avg"] = "sum"
    help: str = ""
    series: list[SignalSeries] = []


class Route(_Model):
    """A traffic route (issue 16, item 3): a Service by its selector, an ingress-nginx canary Ingress
    by its canary-weight (one backend), an HTTPRoute by its backends' weights."""

    kind: Literal["service", "ingress", "httproute"]
    name: str = pydantic.Field(pattern=_NAME)
    namespace: str = pydantic.Field(pattern=_NAME)
    selector: Labels = {}
    weights: dict[str, Annotated[int, pydantic.Field(ge=0, le=1000)]] = {}

    @pydantic.model_validator(mode="after")
    def _shape(self) -> Route:
        if self.kind == "service" and (self.weights or not self.selector):
            raise ValueError(f"route service/{self.name}: a Service has a `selector`, not weights")
        if self.kind != "service" and (self.selector or not self.weights):
            raise ValueError(f"route {self.kind}/{self.name}: give `weights` (backend Service: weight), not a selector")
        if self.kind == "ingress" and len(self.weights) != 1:
            raise ValueError(f"route ingress/{self.name}: a canary Ingress has one weight, of its one backend")
        return self


class ScenarioAutoscaler(_Model):
    """An HPA or a KEDA ScaledObject scaling a workload (issue 16, item 8): it puts the workload's
    replicas back within its bounds `sync_seconds` after a scale outside them, unless held there."""

    kind: Literal["hpa", "scaledobject"]
    name: str = pydantic.Field(pattern=_NAME)
    namespace: str = pydantic.Field(pattern=_NAME)
    target: str  # statefulset/vllm-server
    min_replicas: int = pydantic.Field(1, ge=0)
    max_replicas: int = pydantic.Field(ge=1)
    paused_replicas: int | None = pydantic.Field(None, ge=0)  # scaledobject only
    sync_seconds: Duration = 15.0

    @pydantic.model_validator(mode="after")
    def _shape(self) -> ScenarioAutoscaler:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"autoscaler {self.kind}/{self.name}: min_replicas is above max_replicas")
        if self.kind == "hpa" and (self.min_replicas < 1 or self.paused_replicas is not None):
            raise ValueError(f"autoscaler hpa/{self.name}: an HPA has min_replicas ≥ 1 and no paused_replicas")
        return self


# ---------------------------------------------------------------------------- reactions

class ArgChanged(_Model):
    workload: str
    container: str | None = None
    flag: str = pydantic.Field(pattern=r"^--?[A-Za-z0-9][A-Za-z0-9_-]*$")
    at_most: float | None = None
    at_least: float | None = None
    equals: str | None = None
    absent: bool = False


class Scaled(_Model):
    workload: str
    replicas_at_most: int | None = None
    replicas_at_least: int | None = None


class PodDeleted(_Model):
    pod: str


class ProcessKilled(_Model):
    pod: str
    pattern: str

    @pydantic.field_validator("pattern")
    @classmethod
    def _regex(cls, value: str) -> str:
        return checked_regex(value, "pattern")


class NodePidKilled(_Model):
    node: str
    pid: int


class GpuRef(_Model):
    node: str
    gpu_index: int = pydantic.Field(ge=0)


class RouteChanged(_Model):
    route: str  # service/vllm, ingress/vllm-canary, httproute/vllm
    selects: Labels = {}  # the Service's selector afterwards holds these
    weights: dict[str, int] = {}  # these backends' weights afterwards are these


class Trigger(_Model):
    arg_changed: ArgChanged | None = None
    scaled: Scaled | None = None
    pod_deleted: PodDeleted | None = None
    process_killed: ProcessKilled | None = None
    node_pid_killed: NodePidKilled | None = None
    gpu_reset: GpuRef | None = None
    route_changed: RouteChanged | None = None
    compose_restarted: ComposeRestarted | None = None
    compose_arg_changed: ComposeArgChanged | None = None

    @property
    def kind(self) -> str:
        return _exactly_one(self, TRIGGERS, "on")

    @pydantic.model_validator(mode="after")
    def _one(self) -> Trigger:
        _exactly_one(self, TRIGGERS, "on")
        return self


TRIGGERS = ("arg_changed", "scaled", "pod_deleted", "process_killed", "node_pid_killed", "gpu_reset", "route_changed",
            "compose_restarted", "compose_arg_changed")
EFFECTS = ("signal", "pod", "free_gpu_memory", "stop_logs")


class Effect(_Model):
    after: Duration = 0.0
    signal: str | None = None
    labels: Labels = {}
    value: float | None = None
    points: list[tuple[Duration, float | None]] | None = None
    absent: bool = False
    pod: str | None = None
    ready: bool | None = None
    health: Health | None = None
    free_gpu_memory: GpuRef | None = None
    stop_logs: str | None = None

    @property
    def kind(self) -> str:
        return _exactly_one(self, EFFECTS, "effect")

    @pydantic.model_validator(mode="after")
    def _shape(self) -> Effect:
        kind = _exactly_one(self, EFFECTS, "effect")
        signal_keys = [k for k in ("value", "points") if getattr(self, k) is not None]
        if self.absent:
            signal_keys.append("absent")
        if kind == "signal":
            if len(signal_keys) != 1:
                raise ValueError(f"effect on signal {self.signal}: give exactly one of value, points, "
                                 f"absent: true (found: {', '.join(signal_keys) or 'none'})")
        elif signal_keys or self.labels:
            raise ValueError(f"effect: labels, value, points and absent go with `signal`, not `{kind}`")
        if kind == "pod":
            if self.ready is None and self.health is None:
                raise ValueError(f"effect on pod {self.pod}: give ready and/or health")
        elif self.ready is not None or self.health is not None:
            raise ValueError(f"effect: ready and health go with `pod`, not `{kind}`")
        return self

    def steps(self) -> list[tuple[float, float | None]]:
        """(seconds after the event, value or None for absent) of a signal effect."""
        if self.points is not None:
            return [(self.after + t, v) for t, v in self.points]
        return [(self.after, None if self.absent else self.value)]


class Reaction(_Model):
    name: str = ""
    on: Trigger
    effects: list[Effect] = pydantic.Field(min_length=1)
    once: bool = True


class CommandOverride(_Model):
    node: str | None = None
    pod: str | None = None
    container: str | None = None
    argv: list[str] = pydantic.Field(min_length=1)
    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    hang: bool = False

    @pydantic.model_validator(mode="after")
    def _target(self) -> CommandOverride:
        _exactly_one(self, ("node", "pod"), "command")
        if self.container is not None and self.pod is None:
            raise ValueError("command: `container` goes with `pod`")
        return self


# ---------------------------------------------------------------------------- the scenario

class Recorded(_Model):
    """Where a recorded scenario came from (`runbook drill --from`), and what its journal did not hold:
    said here, never made up."""

    incident: str
    run: str = ""
    missing: list[str] = []
    assumed: list[str] = []


class Scenario(_Model):
    name: str = pydantic.Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    playbook: str
    # The run's outcome; a recorded incident may have ended any way a run ends.
    expect: Literal["resolved", "refused", "mitigated", "failed", "rolled_back", "escalated", "proposed"]
    description: str
    start: pydantic.AwareDatetime
    onset: Offset | None = None  # what the scenario says; the report finds it from the metrics alone
    alert: Alert
    params: dict[str, Any] = {}
    metrics: MetricsSpec = MetricsSpec()
    nodes: list[Node] = []
    workloads: list[Workload] = []
    pods: list[PodOverride] = []
    extra_pods: list[ExtraPod] = []
    routes: list[Route] = []
    autoscalers: list[ScenarioAutoscaler] = []
    signals: list[Signal] = []
    reactions: list[Reaction] = []
    commands: list[CommandOverride] = []
    recorded: Recorded | None = None  # a real incident's journal, turned into this scenario

    @property
    def t0(self) -> dt.datetime:
        return self.start.astimezone(dt.timezone.utc)

    def at(self, offset: float) -> dt.datetime:
        """The absolute time of an offset relative to T0."""
        return self.t0 + dt.timedelta(seconds=offset)

    def workload(self, ref: str) -> Workload:
        for w in self.workloads:
            if w.ref == ref or w.name == ref:
                return w
        raise KeyError(ref)

    def initial_pod_names(self) -> dict[str, Workload | None]:
        """Every pod the world starts with, by name: its workload, or None for an extra pod."""
        names: dict[str, Workload | None] = {}
        for w in self.workloads:
            for i in range(w.replicas):
                names[workload_pod_name(w, i)] = w
        for p in self.extra_pods:
            names[p.name] = None
        return names

    @pydantic.model_validator(mode="after")
    def _references(self) -> Scenario:
        _check_references(self)
        return self


def workload_pod_name(workload: Workload, ordinal: int) -> str:
    """The name of a workload's pod: `NAME-ORDINAL`, or `NAME-<hash>-<suffix>` for a Deployment."""
    if workload.kind == "statefulset":
        return f"{workload.name}-{ordinal}"
    alphabet = "bcdfghjklmnpqrstvwxz2456789"

    def word(seed: str, size: int) -> str:
        digest = hashlib.sha256(seed.encode()).digest()
        return "".join(alphabet[b % len(alphabet)] for b in digest[:size])

    template_hash = word(f"{workload.namespace}/{workload.name}", 10)
    return f"{workload.name}-{template_hash}-{word(f'{workload.name}/{ordinal}', 5)}"


def _no_duplicates(items: list[Any], what: str) -> None:
    seen: set[Any] = set()
    for item in items:
        if item in seen:
            raise ValueError(f"{what} {item!r} appears twice")
        seen.add(item)


def _check_references(s: Scenario) -> None:
    _no_duplicates([n.name for n in s.nodes], "node")
    _no_duplicates([w.ref for w in s.workloads], "workload")
    for a in s.autoscalers:
        if not any(w.ref == a.target and w.namespace == a.namespace for w in s.workloads):
            raise ValueError(f"autoscaler {a.kind}/{a.name}: no workload {a.target} in namespace {a.namespace}")
    _no_duplicates([sig.name for sig in s.signals], "signal")
    _no_duplicates([p.name for p in s.pods], "pod override")
    nodes = {n.name: n for n in s.nodes}
    initial = s.initial_pod_names()
    _no_duplicates([workload_pod_name(w, i) for w in s.workloads for i in range(w.replicas)]
                   + [p.name for p in s.extra_pods], "pod name")

    def check_gpu(node: str | None, gpu: int | None, where: str) -> None:
        if node is None:
            return
        if node not in nodes:
            raise ValueError(f"{where}: no node {node!r} (nodes: {', '.join(nodes) or 'none'})")
        if gpu is not None and gpu not in {g.index for g in nodes[node].gpus}:
            raise ValueError(f"{where}: node {node} has no GPU {gpu}")

    for w in s.workloads:
        for p in w.placement:
            check_gpu(p.node, p.gpu_index, f"{w.ref} placement")
        _check_logs(w.logs, {c.name for c in w.containers}, w.ref)

    log_ids: set[str] = set()
    for p in s.pods:
        owner = initial.get(p.name)
        if owner is None:
            known = ", ".join(n for n, o in initial.items() if o is not None) or "none"
            raise ValueError(f"pod override {p.name!r}: no workload pod has that name at the start (pods: {known})")
        placement = _placement(owner, int(p.name.rsplit("-", 1)[1])) if owner.kind == "statefulset" else None
        check_gpu(p.node or (placement.node if placement else None),
                  p.gpu_index if p.gpu_index is not None else (placement.gpu_index if placement else None),
                  f"pod {p.name}")
        containers = {c.name for c in owner.containers}
        for proc in p.processes or []:
            if proc.container is not None and proc.container not in containers:
                raise ValueError(f"pod {p.name}: process {proc.pid} is in container {proc.container!r}, "
                                 f"which {owner.ref} does not have")
        _check_logs(p.logs, containers, f"pod {p.name}")
    for e in s.extra_pods:
        if e.node and e.node not in nodes:
            raise ValueError(f"extra pod {e.name}: no node {e.node!r}")
        _check_logs(e.logs, set(e.containers), f"pod {e.name}")
    for logs in [w.logs for w in s.workloads] + [p.logs for p in s.pods] + [e.logs for e in s.extra_pods]:
        log_ids.update(entry.id for entry in logs if entry.id)

    signals = {sig.name for sig in s.signals}
    refs = {w.ref: w for w in s.workloads}
    for i, r in enumerate(s.reactions):
        where = f"reaction {r.name or i}"
        on = r.on
        if on.arg_changed or on.scaled:
            ref = (on.arg_changed or on.scaled).workload  # type: ignore[union-attr]
            if ref not in refs:
                raise ValueError(f"{where}: no workload {ref!r} (workloads: {', '.join(refs) or 'none'})")
            if on.arg_changed and on.arg_changed.container and on.arg_changed.container not in {
                    c.name for c in refs[ref].containers}:
                raise ValueError(f"{where}: {ref} has no container {on.arg_changed.container!r}")
        for pod in [on.pod_deleted.pod if on.pod_deleted else None,
                    on.process_killed.pod if on.process_killed else None]:
            if pod is not None and not _known_pod(s, pod):
                raise ValueError(f"{where}: no pod {pod!r}")
        if on.node_pid_killed:
            check_gpu(on.node_pid_killed.node, None, where)
        if on.gpu_reset:
            check_gpu(on.gpu_reset.node, on.gpu_reset.gpu_index, where)
        for compose_on in (on.compose_restarted, on.compose_arg_changed):
            if compose_on is not None and (compose_on.node not in nodes or nodes[compose_on.node].compose is None
                                           or nodes[compose_on.node].compose.service != compose_on.service):
                raise ValueError(f"{where}: node {compose_on.node!r} has no compose service {compose_on.service!r}")
        for e in r.effects:
            if e.signal is not None and e.signal not in signals:
                raise ValueError(f"{where}: no signal {e.signal!r} (signals: {', '.join(sorted(signals)) or 'none'})")
            if e.pod is not None and not _known_pod(s, e.pod):
                raise ValueError(f"{where}: no pod {e.pod!r}")
            if e.free_gpu_memory is not None:
                check_gpu(e.free_gpu_memory.node, e.free_gpu_memory.gpu_index, where)
            if e.stop_logs is not None and e.stop_logs not in log_ids:
                raise ValueError(f"{where}: no log entry with id {e.stop_logs!r}")
    for c in s.commands:
        if c.node is not None and c.node not in nodes:
            raise ValueError(f"command {c.argv}: no node {c.node!r}")
        if c.pod is not None and not _known_pod(s, c.pod):
            raise ValueError(f"command {c.argv}: no pod {c.pod!r}")


def _check_logs(entries: list[LogEntry], containers: set[str], where: str) -> None:
    for e in entries:
        if e.container is not None and e.container not in containers:
            raise ValueError(f"{where}: log entry for container {e.container!r}, which it does not have")


def _known_pod(s: Scenario, name: str) -> bool:
    """A pod the world starts with, or one a StatefulSet would create when scaled up."""
    if name in s.initial_pod_names():
        return True
    return any(w.kind == "statefulset" and re.fullmatch(re.escape(w.name) + r"-\d+", name) for w in s.workloads)


def _placement(workload: Workload, ordinal: int) -> Placement | None:
    if not workload.placement:
        return None
    return workload.placement[ordinal % len(workload.placement)]


placement_for = _placement


# ---------------------------------------------------------------------------- loading

def _bundled_dir() -> Any:
    return importlib.resources.files("runbook") / "scenarios"


def scenario_names() -> list[str]:
    """Names of the bundled scenarios, sorted."""
    return sorted(p.name[: -len(".yaml")] for p in _bundled_dir().iterdir() if p.name.endswith(".yaml"))


def parse_scenario(text: str, source: str) -> Scenario:
    """A scenario from YAML text; `source` names it in errors."""
    from runbook.files.yamlsource import load_yaml

    # YAML 1.2 booleans: only true/false (YAML 1.1 would read the key `on:` of a reaction as True).
    doc = load_yaml(text, file=source, kind="scenario", only_true_false=True)
    if doc.problems:
        count = len(doc.problems)
        raise InvalidInput(f"{source}: not valid YAML ({count} problem{'s' if count != 1 else ''}):\n"
                           + "\n".join(p.format(code=False) for p in sorted(doc.problems)))
    data = doc.data
    if not isinstance(data, dict):
        raise InvalidInput(f"{source}: a scenario is a mapping, found {type(data).__name__}")
    try:
        return Scenario.model_validate(data)
    except pydantic.ValidationError as e:
        problems = []
        for err in e.errors(include_url=False):
            loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
            msg = err["msg"].removeprefix("Value error, ")
            problems.append(f"  {loc}: {msg}")
        raise InvalidInput(f"{source}: invalid scenario ({len(problems)} problem"
                           f"{'s' if len(problems) != 1 else ''}):\n" + "\n".join(problems)) from None


def load_scenario(name_or_path: str | Path) -> Scenario:
    """A bundled scenario by name (`oom-surge`) or a scenario file by path."""
    text_name = str(name_or_path)
    path = Path(name_or_path)
    if isinstance(name_or_path, Path) or "/" in text_name or text_name.endswith((".yaml", ".yml")) or path.is_file():
        from runbook.files.yamlsource import read_yaml_text

        try:
            text = read_yaml_text(path)
        except OSError as e:
            raise InvalidInput(f"cannot read scenario file {path}: {e.strerror or e}") from None
        except UnicodeDecodeError as e:
            raise InvalidInput(f"cannot read scenario file {path}: byte {e.start} is not UTF-8 text; "
                               "save the file as UTF-8") from None
        return parse_scenario(text, str(path))
    resource = _bundled_dir() / f"{text_name}.yaml"
    if not resource.is_file():
        known = ", ".join(scenario_names()) or "none"
        raise InvalidInput(f"no bundled scenario named {text_name!r} (bundled: {known})")
    scenario = parse_scenario(resource.read_text(encoding="utf-8"), f"scenarios/{text_name}.yaml")
    if scenario.name != text_name:
        raise InvalidInput(f"scenarios/{text_name}.yaml: name is {scenario.name!r}, not the file's name {text_name!r}")
    return scenario


def list_scenarios() -> list[Scenario]:
    """Every bundled scenario, sorted by name."""
    return [load_scenario(name) for name in scenario_names()]
