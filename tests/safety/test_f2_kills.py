"""Finding 2 of issue 12: a kill signals exactly the processes its plan named, or none of them.

Each process is named by PID and start time (and, on a node, its container); the identity is
checked again right before the signal, and the lock/budget target is the workload or the node.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from runbook.actions.base import Plan, StepContext
from runbook.sim.model import Proc
from runbook.clock import FakeClock
from runbook.drill.run import bundled_playbook
from runbook.sim.scenario import load_scenario
from runbook.sim.world import build_world
from runbook.engine.operator import AssumeYes, ConfirmRequest, Confirmation
from runbook.engine.runner import Engine
from runbook.record.journal import History, MemoryJournal
from runbook.loading.validation import load_playbook_text
from runbook.record.locks import MemoryLocks
from runbook.model import events as ev
from runbook.model.alert import Alert
from runbook.parsers import kill_by_identity, procs
from runbook.actions import load_builtin

ORPHAN = 48213  # lingering-cuda-context: the orphaned vLLM worker on gpu-node-2


class MeanwhileYes(AssumeYes):
    """Says yes to every prompt, but first lets the world move on at `step` (someone acted while
    the prompt was up, or the process died and its PID came back as another)."""

    def __init__(self, step: str, meanwhile: Callable[[], None]):
        super().__init__("alice")
        self.step, self.meanwhile = step, meanwhile

    def confirm(self, request: ConfirmRequest) -> Confirmation:
        if request.step == self.step:
            self.meanwhile()
        return super().confirm(request)


@dataclasses.dataclass
class Sim:
    world: object
    clock: FakeClock
    journal: MemoryJournal
    scenario: object

    def engine(self, operator, locks=None) -> Engine:
        return Engine(registry=load_builtin(), world=self.world.world_backends(), clock=self.clock,
                      journal=self.journal, operator=operator, locks=locks or MemoryLocks(),
                      history=History(None, extra=self.journal), holder="test")

    def run(self, playbook, operator, locks=None):
        alert = Alert(source="alertmanager", name=self.scenario.alert.name, labels=dict(self.scenario.alert.labels),
                      annotations={}, starts_at=self.scenario.t0)
        return self.engine(operator, locks).run(playbook, alert=alert, params=self.scenario.params)

    def context(self) -> StepContext:
        return StepContext(world=self.world.world_backends(), clock=self.clock, now=self.clock.now(), step_id="t",
                           params={"namespace": "llm"}, dry_run=False, timeout=30.0, record_evidence=lambda e: None)

    def applied(self, step: str) -> dict:
        return next(e.data for e in self.journal.events() if e.type == ev.ACTION_APPLIED and e.step == step)


def sim(name: str) -> Sim:
    scenario = load_scenario(name)
    clock = FakeClock(scenario.t0)
    return Sim(build_world(scenario, clock), clock, MemoryJournal(f"drill-f2-{name}"), scenario)


def plan_of(s: Sim, action: str, **params) -> Plan:
    spec = load_builtin().get(action)
    return spec.func(s.context(), spec.params.model_validate(params))  # type: ignore[union-attr]


def sim_start_ticks(s: Sim, node: str, pid: int) -> int:
    """The start time the world's node reports for `pid` now (field 22 of /proc/<pid>/stat)."""
    out = s.world.nodes.run(node, ["cat", f"/proc/{pid}/stat"], timeout=5)
    assert out.exit_code == 0, out.stderr
    return procs.parse_proc_stat(out.stdout).start_ticks


def reuse_host_pid(s: Sim, node: str, pid: int, args: str, *, same_cgroup: bool) -> Proc:
    """The process `pid` dies; a new, unrelated process gets the same PID a while later, in the same
    cgroup (only its start time tells it apart) or in a host service's."""
    state = s.world.state
    old = next(p for p in state.nodes[node].procs if p.pid == pid and p.alive)
    state.kill(old, "KILL", via="the process crashed on its own")
    s.clock.advance(3)
    new = Proc(node=node, pid=pid, ppid=1, stat="Ssl", args=args, user="root", started_at=s.clock.now(),
               cgroup=old.cgroup if same_cgroup else "/system.slice/dcgm-exporter.service")
    state.nodes[node].procs.append(new)
    return new


