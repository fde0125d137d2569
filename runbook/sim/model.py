"""The parts of the simulated world: processes, GPUs, nodes, containers, pods, workloads.

Plain mutable records; `sim_state.WorldState` owns them and changes them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import uuid
from collections.abc import Sequence, Set as AbstractSet

from runbook.backends.base import ContainerSpec, ContainerStatus, EnvVar, Pod, Workload
from runbook.commandline.flags import canonical_flag
from runbook.sim.scenario import EnvEntry, LogEntry, Workload as WorkloadSpec

UID_NAMESPACE = uuid.UUID("6f1c1e0a-4d0b-4b8e-9a51-2f0a7c1d9e11")
PENDING_SECONDS = 5.0  # a new pod is Pending this long (scheduling, sandbox), then Running
DEFAULT_DEVICES = ("/dev/nvidiactl", "/dev/nvidia{gpu}", "/dev/nvidia-uvm")


def hex64(seed: str) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of `--flag=V` or `--flag V` in argv (the last one wins), or None; spelled either
    way (`--max_model_len` is `--max-model-len`), as vLLM reads it."""
    value = None
    wanted = canonical_flag(flag)
    for i, a in enumerate(argv):
        name, equals, rest = a.partition("=")
        if canonical_flag(name) != wanted:
            continue
        if equals:
            value = rest
        elif i + 1 < len(argv):
            value = argv[i + 1]
    return value


def env_var(entry: EnvEntry) -> EnvVar:
    """A scenario's env entry as the backends show one: a written value, or its valueFrom in words."""
    if entry.value_from is not None:
        return EnvVar(entry.name, None, entry.value_from)
    return EnvVar(entry.name, entry.value or "")


def env_words(env: Sequence[EnvVar]) -> tuple[str, ...]:
    """The words of the env vars' written values, as an unquoted `$VAR` in the container's script
    hands them to the program (KServe's `vllm serve … $VLLM_ADDITIONAL_ARGS`): split at blanks."""
    return tuple(word for var in env if var.value for word in var.value.split())


@dataclasses.dataclass(eq=False)
class Proc:
    node: str
    pid: int  # host pid
    ppid: int
    stat: str
    args: str
    user: str
    started_at: dt.datetime
    cgroup: str = "/user.slice/user-0.slice/session-1.scope"
    gpu_index: int | None = None
    gpu_memory_mib: int = 0
    visible_to_nvidia_smi: bool = True
    holds_devices: tuple[str, ...] = ()
    frees_memory_on_kill: bool = True
    free_after: float = 0.0
    ignores_term: bool = False
    pod: PodState | None = None
    container: str | None = None
    local_pid: int | None = None
    local_ppid: int | None = None
    main: bool = False
    died_at: dt.datetime | None = None
    memory_freed_at: dt.datetime | None = None

    @property
    def alive(self) -> bool:
        return self.died_at is None

    @property
    def zombie(self) -> bool:
        return self.stat.startswith("Z")

    @property
    def comm(self) -> str:
        if self.zombie and self.args.startswith("["):
            return self.args[1:].split("]", 1)[0][:15]
        first = self.args.split(" ", 1)[0]
        return first.rsplit("/", 1)[-1][:15]

    @property
    def match_text(self) -> str:
        """What `pgrep -f` searches: the command line, or the name of a zombie (it has none)."""
        return self.comm if self.zombie else self.args

    def holds_memory(self, at: dt.datetime) -> bool:
        if self.gpu_index is None or self.gpu_memory_mib <= 0 or self.zombie:
            return False
        if self.alive:
            return True
        return self.memory_freed_at is None or at < self.memory_freed_at

    def etimes(self, now: dt.datetime) -> int:
        return max(0, int((now - self.started_at).total_seconds()))


@dataclasses.dataclass(eq=False)
class GpuState:
    index: int
    name: str
    uuid: str
    bus_id: str
    total_mib: int
    reserved_mib: int
    baseline_used_mib: int
    utilization_pct: int
    bar1_total_mib: int


@dataclasses.dataclass(eq=False)
class NodeState:
    name: str
    index: int
    ready: bool
    unschedulable: bool
    gpus: dict[int, GpuState]
    procs: list[Proc]
    next_pid: int
    next_ip: int = 10

    def allocate_pid(self, reserved: AbstractSet[int] = frozenset()) -> int:
        used = {p.pid for p in self.procs} | reserved
        pid = self.next_pid
        while pid in used:
            pid += 1
        self.next_pid = pid + 173
        return pid


