"""The world the engine sees: small protocols and the plain values they exchange.

Each protocol has a real implementation (Prometheus, Kubernetes, SSH, HTTP) and a simulated
one (`runbook.sim.world`). Nothing here does I/O; errors are those of `runbook.errors`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Protocol

WORKLOAD_KINDS = ("statefulset", "deployment", "daemonset")


@dataclasses.dataclass(frozen=True)
class Sample:
    """One value of an instant query, with its labels."""

    labels: Mapping[str, str]
    value: float


@dataclasses.dataclass(frozen=True)
class Series:
    """Values of a range query over time, with its labels."""

    labels: Mapping[str, str]
    points: tuple[tuple[dt.datetime, float], ...]


@dataclasses.dataclass(frozen=True)
class EnvVar:
    """One entry of a container's `env`: a value written in the spec, or one set from elsewhere."""

    name: str
    value: str | None = ""  # None: set from elsewhere (valueFrom), never read here
    source: str = ""  # where a valueFrom points: "configMapKeyRef llm-config/max-seq-len", "fieldRef ..."


@dataclasses.dataclass(frozen=True)
class ContainerSpec:
    name: str
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[EnvVar, ...] = ()  # in the spec's order (a later duplicate wins, as in Kubernetes)

    def with_env_values(self, values: Mapping[str, str]) -> ContainerSpec:
        """This container with new written values for the env vars named in `values`.

        Each must be in the env once, with a written value: one set from elsewhere (valueFrom) or
        missing is refused, never added or overridden.
        """
        from runbook.errors import InvalidInput

        for name, value in values.items():
            found = [var for var in self.env if var.name == name]
            if len(found) != 1 or found[0].value is None or not isinstance(value, str):
                why = ("is not in its env" if not found else f"is defined {len(found)} times" if len(found) > 1
                       else "takes its value from elsewhere (valueFrom)" if found[0].value is None
                       else f"would get {value!r}, not a string")
                raise InvalidInput(f"cannot set env {name} of container {self.name!r}: it {why}")
        return dataclasses.replace(self, env=tuple(EnvVar(var.name, values[var.name]) if var.name in values else var
                                                   for var in self.env))


@dataclasses.dataclass(frozen=True)
class ContainerStatus:
    name: str
    ready: bool
    restart_count: int = 0
    container_id: str = ""
    last_termination_reason: str | None = None  # e.g. "OOMKilled", "Error"
    last_termination_at: dt.datetime | None = None


@dataclasses.dataclass(frozen=True)
class Pod:
    name: str
    namespace: str
    uid: str
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    ready: bool
    node: str = ""
    ip: str = ""
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    containers: tuple[ContainerStatus, ...] = ()
    owner: str = ""  # "statefulset/vllm-server"
    deleting: bool = False

    @property
    def restarts(self) -> int:
        return sum(c.restart_count for c in self.containers)

    @property
    def last_termination_reason(self) -> str | None:
        reasons = [c for c in self.containers if c.last_termination_reason]
        if not reasons:
            return None
        latest = max(reasons, key=lambda c: c.last_termination_at or dt.datetime.min.replace(tzinfo=dt.timezone.utc))
        return latest.last_termination_reason


@dataclasses.dataclass(frozen=True)
class Workload:
    kind: str  # statefulset | deployment | daemonset
    name: str
    namespace: str
    replicas: int
    ready_replicas: int
    selector: Mapping[str, str]
    containers: tuple[ContainerSpec, ...] = ()
    resource_version: str = ""  # the version this view was read at: changes are made conditional on it
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)  # the workload's own (GitOps tracking)
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.name}"

    def container(self, name: str) -> ContainerSpec:
        for c in self.containers:
            if c.name == name:
                return c
        from runbook.errors import NotFound

        known = ", ".join(c.name for c in self.containers) or "none"
        raise NotFound(f"{self.ref} has no container {name!r} (containers: {known})")