def start_in_pod(s: Sim, pod_name: str, local_pid: int, args: str) -> Proc:
    """A new process in the pod's vllm container (a worker the server forked after the plan)."""
    state = s.world.state
    pod = state.pod_by_name(pod_name)
    main = next(p for p in pod.procs if p.main and p.alive)
    new = Proc(node=pod.node, pid=main.pid + 500, ppid=main.pid, stat="Sl", args=args, user="root",
               started_at=s.clock.now(), cgroup=main.cgroup, pod=pod, container="vllm", local_pid=local_pid,
               local_ppid=main.local_pid)
    pod.procs.append(new)
    state.nodes[pod.node].procs.append(new)
    return new


# ----------------------------------------------------------------------------- (a) PID reuse

@pytest.mark.parametrize("same_cgroup", [True, False], ids=["same-cgroup", "host-service"])
def test_f2_node_kill_spares_a_pid_reused_between_plan_and_apply(same_cgroup):
    s = sim("lingering-cuda-context")
    reused: list[Proc] = []
    operator = MeanwhileYes("kill-holders", lambda: reused.append(reuse_host_pid(
        s, "gpu-node-2", ORPHAN, "/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv",
        same_cgroup=same_cgroup)))
    s.run(bundled_playbook("lingering-cuda-context", load_builtin()), operator)
    newcomer = reused[0]
    assert newcomer.alive, "the process that got the planned PID afterwards was killed"
    assert not [m for m in s.world.mutations if m.get("pid") == ORPHAN and m.get("via", "").startswith("node")]
    planned = next(e.data for e in s.journal.events() if e.type == ev.ACTION_PLANNED and e.step == "kill-holders")
    planned_row = planned["before"]["processes"][0]
    now_start = sim_start_ticks(s, "gpu-node-2", ORPHAN)
    assert now_start != planned_row["start_ticks"]
    outcome = s.applied("kill-holders")["result"]
    assert outcome["signalled"] == []
    detail = (f"start time {now_start}, planned {planned_row['start_ticks']}" if same_cgroup
              else f"no longer in container {planned_row['container_id']}")
    assert outcome["not_signalled"] == [{"pid": ORPHAN, "reason": "changed", "detail": detail}]


def test_f2_pod_kill_spares_a_restarted_server_with_the_same_pid():
    """The server crashed and its container restarted between plan and apply: the new server is
    PID 1 again, but it is not the process the plan named."""
    s = sim("oom-surge-at-floor")  # oom-surge kills the server only at its floor (issue 16, item 9)
    state = s.world.state
    since: list[int] = []

    def restart() -> None:
        pod = state.pod_by_name("vllm-server-0")
        state.restart_container(pod, pod.container("vllm"), reason="Error", exit_code=137)
        s.clock.advance(30)
        since.append(len(state.mutations))

    s.run(bundled_playbook("oom-surge", load_builtin()), MeanwhileYes("kill-server", restart))
    signals = [m for m in state.mutations[since[0]:] if m["op"] in ("process_killed", "process_signalled")]
    assert signals == [], "the restarted server was signalled"
    outcome = s.applied("kill-server")["result"]
    assert outcome["signalled"] == {}
    assert [(r["pod"], r["pid"], r["reason"]) for r in outcome["not_signalled"]] == [("vllm-server-0", 1, "restarted")]


def test_f2_pod_kill_spares_the_replacement_of_a_deleted_pod():
    """Same name, new uid: the StatefulSet's replacement pod's PID 1 is not the planned process."""
    s = sim("oom-surge")
    plan = plan_of(s, "k8s.kill_process", workload="statefulset/vllm-server", names=["vllm-server-0"],
                   container="vllm")
    s.world.state.recreate_pod(s.world.state.pod_by_name("vllm-server-0"))
    s.clock.advance(60)
    mark = len(s.world.mutations)
    outcome = plan.apply(False)
    assert [m for m in s.world.mutations[mark:] if m["op"].startswith("process_")] == []
    assert outcome == {"signalled": {}, "not_signalled": [
        {"pod": "vllm-server-0", "pid": 1, "reason": "restarted", "detail": "the pod was replaced"}]}


