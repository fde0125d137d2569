"""The state of the simulated world: nodes, GPUs, processes, pods, workloads, signal timelines.

Built from a `Scenario`; changed only through the methods here, which record every change in
`mutations` and fire the scenario's reactions. Time comes from the injected clock: effects that
are due are applied lazily by `tick()`, which every backend call runs first, so a world on a
`FakeClock` moves on exactly when the engine sleeps.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import heapq
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from runbook.sim.model import (
    DEFAULT_DEVICES, UID_NAMESPACE, ContainerState, GpuState, NodeState, PodState, Proc, WorkloadState, env_var,
    env_words, flag_value, hex64, kubepods_cgroup,
)
from runbook.clock import Clock
from runbook.sim.scenario import Effect, PodOverride, Reaction, Scenario, placement_for, workload_pod_name
from runbook.sim import compose
from runbook.errors import InvalidInput


class _Override(NamedTuple):
    at: dt.datetime
    seq: int
    value: float | None  # None: no sample
    firing: int  # which firing of a reaction set it


@dataclasses.dataclass(order=True)
class _Pending:
    at: dt.datetime
    seq: int
    effect: Effect = dataclasses.field(compare=False)
    reaction: str = dataclasses.field(compare=False)


class WorldState:
    def __init__(self, scenario: Scenario, clock: Clock):
        self.scenario = scenario
        self.clock = clock
        self.t0 = scenario.t0
        self.mutations: list[dict[str, Any]] = []
        self.nodes: dict[str, NodeState] = {}
        self.workloads: dict[tuple[str, str, str], WorkloadState] = {}
        self.pods: dict[tuple[str, str], PodState] = {}
        self.gone: dict[str, list[list[dt.datetime | None]]] = {}  # pod name -> [[from, until]]
        self.overrides: dict[tuple[str, int], list[_Override]] = {}  # (signal, series index) -> steps
        self._firing = 0
        self.stopped_logs: dict[str, dt.datetime] = {}
        self._pending: list[_Pending] = []
        self._seq = 0
        self._fired: set[int] = set()
        self._shims: dict[str, int] = {}  # pod uid -> its containerd shim's host pid
        self._generations: dict[tuple[str, str], int] = {}
        self._reserved_pids = {p.host_pid for o in scenario.pods for p in o.processes or [] if p.host_pid}
        self._orphan_ip = 9
        self.on_tick: list = []  # called on each tick, after the due effects: e.g. autoscalers acting
        self._build()
        self.compose = compose.projects(self)  # node name -> its Docker Compose project, if it is a Compose host

    # ------------------------------------------------------------------ building

    def at(self, offset: float) -> dt.datetime:
        return self.t0 + dt.timedelta(seconds=offset)

    def _build(self) -> None:
        s = self.scenario
        for i, n in enumerate(s.nodes):
            gpus = {g.index: GpuState(
                index=g.index, name=g.name,
                uuid=g.uuid or f"GPU-{uuid.uuid5(UID_NAMESPACE, f'{n.name}/gpu/{g.index}')}",
                bus_id=g.bus_id or f"00000000:{0x17 + 0x10 * g.index:02X}:00.0",
                total_mib=g.memory_total_mib,
                reserved_mib=g.reserved_mib if g.reserved_mib is not None else round(g.memory_total_mib * 0.0043),
                baseline_used_mib=g.baseline_used_mib, utilization_pct=g.utilization_pct,
                bar1_total_mib=g.bar1_total_mib or (32768 if g.memory_total_mib <= 49152 else 131072))
                for g in n.gpus}
            known = [p.pid for p in n.processes] + [1500]
            node = NodeState(name=n.name, index=i + 1, ready=n.ready, unschedulable=n.unschedulable,
                             gpus=gpus, procs=[], next_pid=max(known) + 211)
            for p in n.processes:
                started = self.at(p.started)
                if p.cgroup:
                    cgroup = p.cgroup.removeprefix("0::")
                elif p.container_id:
                    pod_uid = p.pod_uid or str(uuid.uuid5(UID_NAMESPACE, f"gone/{p.container_id}"))
                    cgroup = kubepods_cgroup("burstable", pod_uid, p.container_id)
                else:
                    cgroup = "/user.slice/user-0.slice/session-1.scope"
                devices = p.holds_devices if p.holds_devices is not None else (
                    [d.format(gpu=p.gpu_index) for d in DEFAULT_DEVICES] if p.gpu_index is not None else [])
                proc = Proc(node=n.name, pid=p.pid, ppid=p.ppid, stat=p.stat, args=p.args, user=p.user,
                            started_at=started, cgroup=cgroup, gpu_index=p.gpu_index,
                            gpu_memory_mib=p.gpu_memory_mib, visible_to_nvidia_smi=p.visible_to_nvidia_smi,
                            holds_devices=tuple(devices), frees_memory_on_kill=p.frees_memory_on_kill,
                            free_after=p.free_after, ignores_term=p.ignores_term)
                if not p.alive:
                    proc.died_at = started
                node.procs.append(proc)
            self.nodes[n.name] = node
        overrides = {o.name: o for o in s.pods}
        for w in s.workloads:
            state = WorkloadState(spec=w, replicas=w.replicas,
                                  containers={c.name: (tuple(c.command), tuple(c.args)) for c in w.containers},
                                  pods=[], env={c.name: tuple(env_var(e) for e in c.env) for c in w.containers})
            self.workloads[(w.namespace, w.kind, w.name)] = state
            for ordinal in range(w.replicas):
                pod = self._new_pod(state, ordinal, self.at(w.started), overrides.get(workload_pod_name(w, ordinal)))
                state.pods.append(pod)
            state.next_ordinal = w.replicas
        for e in s.extra_pods:
            self._add_extra_pod(e, generation=0, created=self.at(e.started))
        for p in self.pods.values():
            for proc in p.procs:
                if p.node in self.nodes and proc.pid in {q.pid for q in self.nodes[p.node].procs if q is not proc}:
                    raise InvalidInput(f"scenario {s.name}: host pid {proc.pid} on {p.node} is used twice")

    def _add_extra_pod(self, e: Any, generation: int, created: dt.datetime) -> PodState:
        uid = str(uuid.uuid5(UID_NAMESPACE, f"{self.scenario.name}/{e.namespace}/{e.name}/{generation}"))
        containers = [ContainerState(name=c, restart_count=e.restart_count if generation == 0 else 0,
                                     started_at=created, ready_at=created,
                                     container_id=hex64(f"{uid}/{c}/0")) for c in e.containers]
        pod = PodState(name=e.name, namespace=e.namespace, uid=uid, generation=generation, labels=dict(e.labels),
                       owner=e.owner, workload=None, node=e.node, gpu_index=None, ip=self._allocate_ip(e.node),
                       created_at=created, ready_flag=e.ready, health="ok", ports=(), containers=containers,
                       procs=[], logs=list(e.logs))
        self.pods[pod.key] = pod
        return pod

    def _allocate_ip(self, node: str) -> str:
        state = self.nodes.get(node)
        if state is None:
            self._orphan_ip += 1
            return f"10.244.250.{self._orphan_ip}"
        state.next_ip += 1
        return f"10.244.{state.index}.{state.next_ip % 250 + 2}"

    def _new_pod(self, w: WorkloadState, ordinal: int, created: dt.datetime, o: PodOverride | None) -> PodState:
        spec = w.spec
        name = workload_pod_name(spec, ordinal)
        generation = self._generations.get((spec.namespace, name), -1) + 1
        self._generations[(spec.namespace, name)] = generation
        place = placement_for(spec, ordinal)
        node = (o.node if o and o.node else None) or (place.node if place else "")
        gpu = o.gpu_index if o and o.gpu_index is not None else (place.gpu_index if place else None)
        uid = str(uuid.uuid5(UID_NAMESPACE, f"{self.scenario.name}/{spec.namespace}/{name}/{generation}"))
        term = o.last_termination if o else None
        pod_started = self.at(o.started) if o and o.started is not None else created
        c_started = max(pod_started, self.at(term.at) + dt.timedelta(seconds=1)) if term else pod_started
        restarts = o.restart_count if o and o.restart_count is not None else (1 if term else 0)
        containers = []
        for c in spec.containers:
            containers.append(ContainerState(
                name=c.name, restart_count=restarts, started_at=c_started,
                ready_at=c_started + dt.timedelta(seconds=spec.restart_seconds),
                container_id=hex64(f"{uid}/{c.name}/{restarts}"),
                last_termination=(term.reason, self.at(term.at), term.exit_code) if term else None))
        labels = {**spec.labels, **spec.selector}
        if spec.kind == "statefulset":
            labels.setdefault("statefulset.kubernetes.io/pod-name", name)
        pod = PodState(name=name, namespace=spec.namespace, uid=uid, generation=generation, labels=labels,
                       owner=spec.ref, workload=w, node=node, gpu_index=gpu, ip=self._allocate_ip(node),
                       created_at=pod_started, ready_flag=o.ready if o and o.ready is not None else True,
                       health=o.health if o and o.health else "ok",
                       ports=tuple(o.listening_ports) if o and o.listening_ports is not None else w.default_ports(),
                       containers=containers, procs=[], logs=list(spec.logs) + (list(o.logs) if o else []),
                       gpu_memory_mib=o.gpu_memory_mib if o and o.gpu_memory_mib is not None else spec.gpu_memory_mib)
        if o and o.processes is not None:
            self._scripted_procs(pod, o, c_started)
        else:
            for c in containers:
                self._start_main(pod, c, c_started)
        self.pods[pod.key] = pod
        return pod

    def _pod_proc(self, pod: PodState, container: ContainerState, *, local_pid: int, local_ppid: int,
                  args: str, stat: str, started: dt.datetime, host_pid: int | None = None, main: bool,
                  gpu_memory_mib: int, user: str = "root", visible: bool = True,
                  devices: Sequence[str] | None = None, ignores_term: bool = False) -> Proc:
        node = self.nodes.get(pod.node)
        pid = host_pid if host_pid is not None else (
            node.allocate_pid(self._reserved_pids) if node else 10000 + local_pid)
        qos = pod.workload.spec.qos if pod.workload else "burstable"
        on_gpu = pod.gpu_index is not None and gpu_memory_mib > 0
        if devices is None:
            devices = [d.format(gpu=pod.gpu_index) for d in DEFAULT_DEVICES] if on_gpu else []
        proc = Proc(node=pod.node, pid=pid, ppid=0, stat=stat, args=args, user=user, started_at=started,
                    cgroup=kubepods_cgroup(qos, pod.uid, container.container_id),
                    gpu_index=pod.gpu_index if on_gpu else None, gpu_memory_mib=gpu_memory_mib,
                    visible_to_nvidia_smi=visible, holds_devices=tuple(devices) if not stat.startswith("Z") else (),
                    ignores_term=ignores_term, pod=pod, container=container.name, local_pid=local_pid,
                    local_ppid=local_ppid, main=main)
        pod.procs.append(proc)
        if node:
            node.procs.append(proc)
        return proc

    def _scripted_procs(self, pod: PodState, o: PodOverride, started: dt.datetime) -> None:
        first = pod.containers[0].name
        for p in o.processes or []:
            container = pod.container(p.container or first)
            assert container is not None  # checked by the scenario
            main = p.main if p.main is not None else p.pid == 1
            args = p.args if p.args is not None else " ".join(pod.workload.argv(container.name))  # type: ignore[union-attr]
            mem = p.gpu_memory_mib if p.gpu_memory_mib is not None else (pod.gpu_memory_mib if main else 0)
            self._pod_proc(pod, container, local_pid=p.pid, local_ppid=p.ppid, args=args, stat=p.stat,
                           started=self.at(p.started) if p.started is not None else started,
                           host_pid=p.host_pid, main=main, gpu_memory_mib=mem, user=p.user,
                           visible=p.visible_to_nvidia_smi, devices=p.holds_devices, ignores_term=p.ignores_term)
        self._link_host_ppids(pod)

    def _start_main(self, pod: PodState, c: ContainerState, started: dt.datetime) -> None:
        assert pod.workload is not None
        argv = pod.workload.argv(c.name) or (c.name,)
        first = c is pod.containers[0]
        self._pod_proc(pod, c, local_pid=1, local_ppid=0, args=" ".join(argv), stat="Ssl", started=started,
                       main=True, gpu_memory_mib=pod.gpu_memory_mib if first else 0)
        self._link_host_ppids(pod)

    def _link_host_ppids(self, pod: PodState) -> None:
        """Host ppids: a container's pid 1 hangs off its containerd shim, the rest off their parent."""
        shim = self.shim_pid(pod)
        for p in pod.procs:
            parent = next((q for q in pod.procs if q.alive and q.container == p.container
                           and q.local_pid == p.local_ppid and q is not p), None)
            p.ppid = parent.pid if parent else shim

    def shim_pid(self, pod: PodState) -> int:
        """The host pid of the pod's `containerd-shim-runc-v2` (just below its first process)."""
        if pod.uid in self._shims:
            return self._shims[pod.uid]
        node = self.nodes.get(pod.node)
        used = ({p.pid for p in node.procs} if node else set()) | set(self._shims.values()) | self._reserved_pids
        mains = [p.pid for p in pod.procs if p.main]
        pid = min(mains) - 37 if mains else 0
        if pid < 300 or pid in used:
            pid = node.allocate_pid(used) if node else 0
        self._shims[pod.uid] = pid
        return pid

    # ------------------------------------------------------------------ time

    def now(self) -> dt.datetime:
        return self.clock.now()

    def tick(self) -> dt.datetime:
        """Apply every scheduled effect whose time has come; return now."""
        now = self.clock.now()
        while self._pending and self._pending[0].at <= now:
            item = heapq.heappop(self._pending)
            self._apply_effect(item.effect, item.at, item.reaction)
        for hook in self.on_tick:
            hook()
        return now

    def record(self, op: str, **data: Any) -> dict[str, Any]:
        entry = {"op": op, "at": self.now(), **data}
        self.mutations.append(entry)
        return entry

    def wait(self, seconds: float) -> None:
        """Let virtual time pass inside a call (a request that hangs until its timeout)."""
        advance = getattr(self.clock, "advance", None)
        if advance is not None:
            advance(seconds)
        else:
            self.clock.sleep(seconds)
        self.tick()

    # ------------------------------------------------------------------ lookups

    def workload(self, namespace: str, kind: str, name: str) -> WorkloadState | None:
        return self.workloads.get((namespace, kind, name))

    def workload_by_ref(self, ref: str, namespace: str | None = None) -> WorkloadState | None:
        return next((w for w in self.workloads.values()
                     if w.ref == ref and (namespace is None or w.namespace == namespace)), None)

    def pod_by_name(self, name: str) -> PodState | None:
        return next((p for p in self.pods.values() if p.name == name), None)

    def pod_by_ip(self, ip: str) -> PodState | None:
        return next((p for p in self.pods.values() if p.ip == ip), None)

    def gpu_used(self, node: NodeState, gpu: GpuState, at: dt.datetime) -> int:
        return gpu.baseline_used_mib + sum(p.gpu_memory_mib for p in node.procs
                                           if p.gpu_index == gpu.index and p.holds_memory(at))

    def gpu_busy(self, node: NodeState, gpu: GpuState) -> bool:
        return any(p.alive and not p.zombie and p.gpu_index == gpu.index and p.visible_to_nvidia_smi
                   and p.gpu_memory_mib for p in node.procs)

    # ------------------------------------------------------------------ signals

    def signal_value(self, signal: str, series_index: int, at: dt.datetime) -> float | None:
        spec = next(s for s in self.scenario.signals if s.name == signal)
        series = spec.series[series_index]
        pod = series.labels.get("pod")
        if pod is not None and self._gone(pod, at):
            return None
        applied = [o for o in self.overrides.get((signal, series_index), []) if o.at <= at]
        if applied:
            return max(applied, key=lambda o: (o.at, o.seq)).value
        value = None
        for t, v in series.points:
            if self.at(t) > at:
                break
            value = v
        return value

    def _gone(self, pod: str, at: dt.datetime) -> bool:
        for start, end in self.gone.get(pod, []):
            if start is not None and start <= at and (end is None or at < end):
                return True
        return False

    # ------------------------------------------------------------------ reactions and effects

    def fire(self, kind: str, **event: Any) -> None:
        now = self.now()
        for i, r in enumerate(self.scenario.reactions):
            if (r.once and i in self._fired) or r.on.kind != kind or not _matches(r, event):
                continue
            self._fired.add(i)
            self._firing += 1
            name = r.name or f"reaction {i}"
            self.record("reaction", reaction=name, trigger=kind)
            for e in r.effects:
                if e.kind == "signal":
                    self._add_signal_override(e, now, self._firing)
                else:
                    self._seq += 1
                    heapq.heappush(self._pending, _Pending(now + dt.timedelta(seconds=e.after), self._seq, e, name))
        self.tick()

    def _add_signal_override(self, e: Effect, event_at: dt.datetime, firing: int) -> None:
        """A reaction's course for the matching series; from its first step on, it replaces what
        earlier reactions had scheduled for them (the world took another turn)."""
        spec = next(s for s in self.scenario.signals if s.name == e.signal)
        steps = [(event_at + dt.timedelta(seconds=after), value) for after, value in e.steps()]
        first = min(t for t, _ in steps)
        for i, series in enumerate(spec.series):
            if all(series.labels.get(k) == v for k, v in e.labels.items()):
                kept = [o for o in self.overrides.get((spec.name, i), []) if o.firing == firing or o.at < first]
                for t, value in steps:
                    self._seq += 1
                    kept.append(_Override(t, self._seq, value, firing))
                self.overrides[(spec.name, i)] = kept

    def _apply_effect(self, e: Effect, at: dt.datetime, reaction: str) -> None:
        if e.pod is not None:
            pod = self.pod_by_name(e.pod)
            if pod is None:
                return
            if e.ready is not None:
                pod.ready_flag = e.ready
            if e.health is not None:
                pod.health = e.health
            self.mutations.append({"op": "effect", "at": at, "reaction": reaction, "pod": e.pod,
                                   "ready": e.ready, "health": e.health})
        elif e.free_gpu_memory is not None:
            node = self.nodes[e.free_gpu_memory.node]
            gpu = node.gpus[e.free_gpu_memory.gpu_index]
            self.free_gpu(node, gpu, at)
            self.mutations.append({"op": "effect", "at": at, "reaction": reaction,
                                   "free_gpu_memory": f"{node.name}/{gpu.index}"})
        elif e.stop_logs is not None:
            self.stopped_logs.setdefault(e.stop_logs, at)
            self.mutations.append({"op": "effect", "at": at, "reaction": reaction, "stop_logs": e.stop_logs})

    def free_gpu(self, node: NodeState, gpu: GpuState, at: dt.datetime) -> None:
        gpu.baseline_used_mib = 0
        for p in node.procs:
            if p.gpu_index == gpu.index and not p.alive and (p.memory_freed_at is None or p.memory_freed_at > at):
                p.memory_freed_at = at
        self._prune(node)

    def _prune(self, node: NodeState) -> None:
        now = self.now()
        node.procs = [p for p in node.procs if p.alive or p.holds_memory(now) or
                      (p.memory_freed_at is not None and p.memory_freed_at > now)]

    # ------------------------------------------------------------------ changes

    def kill(self, proc: Proc, signal: str, *, via: str) -> bool:
        """Deliver a signal; True when the process died of it."""
        now = self.now()
        if not self._dies_of(proc, signal):
            self.record("process_signalled", node=proc.node, pid=proc.pid, signal=signal, via=via,
                        pod=proc.pod.name if proc.pod else None, effect="none")
            return False
        code = 128 + {"KILL": 9, "TERM": 15, "INT": 2, "QUIT": 3, "HUP": 1}[signal]
        self._die(proc, now)
        self.record("process_killed", node=proc.node, pid=proc.pid, signal=signal, via=via,
                    pod=proc.pod.name if proc.pod else None, args=proc.args)
        if proc.pod is not None:
            pod = proc.pod
            self.fire("process_killed", pod=pod.name, args=proc.match_text)
            if proc.main and pod.key in self.pods:
                c = pod.container(proc.container or pod.containers[0].name)
                assert c is not None
                self.restart_container(pod, c, reason="Error", exit_code=code)
        else:
            self.fire("node_pid_killed", node=proc.node, pid=proc.pid)
        return True

    def reset_gpu(self, node: NodeState, gpu: GpuState) -> None:
        self.free_gpu(node, gpu, self.now())
        self.record("gpu_reset", node=node.name, gpu_index=gpu.index)
        self.fire("gpu_reset", node=node.name, gpu_index=gpu.index)

    @staticmethod
    def _dies_of(proc: Proc, signal: str) -> bool:
        if not proc.alive or proc.zombie:
            return False  # a zombie is already dead: nothing left to signal
        if signal == "KILL":
            return not proc.stat.startswith("D")  # uninterruptible: the kill stays pending
        if signal in ("TERM", "INT", "QUIT", "HUP"):
            return not (proc.ignores_term or proc.stat.startswith(("D", "T")))
        return False

    def _die(self, proc: Proc, at: dt.datetime, *, free_now: bool = False) -> None:
        proc.died_at = at
        if free_now:
            proc.memory_freed_at = at
        elif proc.frees_memory_on_kill:
            proc.memory_freed_at = at + dt.timedelta(seconds=proc.free_after)
        node = self.nodes.get(proc.node)
        if node:
            self._prune(node)

    def restart_container(self, pod: PodState, c: ContainerState, *, reason: str, exit_code: int) -> None:
        now = self.now()
        for p in list(pod.procs):
            if p.container == c.name:
                if p.alive:
                    self._die(p, now, free_now=True)
                pod.procs.remove(p)
        c.restart_count += 1
        c.last_termination = (reason, now, exit_code)
        c.started_at = now
        assert pod.workload is not None
        c.ready_at = now + dt.timedelta(seconds=pod.workload.spec.restart_seconds)
        c.container_id = hex64(f"{pod.uid}/{c.name}/{c.restart_count}")
        pod.ready_flag, pod.health, pod.ports = True, "ok", pod.workload.default_ports()
        self._start_main(pod, c, now)
        self.record("container_restarted", pod=pod.name, container=c.name, reason=reason,
                    restart_count=c.restart_count)

    def remove_pod(self, pod: PodState) -> None:
        now = self.now()
        for p in pod.procs:
            if p.alive:
                self._die(p, now, free_now=True)
        pod.procs = []
        self.pods.pop(pod.key, None)
        self._shims.pop(pod.uid, None)

    def recreate_pod(self, pod: PodState) -> PodState:
        """The controller's replacement: same name, new uid, fresh processes, not ready yet."""
        now = self.now()
        self.remove_pod(pod)
        if pod.workload is None:
            spec = next(e for e in self.scenario.extra_pods if e.name == pod.name)
            return self._add_extra_pod(spec, generation=pod.generation + 1, created=now)
        w = pod.workload
        index = w.pods.index(pod)
        if w.spec.kind == "statefulset":
            ordinal = int(pod.name.rsplit("-", 1)[1])
        else:  # a Deployment's replacement has a new name
            ordinal, w.next_ordinal = w.next_ordinal, w.next_ordinal + 1
        new = self._new_pod(w, ordinal, now, None)
        for c in new.containers:
            c.ready_at = now + dt.timedelta(seconds=w.spec.restart_seconds)
        w.pods[index] = new
        return new

    def scale(self, w: WorkloadState, replicas: int) -> None:
        now = self.now()
        while len(w.pods) > replicas:
            pod = w.pods.pop()
            self.remove_pod(pod)
            self.gone.setdefault(pod.name, []).append([now, None])
        while len(w.pods) < replicas:
            ordinal = len(w.pods) if w.spec.kind == "statefulset" else w.next_ordinal
            pod = self._new_pod(w, ordinal, now, None)
            w.next_ordinal = max(w.next_ordinal, ordinal) + 1
            for c in pod.containers:
                c.ready_at = now + dt.timedelta(seconds=w.spec.restart_seconds)
            for interval in self.gone.get(pod.name, []):
                if interval[1] is None:
                    interval[1] = now
            w.pods.append(pod)
        w.replicas = replicas


