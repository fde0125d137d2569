"""Issue 18, item 4, as an action: `k8s.set_arg` on a flag that lives in an env var's value
(KServe's `VLLM_ADDITIONAL_ARGS`) changes that env var only, rolls it back, and refuses a value
computed from another variable (`--max-model-len=${MAX_SEQ_LEN}`), naming it — on the fake cluster
and in the simulated world alike."""

from __future__ import annotations

import pytest

from runbook.backends.base import ContainerSpec, EnvVar
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
    with: {target: statefulset/vllm-server, container: main, flag: --max-model-len, factor: 0.9, floor: 2048}
    guard: {min_ready: 0, budget_per_hour: null, lock: false}
  - id: observe
    uses: flow.verify
    with: {signal: oom_failures_per_min, below: 1, for: 1m, within: 2m, interval: 15s}
    on_fail: rollback
"""
# KServe's LLMInferenceService: the main container's script expands the env var unquoted.
COMMAND = ("/bin/bash", "-c")
ARGS = ("vllm serve /mnt/models --served-model-name llama --port 8000 $VLLM_ADDITIONAL_ARGS",)
HF = EnvVar("HF_HOME", "/mnt/models/.cache")
TOKEN = EnvVar("HF_TOKEN", None, "secretKeyRef huggingface/token")
EXTRA = "--max-model-len 8192 --enforce-eager"


def kserve(env: tuple[EnvVar, ...], command=COMMAND, args=ARGS) -> FakeCluster:
    return FakeCluster([FakeWorkload("statefulset", "vllm-server", "llm", 2, {"app": "vllm-server"},
                                     [ContainerSpec("main", command, args, env)], [True, True])])


def run(cluster, metrics):
    e = engine(FakeClock(utc(2026, 3, 14)), metrics=metrics, cluster_=cluster, operator=AssumeYes("t"))
    return e.run(playbook(LOWER))


def main_container(c: FakeCluster) -> ContainerSpec:
    return c.workloads[("llm", "statefulset", "vllm-server")].containers[0]


def test_vllm_additional_args_is_lowered_in_the_env_var_only():
    c = kserve((HF, EnvVar("VLLM_ADDITIONAL_ARGS", EXTRA), TOKEN))
    result = run(c, FakeMetrics({"oom_failures_per_min": 0}))
    assert result.outcome == "resolved", result.reason
    assert main_container(c) == ContainerSpec("main", COMMAND, ARGS, (
        HF, EnvVar("VLLM_ADDITIONAL_ARGS", "--max-model-len 7373 --enforce-eager"), TOKEN))
    step = result.steps[0]
    assert step.result["after"] == {"--max-model-len": "7373"}
    assert step.result["outcome"]["where"] == "env:VLLM_ADDITIONAL_ARGS"
    assert "env VLLM_ADDITIONAL_ARGS" in step.summary


def test_vllm_additional_args_change_is_rolled_back_when_ooms_go_on():
    env = (HF, EnvVar("VLLM_ADDITIONAL_ARGS", EXTRA), TOKEN)
    c = kserve(env)
    result = run(c, FakeMetrics({"oom_failures_per_min": 4}))
    assert result.outcome == "rolled_back", result.reason
    assert main_container(c) == ContainerSpec("main", COMMAND, ARGS, env)
    assert [m[0] for m in c.mutations] == ["set_argv", "set_argv"]


@pytest.mark.parametrize(("command", "args"), [
    (("sh", "-c"), ("exec vllm serve m --max-model-len=${MAX_SEQ_LEN} --port 8000",)),
    (("vllm", "serve", "m"), ("--max-model-len=$(MAX_SEQ_LEN)",)),
])
def test_max_seq_len_template_is_refused_naming_the_variable(command, args):
    c = kserve((EnvVar("MAX_SEQ_LEN", "8192"),), command, args)
    result = run(c, FakeMetrics({"oom_failures_per_min": 4}))
    assert result.outcome != "resolved" and c.mutations == []
    assert "MAX_SEQ_LEN" in result.reason and "computed from the environment variable" in result.reason


def _scenario(env: list[dict]) -> Scenario:
    return Scenario.model_validate({
        "name": "kserve", "playbook": "none", "expect": "resolved", "description": "flags in an env var",
        "start": "2026-03-14T03:12:07Z", "alert": {"name": "Test"},
        "nodes": [{"name": "gpu-node-0", "gpus": [{"index": 0, "memory_total_mib": 81559, "utilization_pct": 90}]}],
        "workloads": [{"kind": "statefulset", "name": "vllm-server", "namespace": "llm", "replicas": 1,
                       "selector": {"app": "vllm-server"},
                       "containers": [{"name": "main", "command": list(COMMAND), "args": list(ARGS), "env": env}],
                       "placement": [{"node": "gpu-node-0", "gpu_index": 0}], "gpu_memory_mib": 70000,
                       "restart_seconds": 30}],
        "signals": [{"name": "oom_failures_per_min", "series": [{"labels": {"pod": "vllm-server-0"},
                                                                 "points": [[-60, 4], [0, 4]]}]}],
        "reactions": [{"name": "shorter-context-stops-ooms",
                       "on": {"arg_changed": {"workload": "statefulset/vllm-server", "container": "main",
                                              "flag": "--max-model-len", "at_most": 7500}},
                       "effects": [{"after": 0, "signal": "oom_failures_per_min", "value": 0}]}],
    })


def test_vllm_additional_args_in_the_simulated_world_changes_the_env_var_and_its_reaction_fires():
    scenario = _scenario([{"name": "HF_HOME", "value": "/mnt/models/.cache"},
                          {"name": "VLLM_ADDITIONAL_ARGS", "value": EXTRA},
                          {"name": "HF_TOKEN", "value_from": "secretKeyRef huggingface/token"}])
    clock = FakeClock(scenario.start)
    world = build_world(scenario, clock)
    spec = world.cluster.get_workload("llm", "statefulset", "vllm-server").container("main")
    assert spec == ContainerSpec("main", COMMAND, ARGS, (HF, EnvVar("VLLM_ADDITIONAL_ARGS", EXTRA), TOKEN))
    e = engine(clock, metrics=world.metrics, cluster_=world.cluster, operator=AssumeYes("t"))
    result = e.run(playbook(LOWER))
    assert result.outcome == "resolved", result.reason
    after = world.cluster.get_workload("llm", "statefulset", "vllm-server").container("main")
    assert (after.command, after.args) == (COMMAND, ARGS)
    assert after.env[1] == EnvVar("VLLM_ADDITIONAL_ARGS", "--max-model-len 7373 --enforce-eager")
    changed = next(m for m in world.mutations if m["op"] == "set_container_argv")
    assert changed["before"]["env"] == {"VLLM_ADDITIONAL_ARGS": EXTRA}
    assert changed["after"]["env"] == {"VLLM_ADDITIONAL_ARGS": "--max-model-len 7373 --enforce-eager"}
    assert [m["reaction"] for m in world.mutations if m["op"] == "reaction"] == ["shorter-context-stops-ooms"]
    assert any(m["op"] == "container_restarted" for m in world.mutations)  # a changed env restarts the pods


def test_max_seq_len_template_in_the_simulated_world_is_refused_naming_the_variable():
    scenario = _scenario([{"name": "MAX_SEQ_LEN", "value": "8192"}])
    data = scenario.model_dump(mode="json", exclude_defaults=True)
    data["workloads"][0]["containers"][0]["args"] = ["exec vllm serve m --max-model-len=${MAX_SEQ_LEN}"]
    scenario = Scenario.model_validate(data)
    clock = FakeClock(scenario.start)
    world = build_world(scenario, clock)
    e = engine(clock, metrics=world.metrics, cluster_=world.cluster, operator=AssumeYes("t"))
    result = e.run(playbook(LOWER))
    assert result.outcome != "resolved" and "MAX_SEQ_LEN" in result.reason
    assert not [m for m in world.mutations if m["op"] == "set_container_argv"]