def test_f2_a_kill_after_a_scale_down_spares_the_pods_the_controller_removes_next():
    """Just after a scale-down's patch a real StatefulSet controller has not yet marked its highest
    ordinals for deletion (the control plane showed it): they are going, so the kill plans none of them."""
    s = sim("oom-surge")
    workload = s.world.state.workload("llm", "statefulset", "vllm-server")
    assert [pod.name for pod in workload.pods] == ["vllm-server-0", "vllm-server-1", "vllm-server-2"]
    workload.replicas = 1  # the scale is patched; the controller has not got to vllm-server-1 and -2 yet
    plan = plan_of(s, "k8s.kill_process", workload="statefulset/vllm-server", container="vllm")
    assert sorted(plan.before["processes"]) == plan.after["pods"] == ["vllm-server-0"]
    assert plan.before["ready"] == "1/1"
    by_selector = plan_of(s, "k8s.kill_process", selector="app=vllm-server", container="vllm")
    assert by_selector.after["pods"] == ["vllm-server-0", "vllm-server-1", "vllm-server-2"]  # no workload named: no replicas to read


# ----------------------------------------------------------------------------- (b) exactly the planned PIDs

def test_f2_kill_applies_exactly_the_planned_pids():
    s = sim("oom-surge")
    plan = plan_of(s, "k8s.kill_process", workload="statefulset/vllm-server", names=["vllm-server-0"],
                   container="vllm", signal="KILL")
    planned = plan.before["processes"]["vllm-server-0"]
    assert [p["pid"] for p in planned] == [1] and all(isinstance(p["start_ticks"], int) for p in planned)
    newcomer = start_in_pod(s, "vllm-server-0", 88, "vllm serve meta-llama/Meta-Llama-3-8B-Instruct --port 8001")
    calls: list[list[str]] = []
    cluster = s.world.cluster
    real_exec = cluster.exec
    cluster.exec = lambda ns, pod, c, argv, timeout: calls.append(list(argv)) or real_exec(ns, pod, c, argv,
                                                                                           timeout=timeout)
    outcome = plan.apply(False)
    signalled = [(m["op"], m["pid"]) for m in s.world.mutations if m["op"].startswith("process_")]
    # the planned PID 1 (host PID 40211), and nothing else: the newcomer matched the pattern only later
    # (it goes down with its container's restart, but it was never signalled)
    assert signalled == [("process_killed", 40211)] and newcomer.pid != 40211
    assert outcome["signalled"] == {"vllm-server-0": [1]}
    signalling = [argv for argv in calls if argv[:1] != ["cat"]]
    assert len(signalling) == 1 and signalling[0][:3] == ["sh", "-c", kill_by_identity.SCRIPT]
    assert "vllm" not in " ".join(signalling[0][3:]), "the apply matched a pattern, not the planned PIDs"


# ----------------------------------------------------------------------------- (c) one lock/budget target

def test_f2_kill_and_scale_of_one_statefulset_share_a_target():
    s = sim("oom-surge")
    scale = plan_of(s, "k8s.scale", target="statefulset/vllm-server", replicas=1)
    kill = plan_of(s, "k8s.kill_process", workload="statefulset/vllm-server", container="vllm")
    by_owner = plan_of(s, "k8s.kill_process", selector="app=vllm-server", container="vllm")
    assert scale.target == kill.target == by_owner.target == "llm/statefulset/vllm-server"
    assert kill.namespace == by_owner.namespace == "llm"


