"""Issue 18, item 3, as an action: `k8s.set_arg` lowers `--max_model_len=8192` by 10% exactly as it
lowers `--max-model-len=8192`, in the workload's spelling — on the fake cluster and in the simulated
world, whose reactions read the flag as vLLM does."""

from __future__ import annotations

import pytest

from runbook.backends.base import ContainerSpec
from runbook.clock import FakeClock, utc
from runbook.engine.operator import AssumeYes
from runbook.sim.scenario import Scenario
from runbook.sim.world import build_world
from runbook.sim.fakes import FakeCluster, FakeMetrics, FakeWorkload
from tests.engine.helpers import engine, playbook

LOWER = """
name: lower
title: lower max-model-len
params: {namespace: llm}
steps:
  - id: lower
    uses: k8s.set_arg
    with: {target: statefulset/vllm-server, container: vllm, flag: FLAG, factor: 0.9, floor: 2048}
    guard: {min_ready: 0, budget_per_hour: null, lock: false}
"""
SERVE = ("vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct")


def fake(args: tuple[str, ...]) -> FakeCluster:
    return FakeCluster([FakeWorkload("statefulset", "vllm-server", "llm", 2, {"app": "vllm-server"},
                                     [ContainerSpec("vllm", SERVE, args)], [True, True])])


def lower(cluster, flag: str = "--max-model-len", metrics=None):
    e = engine(FakeClock(utc(2026, 3, 14)), metrics=metrics or FakeMetrics({}), cluster_=cluster,
               operator=AssumeYes("t"))
    return e.run(playbook(LOWER.replace("FLAG", flag)))


@pytest.mark.parametrize("flag", ["--max-model-len", "--max_model_len"])
@pytest.mark.parametrize(("args", "lowered"), [
    (("--max_model_len=8192", "--port=8000"), ("--max_model_len=7373", "--port=8000")),
    (("--max-model-len=8192", "--port=8000"), ("--max-model-len=7373", "--port=8000")),
    (("--max_model_len", "8192"), ("--max_model_len", "7373")),
])
def test_set_arg_lowers_max_model_len_in_either_spelling(flag, args, lowered):
    c = fake(args)
    result = lower(c, flag)
    assert result.outcome == "resolved", result.reason
    step = result.steps[0].result
    assert (step["before"], step["after"]) == ({flag: "8192"}, {flag: "7373"})
    assert c.workloads[("llm", "statefulset", "vllm-server")].containers[0] == ContainerSpec("vllm", SERVE, lowered)


def test_set_arg_summary_names_the_flag_as_the_workload_spells_it():
    result = lower(fake(("--max_model_len=8192",)))
    assert result.steps[0].summary == "set --max_model_len of statefulset/vllm-server/vllm 8192 → 7373"


def _scenario(args: list[str]) -> Scenario:
    return Scenario.model_validate({
        "name": "spelling", "playbook": "none", "expect": "resolved", "description": "underscore spelling",
        "start": "2026-03-14T03:12:07Z", "alert": {"name": "Test"},
        "nodes": [{"name": "gpu-node-0", "gpus": [{"index": 0, "memory_total_mib": 81559, "utilization_pct": 90}]}],
        "workloads": [{"kind": "statefulset", "name": "vllm-server", "namespace": "llm", "replicas": 1,
                       "selector": {"app": "vllm-server"},
                       "containers": [{"name": "vllm", "command": list(SERVE), "args": args}],
                       "placement": [{"node": "gpu-node-0", "gpu_index": 0}], "gpu_memory_mib": 70000}],
        "signals": [{"name": "oom_failures_per_min", "series": [{"labels": {"pod": "vllm-server-0"},
                                                                 "points": [[-60, 4], [0, 4]]}]}],
        "reactions": [{"name": "shorter-context-stops-ooms",
                       "on": {"arg_changed": {"workload": "statefulset/vllm-server", "container": "vllm",
                                              "flag": "--max-model-len", "at_most": 7500}},
                       "effects": [{"after": 0, "signal": "oom_failures_per_min", "value": 0}]}],
    })


@pytest.mark.parametrize("spelling", ["--max_model_len", "--max-model-len"])
def test_set_arg_in_the_simulated_world_lowers_either_spelling_and_its_reaction_fires(spelling):
    scenario = _scenario([f"{spelling}=8192", "--port=8000"])
    clock = FakeClock(scenario.start)
    world = build_world(scenario, clock)
    e = engine(clock, metrics=world.metrics, cluster_=world.cluster, operator=AssumeYes("t"))
    result = e.run(playbook(LOWER.replace("FLAG", "--max-model-len")))
    assert result.outcome == "resolved", result.reason
    assert world.cluster.get_workload("llm", "statefulset", "vllm-server").container("vllm").args == (
        f"{spelling}=7373", "--port=8000")
    assert [m["reaction"] for m in world.mutations if m["op"] == "reaction"] == ["shorter-context-stops-ooms"]