@dataclasses.dataclass(eq=False)
class ContainerState:
    name: str
    restart_count: int
    started_at: dt.datetime
    ready_at: dt.datetime
    container_id: str
    last_termination: tuple[str, dt.datetime, int] | None = None

    def up(self, now: dt.datetime) -> bool:
        return now >= self.ready_at


@dataclasses.dataclass(eq=False)
class PodState:
    name: str
    namespace: str
    uid: str
    generation: int
    labels: dict[str, str]
    owner: str
    workload: WorkloadState | None
    node: str
    gpu_index: int | None
    ip: str
    created_at: dt.datetime
    ready_flag: bool
    health: str  # ok | hang | error
    ports: tuple[int, ...]
    containers: list[ContainerState]
    procs: list[Proc]
    logs: list[LogEntry]
    gpu_memory_mib: int = 0
    next_local_pid: int = 100

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def container(self, name: str) -> ContainerState | None:
        return next((c for c in self.containers if c.name == name), None)

    def phase(self, now: dt.datetime) -> str:
        return "Pending" if now < self.created_at + dt.timedelta(seconds=PENDING_SECONDS) else "Running"

    def ready(self, now: dt.datetime) -> bool:
        return self.phase(now) == "Running" and self.ready_flag and all(c.up(now) for c in self.containers)

    def serving(self, now: dt.datetime) -> bool:
        """The main container has finished starting (its ports listen)."""
        return self.phase(now) == "Running" and self.containers[0].up(now)

    def listening(self, now: dt.datetime) -> tuple[int, ...]:
        return self.ports if self.serving(now) else ()

    def alive_procs(self) -> list[Proc]:
        return [p for p in self.procs if p.alive]

    def to_pod(self, now: dt.datetime) -> Pod:
        statuses = []
        for c in self.containers:
            reason, at = (c.last_termination[0], c.last_termination[1]) if c.last_termination else (None, None)
            statuses.append(ContainerStatus(
                name=c.name, ready=self.ready(now) and c.up(now), restart_count=c.restart_count,
                container_id=f"containerd://{c.container_id}" if self.phase(now) == "Running" else "",
                last_termination_reason=reason, last_termination_at=at))
        return Pod(name=self.name, namespace=self.namespace, uid=self.uid, phase=self.phase(now),
                   ready=self.ready(now), node=self.node, ip=self.ip, labels=dict(self.labels),
                   containers=tuple(statuses), owner=self.owner)


@dataclasses.dataclass(eq=False)
class WorkloadState:
    spec: WorkloadSpec
    replicas: int
    containers: dict[str, tuple[tuple[str, ...], tuple[str, ...]]]  # name -> (command, args)
    pods: list[PodState]  # by ordinal (StatefulSet) or creation (Deployment)
    next_ordinal: int = 0
    env: dict[str, tuple[EnvVar, ...]] = dataclasses.field(default_factory=dict)  # name -> its env

    @property
    def ref(self) -> str:
        return self.spec.ref

    @property
    def namespace(self) -> str:
        return self.spec.namespace

    def argv(self, container: str) -> tuple[str, ...]:
        command, args = self.containers[container]
        return command + args

    def default_ports(self) -> tuple[int, ...]:
        first = self.spec.containers[0].name
        port = flag_value(self.argv(first) + env_words(self.env.get(first, ())), "--port")
        return (int(port),) if port and port.isdigit() else (8000,)

    def to_workload(self, now: dt.datetime) -> Workload:
        return Workload(kind=self.spec.kind, name=self.spec.name, namespace=self.namespace,
                        replicas=self.replicas, ready_replicas=sum(p.ready(now) for p in self.pods),
                        selector=dict(self.spec.selector),
                        containers=tuple(ContainerSpec(name=n, command=c, args=a, env=self.env.get(n, ()))
                                         for n, (c, a) in self.containers.items()),
                        labels=dict(self.spec.labels), annotations=dict(self.spec.annotations))


def kubepods_cgroup(qos: str, pod_uid: str, container_id: str) -> str:
    uid = pod_uid.replace("-", "_")
    if qos == "guaranteed":
        return f"/kubepods.slice/kubepods-pod{uid}.slice/cri-containerd-{container_id}.scope"
    return (f"/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{uid}.slice/"
            f"cri-containerd-{container_id}.scope")