def test_f2_a_held_scale_lock_refuses_the_kill():
    s = sim("oom-surge")
    locks = MemoryLocks()
    text = """
name: kill-only
title: kill only
params: {namespace: llm}
steps:
  - id: kill
    uses: k8s.kill_process
    with: {workload: statefulset/vllm-server, container: vllm}
    guard: {min_ready: 0}
"""
    playbook = load_playbook_text(text, file="kill.yaml", registry=load_builtin()).playbook
    with locks.hold("llm/statefulset/vllm-server", holder="another run scaling vllm-server"):
        result = s.run(playbook, AssumeYes("alice"), locks)
    refused = [e.data for e in s.journal.events() if e.type == ev.GUARD_REFUSED]
    assert [r["guard"] for r in refused] == ["lock"] and result.outcome == "refused"
    assert not [m for m in s.world.mutations if m["op"] == "process_killed"]


def test_f2_node_kill_and_gpu_reset_share_the_node_target():
    s = sim("lingering-cuda-context")
    kill = plan_of(s, "node.kill_pids", node="gpu-node-2", pids=[ORPHAN])
    reset = plan_of(s, "node.gpu_reset", node="gpu-node-2", gpu=1, require_cordon=False)
    assert kill.target == reset.target == "node/gpu-node-2"
    assert kill.namespace == reset.namespace == "llm"  # the serving pods': where a cluster keeps the node's Lease
    assert kill.before["processes"][0]["start_ticks"] == sim_start_ticks(s, "gpu-node-2", ORPHAN)


# ----------------------------------------------------------------------------- the script itself, on this machine

def _start_ticks(pid: int) -> int:
    return procs.parse_proc_stat(Path(f"/proc/{pid}/stat").read_text()).start_ticks


def _run_script(*words: str) -> list[kill_by_identity.Verdict]:
    out = subprocess.run(["sh", "-c", kill_by_identity.SCRIPT, "runbook-kill", *words], capture_output=True,
                         text=True, timeout=30, env={**os.environ, "PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    assert out.returncode == 0, out.stderr
    return kill_by_identity.parse_report(out.stdout)


def test_f2_the_kill_script_signals_only_a_process_whose_identity_still_matches():
    """The script the nodes and containers run, under this machine's real `sh` and /proc."""
    kept = subprocess.Popen(["sleep", "60"])
    doomed = subprocess.Popen(["sleep", "60"])
    try:
        verdicts = _run_script("TERM", str(kept.pid), str(_start_ticks(kept.pid) + 1), "-",
                               str(doomed.pid), str(_start_ticks(doomed.pid)), "-",
                               "999999999", "5", "-")
        assert [(v.pid, v.verdict) for v in verdicts] == [(kept.pid, "changed"), (doomed.pid, "signalled"),
                                                         (999999999, "gone")]
        assert doomed.wait(10) == -15
        assert kept.poll() is None, "a process whose start time differs from the plan's was signalled"
    finally:
        for p in (kept, doomed):
            if p.poll() is None:
                p.kill()
            p.wait(10)


def test_f2_the_kill_script_checks_the_container_when_one_is_named():
    kept = subprocess.Popen(["sleep", "60"])
    try:
        other_container = "f" * 64  # this test process is in no such container
        verdicts = _run_script("KILL", str(kept.pid), str(_start_ticks(kept.pid)), other_container)
        assert [(v.pid, v.verdict, v.detail) for v in verdicts] == [(kept.pid, "changed", "container")]
        assert kept.poll() is None
    finally:
        kept.kill()
        kept.wait(10)


def test_f2_the_kill_script_takes_no_value_as_shell_text():
    """Values arrive as positional parameters: a hostile one is an argument that fails, never code."""
    marker = Path(f"/tmp/runbook-f2-{os.getpid()}")
    out = subprocess.run(["sh", "-c", kill_by_identity.SCRIPT, "runbook-kill", "KILL", f"1;touch {marker}", "5", "-",
                          f"$(touch {marker})", "5", "-"], capture_output=True, text=True, timeout=30)
    assert out.stdout.splitlines() == [f"failed 1;touch {marker} not a process id",
                                       f"failed $(touch {marker}) not a process id"]
    assert not marker.exists()

