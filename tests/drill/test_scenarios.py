"""Scenario files: every bundled one loads and builds, its key facts hold, its reactions answer the
SOP's remedy, and a broken file is reported clearly."""

from __future__ import annotations

import datetime as dt
import importlib.resources
import json
import textwrap

import pytest

from runbook.files import bundled
from runbook.commandline import compose_commands
from runbook.clock import FakeClock
from runbook.errors import BackendUnavailable, InvalidInput
from runbook.sim.scenario import Scenario, list_scenarios, load_scenario, parse_scenario, scenario_names
from runbook.sim.world import build_world

BUNDLED = {"oom-surge": "resolved", "waiting-queue": "resolved", "zombie-process": "resolved",
           "lingering-cuda-context": "resolved", "waiting-queue-all-unready": "refused",
           "oom-surge-metrics-down": "refused"}
BUNDLED |= {"oom-surge-compose": "resolved", "zombie-process-compose": "resolved"}  # Docker Compose hosts (issue 16, item 5)
BUNDLED |= {"canary-rollback": "resolved", "canary-rollback-stable-unready": "refused"}  # SOP §7 (issue 16, item 3)
BUNDLED |= {"disconnect-storm": "resolved", "prompt-truncation": "resolved"}  # from the logs (issue 16, item 2)
BUNDLED |= {"oom-surge-at-floor": "resolved", "oom-surge-hpa": "resolved"}  # --max-model-len at its floor: the kill is the one restart (issue 16, item 9); an HPA held (item 8)
BUNDLED |= {"oom-surge-capacity-returns-ooms": "mitigated"}  # the OOMs return at 3 replicas: capacity reduced (issue 34)
BUNDLED |= {"latency-creep": "resolved", "latency-creep-water-line": "resolved"}  # P99 creeping up: one pod restarted, or the water line lowered (issue 16, item 2)
VLLM = {"app": "vllm-server"}


def world_of(name: str):
    scenario = load_scenario(name)
    clock = FakeClock(scenario.start)
    return build_world(scenario, clock), clock


def value(world, signal: str, **labels: str) -> float:
    [sample] = world.metrics.query(signal, at=world.clock.now(), labels=labels)
    return sample.value


# ---------------------------------------------------------------------------- bundled scenarios

def test_the_bundled_scenarios():
    assert set(scenario_names()) == set(BUNDLED)
    scenarios = list_scenarios()
    assert [s.name for s in scenarios] == sorted(BUNDLED)
    for s in scenarios:
        assert s.expect == BUNDLED[s.name]
        assert s.description and s.playbook and s.alert.name
        assert s.start.tzinfo is not None


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_each_scenario_builds_and_answers(name):
    world, _ = world_of(name)
    pods = [pod for w in world.scenario.workloads for pod in world.cluster.list_pods(w.namespace, w.selector)]
    compose_hosts = [n for n in world.scenario.nodes if n.compose]  # vLLM under Docker Compose: no pods
    assert (pods or compose_hosts) and all(p.phase == "Running" for p in pods)
    for host in compose_hosts:
        answer = world.nodes.run(host.name, compose_commands.ps_argv(host.compose.file, host.compose.service), timeout=5)
        assert json.loads(answer.stdout)["State"] == "running"
    for node in world.scenario.nodes:
        assert world.cluster.get_node(node.name).name == node.name
    assert world.mutations == []


def test_scenarios_are_found_as_package_resources():
    folder = importlib.resources.files("runbook") / "scenarios"
    assert {p.name for p in folder.iterdir() if p.name.endswith(".yaml")} == {f"{n}.yaml" for n in BUNDLED}


def test_a_scenario_loads_from_a_path(tmp_path):
    source = importlib.resources.files("runbook") / "scenarios" / "oom-surge.yaml"
    path = tmp_path / "mine.yaml"
    path.write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    assert load_scenario(str(path)).name == "oom-surge"
    assert load_scenario(path).name == "oom-surge"


def test_each_scenario_names_a_bundled_playbook():
    folder = bundled.folder("playbooks")
    playbooks = {p.name.rsplit(".", 1)[0] for p in folder.iterdir() if p.name.endswith(".yaml")}
    assert playbooks, f"no playbooks bundled in {folder}"
    for s in list_scenarios():
        assert s.playbook in playbooks, f"{s.name} drills {s.playbook!r}, which is not bundled"


# ---------------------------------------------------------------------------- key facts and the SOP's remedy

