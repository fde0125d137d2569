"""Finding 2 of issue 12 on a real sshd: node.kill_pids signals the planned process or none.

The orphan is a real process on this machine; the stand-in `cat` can show its PID as another
process's (a later start time, another container), as a node would after the PID was reused.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runbook.actions.base import Plan, StepContext
from runbook.backends.base import World
from runbook.clock import FakeClock, utc
from runbook.actions import load_builtin
from tests.engine.helpers import cluster
from tests.ssh import gpu_world


@pytest.fixture
def gpu(world) -> Iterator[gpu_world.GpuWorld]:
    built = gpu_world.build(world)
    yield built
    built.close()


def plan_kill(nodes, pids: list[int]) -> Plan:
    clock = FakeClock(utc(2026, 3, 19, 22, 18, 5))
    ctx = StepContext(world=World(cluster=cluster(replicas=1), nodes=nodes), clock=clock, now=clock.now(),
                      step_id="kill-holders", params={"namespace": "llm"}, dry_run=False, timeout=30.0,
                      record_evidence=lambda e: None)
    spec = load_builtin().get("node.kill_pids")
    params = spec.params.model_validate({"node": "gpu-node-2", "pids": pids, "signal": "KILL",
                                         "serving_selector": "app=vllm-server"})
    return spec.func(ctx, params)  # type: ignore[union-attr]


def test_f2_ssh_kill_refuses_to_signal_a_pid_whose_start_time_changed(gpu, nodes):
    orphan = gpu.orphan.pid
    plan = plan_kill(nodes, [orphan])
    later = gpu.pretend_pid_reused(orphan)
    outcome = plan.apply(False)
    assert gpu.orphan.poll() is None, "a process with another start time than planned was killed"
    (row,) = plan.before["processes"]
    assert row["start_ticks"] > 0 and row["container_id"] == gpu_world.DEAD_CONTAINER
    assert outcome == {"signalled": [], "not_signalled": [
        {"pid": orphan, "reason": "changed", "detail": f"start time {later}, planned {row['start_ticks']}"}]}


def test_f2_ssh_kill_refuses_to_signal_a_pid_now_in_another_container(gpu, nodes):
    orphan = gpu.orphan.pid
    plan = plan_kill(nodes, [orphan])
    gpu.pretend_moved_to_container(orphan, "ab" * 32)
    outcome = plan.apply(False)
    assert gpu.orphan.poll() is None
    assert outcome["not_signalled"] == [{"pid": orphan, "reason": "changed",
                                         "detail": f"no longer in container {gpu_world.DEAD_CONTAINER}"}]


def test_f2_ssh_kill_signals_the_planned_process_when_it_is_unchanged(gpu, nodes):
    plan = plan_kill(nodes, [gpu.orphan.pid])
    assert plan.target == "node/gpu-node-2"
    assert plan.apply(False) == {"signalled": [gpu.orphan.pid], "not_signalled": []}
    assert gpu.orphan.wait(5) == -9
    assert gpu.serving.poll() is None and gpu.daemon.poll() is None