def _matches(r: Reaction, event: Mapping[str, Any]) -> bool:
    on = r.on
    if on.arg_changed:
        t = on.arg_changed
        if event["workload"] != t.workload or (t.container and event["container"] != t.container):
            return False
        # The flag as the program reads it: in argv or, after it, in the env vars its script expands.
        old = flag_value(event["old_argv"] + env_words(event.get("old_env", ())), t.flag)
        new = flag_value(event["new_argv"] + env_words(event.get("new_env", ())), t.flag)
        if old == new:
            return False
        if t.absent:
            return new is None
        if new is None:
            return False
        if t.equals is not None and new != t.equals:
            return False
        if t.at_most is not None or t.at_least is not None:
            try:
                number = float(new)
            except ValueError:
                return False
            if t.at_most is not None and number > t.at_most:
                return False
            if t.at_least is not None and number < t.at_least:
                return False
        return True
    if on.scaled:
        s = on.scaled
        if event["workload"] != s.workload or event["old"] == event["new"]:
            return False
        return ((s.replicas_at_most is None or event["new"] <= s.replicas_at_most)
                and (s.replicas_at_least is None or event["new"] >= s.replicas_at_least))
    if on.pod_deleted:
        return bool(event["pod"] == on.pod_deleted.pod)
    if on.process_killed:
        return event["pod"] == on.process_killed.pod and re.search(on.process_killed.pattern, event["args"]) is not None
    if on.node_pid_killed:
        return bool(event["node"] == on.node_pid_killed.node and event["pid"] == on.node_pid_killed.pid)
    if on.gpu_reset:
        return bool(event["node"] == on.gpu_reset.node and event["gpu_index"] == on.gpu_reset.gpu_index)
    if on.compose_restarted or on.compose_arg_changed:
        return compose.matches(on.compose_restarted or on.compose_arg_changed, on.kind, dict(event))
    if on.route_changed:
        t = on.route_changed
        return (event["route"] == t.route and all(event["selector"].get(k) == v for k, v in t.selects.items())
                and all(event["weights"].get(k) == v for k, v in t.weights.items()))
    return False