def test_oom_surge():
    world, clock = world_of("oom-surge")
    assert [p.ready for p in world.cluster.list_pods("llm", VLLM)] == [True, True, True]
    assert value(world, "oom_failures_per_min") > 0
    yesterday = world.metrics.query("oom_failures_per_min", at=clock.now() - dt.timedelta(days=1))
    assert yesterday[0].value == 0  # sudden, not gradual
    assert value(world, "kv_cache_usage") >= 0.95
    workload = world.cluster.get_workload("llm", "statefulset", "vllm-server")
    args = list(workload.container("vllm").args)
    assert "--max-model-len=7372" in args and "--gpu-memory-utilization=0.9" in args
    # SOP scenario A: scale to 1, then restart with --max-model-len lowered by 10%
    world.cluster.scale("llm", "statefulset", "vllm-server", 1)
    clock.advance(60)
    assert value(world, "oom_failures_per_min") > 0
    args[args.index("--max-model-len=7372")] = "--max-model-len=6635"
    world.cluster.set_container_argv("llm", "statefulset", "vllm-server", "vllm", command=None, args=args)
    clock.advance(300)
    assert value(world, "oom_failures_per_min") == 0
    assert value(world, "kv_cache_usage") <= 0.8
    assert world.cluster.get_workload("llm", "statefulset", "vllm-server").ready_replicas == 1


def test_waiting_queue():
    world, clock = world_of("waiting-queue")
    assert value(world, "waiting_requests") > 50
    pods = world.cluster.list_pods("llm", VLLM)
    [unready] = [p for p in pods if not p.ready]
    assert unready.name == "vllm-server-2"
    with pytest.raises(BackendUnavailable, match="timed out"):
        world.http.get(f"http://{unready.ip}:8000/health", timeout=3)
    logs = world.cluster.logs("llm", {"app": "api-gateway"}, since_seconds=300)
    assert any('" 503 ' in log.text for log in logs)
    clock.advance(120)
    assert value(world, "waiting_requests") > 85  # still rising
    world.cluster.delete_pod("llm", "vllm-server-2", uid=unready.uid)
    clock.advance(40)
    assert all(p.ready for p in world.cluster.list_pods("llm", VLLM))
    clock.advance(90)
    assert value(world, "waiting_requests") < 20
    clock.advance(60)
    logs = world.cluster.logs("llm", {"app": "api-gateway"}, since_seconds=60)
    assert not any('" 503 ' in log.text for log in logs)


def test_waiting_queue_all_unready():
    world, _ = world_of("waiting-queue-all-unready")
    assert value(world, "waiting_requests") > 50
    assert world.cluster.get_workload("llm", "statefulset", "vllm-server").ready_replicas == 0
    assert not any(p.ready for p in world.cluster.list_pods("llm", VLLM))


def test_zombie_process():
    world, clock = world_of("zombie-process")
    pods = {p.name: p for p in world.cluster.list_pods("llm", VLLM)}
    assert all(p.ready for p in pods.values())
    assert value(world, "http_503_per_min") > 5
    ps = world.cluster.exec("llm", "vllm-server-1", "vllm", ["ps", "-eo", "pid,ppid,stat,etimes,args"], timeout=5)
    assert " Dsl " in ps.stdout and "[python3] <defunct>" in ps.stdout
    assert ":8000" not in world.cluster.exec("llm", "vllm-server-1", "vllm", ["ss", "-tln"], timeout=5).stdout
    with pytest.raises(BackendUnavailable):
        world.http.get(f"http://{pods['vllm-server-1'].ip}:8000/health", timeout=3)
    world.cluster.delete_pod("llm", "vllm-server-1", uid=pods["vllm-server-1"].uid)
    clock.advance(60)
    fresh = {p.name: p for p in world.cluster.list_pods("llm", VLLM)}["vllm-server-1"]
    assert fresh.ready and world.http.get(f"http://{fresh.ip}:8000/health", timeout=3).status == 200
    assert value(world, "http_503_per_min") == 0


def test_lingering_cuda_context():
    world, clock = world_of("lingering-cuda-context")
    assert not world.cluster.get_node("gpu-node-2").unschedulable
    query = ["nvidia-smi", "--query-gpu=index,uuid,memory.used,memory.total,utilization.gpu",
             "--format=csv,noheader,nounits"]
    apps = ["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory,process_name", "--format=csv,noheader,nounits"]
    assert world.nodes.run("gpu-node-2", query, timeout=5).stdout.splitlines()[1].endswith(", 79872, 81559, 0")
    assert "48213" not in world.nodes.run("gpu-node-2", apps, timeout=5).stdout
    fuser = world.nodes.run("gpu-node-2", ["sh", "-c", "fuser -v /dev/nvidia* 2>&1"], timeout=5).stdout
    assert "48213" in fuser and "3121" in fuser
    assert value(world, "gpu_memory_used_ratio", node="gpu-node-2", gpu="1") > 0.9
    world.nodes.run("gpu-node-2", ["kill", "-KILL", "48213"], timeout=5)
    clock.advance(5)
    assert world.nodes.run("gpu-node-2", query, timeout=5).stdout.splitlines()[1].endswith(", 0, 81559, 0")
    assert value(world, "gpu_memory_used_ratio", node="gpu-node-2", gpu="1") == 0
    assert all(p.ready for p in world.cluster.list_pods("llm", VLLM))


def test_oom_surge_metrics_down():
    world, _ = world_of("oom-surge-metrics-down")
    with pytest.raises(BackendUnavailable):
        world.metrics.query("oom_failures_per_min", at=world.clock.now())
    assert len(world.cluster.list_pods("llm", VLLM)) == 3


