"""The bundled `lingering-cuda-context` playbook, its node steps over real SSH to stand-in GPU tools.

The engine, guards and journal are the real ones; metrics and the cluster are fakes that follow
what happens on the "node" (the orphan really dies when `kill` runs over SSH).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from runbook.backends.base import NodeInfo, World
from runbook.backends.ssh.nodes import SshNodes
from runbook.clock import FakeClock, utc
from runbook.engine.operator import AssumeYes
from runbook.engine.runner import Engine
from runbook.record.journal import History, MemoryJournal
from runbook.loading import validation
from runbook.record.locks import MemoryLocks
from runbook.model import events as ev
from runbook.actions import load_builtin
from runbook.sim.fakes import FakeMetrics
from tests.conftest import assert_sequence
from tests.engine.helpers import cluster
from tests.ssh import gpu_world


@pytest.fixture
def playbook():
    loaded = validation.load_playbook_file(validation.bundled_dir() / "lingering-cuda-context.yaml", load_builtin())
    assert loaded.playbook is not None, [p.format() for p in loaded.problems]
    return loaded.playbook


@pytest.fixture
def gpu(world) -> Iterator[gpu_world.GpuWorld]:
    built = gpu_world.build(world)
    yield built
    built.close()


@pytest.fixture
def gpu_stuck(world) -> Iterator[gpu_world.GpuWorld]:
    """Killing the orphan frees nothing: the driver keeps the context (the reset case); no host daemon."""
    built = gpu_world.build(world, kill_frees_memory=False, host_daemon=False)
    yield built
    built.close()


@pytest.fixture
def gpu_stuck_with_daemon(world) -> Iterator[gpu_world.GpuWorld]:
    built = gpu_world.build(world, kill_frees_memory=False, host_daemon=True)
    yield built
    built.close()


class SettlingClock(FakeClock):
    """Virtual time, plus a real moment per sleep: a SIGKILL sent over SSH lands a little later in real
    time, and a verification loop in virtual time alone would sample before it does."""

    def sleep(self, seconds: float) -> None:
        time.sleep(0.01)
        super().sleep(seconds)


@pytest.fixture
def clock() -> SettlingClock:
    return SettlingClock(utc(2026, 3, 19, 22, 18, 5))


def run(playbook, gpu: gpu_world.GpuWorld, nodes: SshNodes, clock, *, cordoned: bool = False):
    fake_cluster = cluster(replicas=1)  # vllm-server-0, ready, container id 000…0 like the serving holder's cgroup
    fake_cluster.nodes["gpu-node-2"] = NodeInfo("gpu-node-2", True, cordoned)
    metrics = FakeMetrics(gpu_metrics(gpu))
    journal = MemoryJournal("inc-ssh")
    engine = Engine(registry=load_builtin(), world=World(metrics=metrics, cluster=fake_cluster, nodes=nodes),
                    clock=clock, journal=journal, operator=AssumeYes("alice"), locks=MemoryLocks(),
                    history=History(None, extra=journal))
    return engine.run(playbook, params=NODE), journal.events()


NODE = {"node": "gpu-node-2"}  # as the alert's node label gives it: the playbook has no default node


def gpu_metrics(gpu: gpu_world.GpuWorld) -> dict:
    """GPU 1's memory, held on a GPU doing no work (the detect's idle-held ratio) while the orphan holds it."""
    return {"gpu_memory_used_ratio": lambda at: gpu.gpu1_memory_ratio(),
            "gpu_memory_idle_held_ratio": lambda at: gpu.gpu1_memory_ratio()}



def test_the_orphan_is_killed_the_serving_process_spared_and_no_reset(playbook, gpu, nodes, clock):
    result, events = run(playbook, gpu, nodes, clock)
    assert result.outcome == "resolved", result.reason
    holders = next(s for s in result.steps if s.id == "holders")
    assert holders.result["suspect_gpus"] == [1]
    assert holders.result["orphan_pids"] == [gpu.orphan.pid]
    roles = {h["pid"]: (h["role"], h["pod"]) for h in holders.result["holders"]}
    assert roles == {gpu.serving.pid: ("serving", "vllm-server-0"), gpu.orphan.pid: ("orphan", None),
                     gpu.daemon.pid: ("host", None)}
    gpu.orphan.wait(5)
    assert gpu.orphan.returncode == -9  # SIGKILL, sent over SSH
    assert gpu.serving.poll() is None and gpu.daemon.poll() is None
    assert gpu.resets == []
    (applied,) = [e for e in events if e.type == ev.ACTION_APPLIED]
    assert applied.data["after"] == {"signal": "KILL", "pids": [gpu.orphan.pid]}
    assert_sequence(events, [ev.RUN_STARTED, ev.EVIDENCE, ev.ACTION_PLANNED, ev.GUARD_PASSED, ev.ACTION_CONFIRMED,
                             ev.ACTION_APPLIED, ev.VERIFY_PASSED, ev.RUN_FINISHED],
                    forbidden=(ev.GUARD_REFUSED, ev.ESCALATED, ev.ACTION_FAILED))
    assert "nvidia-smi --gpu-reset -i 1" not in gpu.calls
    assert len(nodes._connections) == 1  # every node step of the run over one connection


def test_memory_still_held_is_reset_only_on_a_cordoned_node(playbook, gpu_stuck, nodes, clock):
    result, events = run(playbook, gpu_stuck, nodes, clock, cordoned=True)
    assert result.outcome == "resolved", result.reason
    assert gpu_stuck.orphan.wait(5) == -9 and gpu_stuck.serving.poll() is None
    assert gpu_stuck.resets == ["1"]
    applied = [e.step for e in events if e.type == ev.ACTION_APPLIED]
    assert applied == ["kill-holders", "reset-gpu"]
    assert_sequence(events, [ev.ACTION_APPLIED, ev.VERIFY_FAILED, ev.ACTION_PLANNED, ev.ACTION_APPLIED,
                             ev.VERIFY_PASSED, ev.RUN_FINISHED], forbidden=(ev.GUARD_REFUSED,))


def test_memory_still_held_on_a_node_in_service_is_not_reset(playbook, gpu_stuck, nodes, clock):
    result, events = run(playbook, gpu_stuck, nodes, clock, cordoned=False)
    assert result.outcome != "resolved"
    assert gpu_stuck.resets == []
    assert not any(c.startswith("nvidia-smi --gpu-reset") for c in gpu_stuck.calls)
    refused = [e for e in events if e.type == ev.GUARD_REFUSED]
    assert [e.data["guard"] for e in refused] == ["cordon"]
    assert "kubectl cordon gpu-node-2" in refused[0].data["reason"]
    assert gpu_stuck.serving.poll() is None


def test_a_host_daemon_holding_the_gpu_blocks_the_reset_and_is_never_killed(playbook, gpu_stuck_with_daemon, nodes,
                                                                           clock):
    gpu = gpu_stuck_with_daemon  # nvidia-persistenced holds /dev/nvidia1: real nvidia-smi would refuse the reset too
    result, events = run(playbook, gpu, nodes, clock, cordoned=True)
    assert result.outcome != "resolved"
    assert gpu.daemon.poll() is None and gpu.serving.poll() is None and gpu.orphan.wait(5) == -9
    refused = [e for e in events if e.type == ev.GUARD_REFUSED]
    assert [e.data["guard"] for e in refused] == ["gpu_in_use"]
    assert str(gpu.daemon.pid) in refused[0].data["reason"]
    assert gpu.resets == []


def test_a_dry_run_looks_over_ssh_and_kills_nothing(playbook, gpu, nodes, clock):
    fake_cluster = cluster(replicas=1)
    journal = MemoryJournal("inc-dry")
    engine = Engine(registry=load_builtin(), world=World(
        metrics=FakeMetrics(gpu_metrics(gpu)), cluster=fake_cluster,
        nodes=nodes), clock=clock, journal=journal, operator=AssumeYes("alice"), locks=MemoryLocks(),
        history=History(None, extra=journal), dry_run=True)
    result = engine.run(playbook, params=NODE)
    assert gpu.orphan_alive() and gpu.serving.poll() is None
    assert not any(e.type == ev.ACTION_APPLIED for e in journal.events())
    assert any(s.id == "holders" and s.result["orphan_pids"] == [gpu.orphan.pid] for s in result.steps)