@dataclasses.dataclass(frozen=True)
class Autoscaler:
    """What else sets a workload's replicas (issue 16, item 8): a HorizontalPodAutoscaler
    (autoscaling/v2) or a KEDA ScaledObject (keda.sh/v1alpha1) whose scaleTargetRef is the workload."""

    kind: str  # hpa | scaledobject
    name: str
    namespace: str
    target: str  # the workload it scales: "statefulset/vllm-server"
    min_replicas: int | None = None
    max_replicas: int | None = None
    paused_replicas: int | None = None  # a ScaledObject's autoscaling.keda.sh/paused-replicas; None: not paused
    resource_version: str = ""  # the version this view was read at: changes are made conditional on it

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.name}"

    def shown(self) -> str:
        """How a plan shows it: `minReplicas=2 maxReplicas=6`, or `paused-replicas=1`."""
        if self.kind == "hpa":
            return f"minReplicas={self.min_replicas} maxReplicas={self.max_replicas}"
        paused = "none" if self.paused_replicas is None else self.paused_replicas
        return f"paused-replicas={paused} (minReplicaCount={self.min_replicas} maxReplicaCount={self.max_replicas})"


@dataclasses.dataclass(frozen=True)
class TrafficRoute:
    """What sends requests to a version (issue 16, item 3): a Service's selector, an ingress-nginx
    canary Ingress's weight, or a Gateway API HTTPRoute's backend weights."""

    kind: str  # service | ingress | httproute
    name: str
    namespace: str
    selector: Mapping[str, str] = dataclasses.field(default_factory=dict)  # a Service's spec.selector
    weights: Mapping[str, int] = dataclasses.field(default_factory=dict)  # ingress: {backend: canary-weight};
    #   httproute: {backend Service: weight}, summed over its rules' backendRefs
    resource_version: str = ""  # the version this view was read at: changes are made conditional on it

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.name}"


@dataclasses.dataclass(frozen=True)
class NodeInfo:
    name: str
    ready: bool
    unschedulable: bool  # cordoned


@dataclasses.dataclass(frozen=True)
class CommandResult:
    """What a command printed and how it ended; `truncated` says the output was capped."""

    stdout: str
    stderr: str = ""
    exit_code: int = 0
    truncated: bool = False


@dataclasses.dataclass(frozen=True)
class PodLog:
    pod: str
    text: str
    truncated: bool = False
    absent: bool = False  # previous=True and the container never restarted: there is no previous log
    previous: bool = False  # the log of the container before the last restart


def logs_asked(previous: bool, with_previous: bool) -> tuple[bool, ...]:
    """The logs `Cluster.logs` reads, in its answer's order: True the previous container's, False the running one's."""
    return (True, False) if with_previous else (previous,)


@dataclasses.dataclass(frozen=True)
class HttpResponse:
    status: int
    elapsed_seconds: float
    body: str = ""


class Metrics(Protocol):
    """Signals by name (resolved through the signal catalog) and raw PromQL.

    Raises `BackendUnavailable` when the source cannot be reached: silence is never health.
    """

    def query(self, signal: str, *, at: dt.datetime, labels: Mapping[str, str] = {},
              by: Sequence[str] = ()) -> list[Sample]: ...

    def query_range(self, signal: str, *, start: dt.datetime, end: dt.datetime, step_seconds: float,
                    labels: Mapping[str, str] = {}, by: Sequence[str] = ()) -> list[Series]: ...