# ---------------------------------------------------------------------------- schema errors

MINIMAL = """\
name: tiny
playbook: oom-surge
expect: resolved
description: a tiny world
start: 2026-03-14T03:12:07Z
alert: {name: Test}
"""


def problems(text: str, source: str = "tiny.yaml") -> str:
    with pytest.raises(InvalidInput) as info:
        parse_scenario(text, source)
    message = str(info.value)
    assert message.startswith(f"{source}: ")
    return message


def test_a_minimal_scenario_is_valid():
    s = parse_scenario(MINIMAL, "tiny.yaml")
    assert (s.name, s.expect, s.metrics.unreachable, s.nodes, s.reactions) == ("tiny", "resolved", False, [], [])
    assert build_world(s, FakeClock(s.start)).cluster.list_pods("llm", VLLM) == []


def test_unknown_and_missing_keys_are_reported_with_their_paths():
    message = problems(MINIMAL.replace("alert: {name: Test}\n", "colour: blue\n"))
    assert "2 problems" in message
    assert "alert: Field required" in message and "colour: Extra inputs are not permitted" in message


def test_nested_problems_name_the_path():
    text = MINIMAL + textwrap.dedent("""\
        nodes:
          - name: gpu-node-0
            gpus: [{index: 0, memory_total_mib: -5}]
        """)
    assert "nodes.0.gpus.0.memory_total_mib: Input should be greater than 0" in problems(text)


def test_references_are_checked():
    text = MINIMAL + textwrap.dedent("""\
        signals: [{name: s, series: [{labels: {pod: p}, points: [[0, 1]]}]}]
        reactions:
          - on: {pod_deleted: {pod: vllm-server-0}}
            effects: [{signal: nope, value: 0}]
        """)
    assert "no pod 'vllm-server-0'" in problems(text)
    text = MINIMAL + textwrap.dedent("""\
        signals: [{name: s, series: [{labels: {pod: p}, points: [[0, 1]]}]}]
        workloads:
          - {kind: statefulset, name: vllm-server, namespace: llm, replicas: 1, selector: {app: v},
             containers: [{name: vllm}]}
        reactions:
          - on: {pod_deleted: {pod: vllm-server-0}}
            effects: [{signal: nope, value: 0}]
        """)
    assert "no signal 'nope' (signals: s)" in problems(text)
    text = MINIMAL + "pods: [{name: vllm-server-7, ready: false}]\n"
    assert "pod override 'vllm-server-7': no workload pod has that name" in problems(text)


def test_effects_and_triggers_take_exactly_one_kind():
    text = MINIMAL + textwrap.dedent("""\
        signals: [{name: s, series: [{points: [[0, 1]]}]}]
        reactions:
          - on: {}
            effects: [{signal: s}]
        """)
    message = problems(text)
    assert "give exactly one of arg_changed, scaled" in message
    assert "give exactly one of value, points, absent: true" in message


def test_points_must_move_forward():
    text = MINIMAL + "signals: [{name: s, series: [{points: [[0, 1], [-60, 2]]}]}]\n"
    assert "point times must increase strictly" in problems(text)


def test_yaml_problems():
    assert "key `name` appears twice" in problems(MINIMAL + "name: again\n")
    assert "not valid YAML" in problems("name: [unclosed\n")
    assert "a scenario is a mapping" in problems("- a\n- b\n")
    assert "start: Input should have timezone info" in problems(MINIMAL.replace("03:12:07Z", "03:12:07"))


def test_yaml_1_2_booleans_and_relative_times():
    text = (MINIMAL + textwrap.dedent("""\
        alert: {name: Test, labels: {enabled: yes, gpu: 1}}
        signals: [{name: s, series: [{points: [[-1d, 0], [-5m, 1], [+90s, 2]]}]}]
        reactions:
          - on: {node_pid_killed: {node: n, pid: 4}}
            effects: [{after: 1m, signal: s, value: 0}]
        nodes: [{name: n}]
        """)).replace("alert: {name: Test}\n", "", 1)
    s = parse_scenario(text, "tiny.yaml")
    assert s.alert.labels == {"enabled": "yes", "gpu": "1"}
    assert [t for t, _ in s.signals[0].series[0].points] == [-86400, -300, 90]
    assert s.reactions[0].on.kind == "node_pid_killed" and s.reactions[0].effects[0].after == 60


def test_unknown_names_and_paths():
    with pytest.raises(InvalidInput, match=r"no bundled scenario named 'nope' \(bundled: canary-rollback, "):
        load_scenario("nope")
    with pytest.raises(InvalidInput, match="cannot read scenario file"):
        load_scenario("/nonexistent/scenario.yaml")


def test_the_model_is_frozen():
    s = parse_scenario(MINIMAL, "tiny.yaml")
    with pytest.raises(Exception):
        s.name = "other"  # type: ignore[misc]
    assert isinstance(s, Scenario)