class Cluster(Protocol):
    """Pods and workloads of one cluster. Mutations accept `dry_run` (server-side dry run).

    A change made from a plan carries the plan's baseline: the `resource_version` of the workload
    as the plan read it and the values the plan saw (`expected_replicas`, `expected`). Where the
    workload is no longer that version, or those values, the change is not made: `StalePlan`.
    """

    def list_pods(self, namespace: str, selector: Mapping[str, str]) -> list[Pod]: ...

    def get_workload(self, namespace: str, kind: str, name: str) -> Workload: ...

    def get_node(self, name: str) -> NodeInfo: ...

    def scale(self, namespace: str, kind: str, name: str, replicas: int, *, dry_run: bool = False,
              expected_replicas: int | None = None, resource_version: str | None = None) -> Workload: ...

    def set_container_argv(self, namespace: str, kind: str, name: str, container: str, *,
                           command: Sequence[str] | None, args: Sequence[str] | None,
                           dry_run: bool = False, expected: ContainerSpec | None = None,
                           resource_version: str | None = None, env: Mapping[str, str] | None = None) -> Workload:
        """Replace exactly this container's command and/or args (None leaves one as it is), and set
        the values of the env vars in `env` (each already in the container, with a written value).

        `expected` is the whole container as planned: command, args and env."""
        ...

    def delete_pod(self, namespace: str, name: str, *, uid: str, dry_run: bool = False) -> None:
        """Delete only if the pod still has this uid (a replacement with the same name is spared)."""
        ...

    def get_route(self, namespace: str, kind: str, name: str) -> TrafficRoute:
        """A Service, an ingress-nginx canary Ingress or an HTTPRoute, as a `TrafficRoute`."""
        ...

    def set_route(self, namespace: str, kind: str, name: str, *, selector: Mapping[str, str] | None = None,
                  weights: Mapping[str, int] | None = None, dry_run: bool = False,
                  expected: TrafficRoute | None = None, resource_version: str | None = None) -> TrafficRoute:
        """Set a Service's whole selector, or the weights named (the others stay), conditional on the
        plan's baseline as `scale` is: `expected` (the route as planned) and its `resource_version`."""
        ...

    def autoscalers(self, namespace: str, kind: str, name: str) -> list[Autoscaler]:
        """The HPAs and KEDA ScaledObjects whose scaleTargetRef is this workload (issue 16, item 8);
        an HPA that a ScaledObject made and owns is left out: the ScaledObject is what to pause."""
        ...

    def set_autoscaler(self, namespace: str, kind: str, name: str, *, min_replicas: int | None = None,
                       max_replicas: int | None = None, paused_replicas: int | None = None, dry_run: bool = False,
                       expected: Autoscaler | None = None, resource_version: str | None = None) -> Autoscaler:
        """Bound an HPA (`min_replicas`, `max_replicas`) or pause a ScaledObject at `paused_replicas`
        (None removes the pause), conditional on the plan's baseline as `scale` is."""
        ...

    def exec(self, namespace: str, pod: str, container: str, argv: Sequence[str], *,
             timeout: float) -> CommandResult: ...

    def logs(self, namespace: str, selector: Mapping[str, str], *, since_seconds: int,
             tail_lines: int | None = None, limit_bytes: int | None = None,
             container: str | None = None, previous: bool = False, timestamps: bool = False,
             with_previous: bool = False) -> list[PodLog]:
        """Each selected pod's log: the running container's, or with `previous` the one before its
        last restart (`absent` where there is none); `timestamps` puts the kubelet's RFC 3339 time
        in front of each line. `with_previous`: both, of the pods of one listing, every previous log
        first (`PodLog.previous`)."""
        ...


class Nodes(Protocol):
    """Commands on GPU hosts, by node name (an inventory maps names to SSH endpoints)."""

    def run(self, node: str, argv: Sequence[str], *, timeout: float) -> CommandResult: ...


class Http(Protocol):
    """Plain HTTP GETs for health probes."""

    def get(self, url: str, *, timeout: float) -> HttpResponse: ...


@dataclasses.dataclass
class World:
    """The backends one run uses; a missing one makes the actions that need it fail clearly."""

    metrics: Metrics | None = None
    cluster: Cluster | None = None
    nodes: Nodes | None = None
    http: Http | None = None
