"""The simulated world: signals over virtual time, pods and workloads, native commands, reactions.

Everything runs on a FakeClock: "wait 45 s" is `clock.advance(45)`, never a real sleep.
"""

from __future__ import annotations

import datetime as dt
import re

import pytest

from runbook.backends.base import World
from runbook.sim.world import SimulatedWorld
from runbook.clock import FakeClock
from runbook.sim.scenario import Scenario, load_scenario
from runbook.sim.world import build_world
from runbook.errors import BackendUnavailable, CommandFailed, Conflict, InvalidInput, NotFound

MEMORY = ["nvidia-smi", "-q", "-d", "MEMORY"]
PS = ["ps", "-eo", "pid,ppid,stat,etimes,args"]
QUERY_GPU = ["nvidia-smi", "--query-gpu=index,uuid,memory.used,memory.total,utilization.gpu",
             "--format=csv,noheader,nounits"]
COMPUTE_APPS = ["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory,process_name",
                "--format=csv,noheader,nounits"]
FUSER = ["sh", "-c", "fuser -v /dev/nvidia* 2>&1"]
VLLM = {"app": "vllm-server"}


def world_of(name: str) -> tuple[SimulatedWorld, FakeClock]:
    scenario = load_scenario(name)
    clock = FakeClock(scenario.start)
    return build_world(scenario, clock), clock


def small(**changes) -> Scenario:
    """A one-pod scenario to test one behaviour at a time."""
    data = {
        "name": "small", "playbook": "none", "expect": "resolved", "description": "test world",
        "start": "2026-03-14T03:12:07Z", "alert": {"name": "Test"},
        "nodes": [{"name": "gpu-node-0", "gpus": [{"index": 0, "memory_total_mib": 23028, "utilization_pct": 90}]}],
        "workloads": [{"kind": "statefulset", "name": "vllm-server", "namespace": "llm", "replicas": 1,
                       "selector": VLLM, "containers": [{"name": "vllm", "command": ["python3", "-m",
                                                         "vllm.entrypoints.openai.api_server"],
                                                         "args": ["--max-model-len=7372", "--port=8000"]}],
                       "placement": [{"node": "gpu-node-0", "gpu_index": 0}], "gpu_memory_mib": 20000,
                       "restart_seconds": 30}],
        "signals": [{"name": "s", "series": [{"labels": {"pod": "vllm-server-0"}, "points": [[-60, 1], [0, 2]]}]}],
    }
    data.update(changes)
    return Scenario.model_validate(data)


def at(world: SimulatedWorld, seconds: float) -> dt.datetime:
    return world.scenario.start + dt.timedelta(seconds=seconds)


def total(world: SimulatedWorld, signal: str, seconds: float = 0, **labels: str) -> float | None:
    samples = world.metrics.query(signal, at=at(world, seconds), labels=labels)
    return samples[0].value if samples else None


def exec_(world: SimulatedWorld, pod: str, argv: list[str]):
    return world.cluster.exec("llm", pod, "vllm", argv, timeout=10)


def pod(world: SimulatedWorld, name: str):
    return next(p for p in world.cluster.list_pods("llm", VLLM) if p.name == name)


# ---------------------------------------------------------------------------- metrics

def test_signal_values_at_t0_yesterday_and_by_label():
    world, _ = world_of("oom-surge")
    assert total(world, "oom_failures_per_min") == 21
    by_pod = world.metrics.query("oom_failures_per_min", at=at(world, 0), by=["pod"])
    assert [(s.labels, s.value) for s in by_pod] == [
        ({"pod": "vllm-server-0"}, 8), ({"pod": "vllm-server-1"}, 7), ({"pod": "vllm-server-2"}, 6)]
    yesterday = world.metrics.query("oom_failures_per_min", at=at(world, -86400), by=["pod"])
    assert [s.value for s in yesterday] == [0, 0, 0]
    assert total(world, "oom_failures_per_min", pod="vllm-server-1") == 7
    assert total(world, "kv_cache_usage") == 0.98  # max
    reasons = world.metrics.query("failed_requests_per_min", at=at(world, 0), by=["reason"])
    assert {s.labels["reason"]: s.value for s in reasons}["oom"] == 21


def test_values_are_step_wise_and_never_from_the_future():
    world, clock = world_of("oom-surge")
    assert total(world, "oom_failures_per_min", -301) == 1 + 1 + 0  # the -420 and -360 points hold
    assert total(world, "oom_failures_per_min", -300) == 3 + 2 + 2
    assert total(world, "oom_failures_per_min", 300) == 21  # asked ahead of the clock: now's value
    clock.advance(120)
    assert total(world, "oom_failures_per_min", 120) == 24  # the scripted worsening


def test_unknown_signal_or_no_match_is_empty():
    world, _ = world_of("oom-surge")
    assert world.metrics.query("no_such_signal", at=at(world, 0)) == []
    assert world.metrics.query("oom_failures_per_min", at=at(world, 0), labels={"pod": "nope"}) == []
    assert world.metrics.query("oom_failures_per_min", at=at(world, -10 * 86400)) == []  # before any point


def test_a_series_that_goes_stale_drops_out():
    world, _ = world_of("waiting-queue")
    by_pod = world.metrics.query("waiting_requests", at=at(world, 0), by=["pod"])
    assert [s.labels["pod"] for s in by_pod] == ["vllm-server-0", "vllm-server-1", "vllm-server-3"]
    assert total(world, "waiting_requests") == 80
    assert len(world.metrics.query("waiting_requests", at=at(world, -86400), by=["pod"])) == 4


def test_avg_aggregation():
    world, _ = world_of("zombie-process")
    assert total(world, "gpu_utilization_pct") == pytest.approx((71 + 0 + 68) / 3)


def test_query_range_steps_from_start_to_end():
    world, clock = world_of("oom-surge")
    series = world.metrics.query_range("oom_failures_per_min", start=at(world, -600), end=at(world, 0),
                                       step_seconds=60, by=["pod"])
    assert [s.labels["pod"] for s in series] == ["vllm-server-0", "vllm-server-1", "vllm-server-2"]
    first = series[0]
    assert len(first.points) == 11 and first.points[0][0] == at(world, -600) and first.points[-1][0] == at(world, 0)
    assert [v for _, v in first.points] == [0, 0, 0, 1, 1, 3, 3, 5, 5, 7, 8]
    ahead = world.metrics.query_range("oom_failures_per_min", start=at(world, -60), end=at(world, 600),
                                      step_seconds=30)
    assert ahead[0].points[-1][0] == clock.now()  # nothing after now
    with pytest.raises(InvalidInput):
        world.metrics.query_range("oom_failures_per_min", start=at(world, 0), end=at(world, -60), step_seconds=1)
    with pytest.raises(InvalidInput):
        world.metrics.query_range("oom_failures_per_min", start=at(world, -86400 * 2), end=at(world, 0),
                                  step_seconds=1)
    with pytest.raises(InvalidInput):
        world.metrics.query_range("oom_failures_per_min", start=at(world, -60), end=at(world, 0), step_seconds=0)


def test_unreachable_metrics_raise_on_every_call():
    world, _ = world_of("oom-surge-metrics-down")
    with pytest.raises(BackendUnavailable, match=r"prometheus at sim://.* is unreachable"):
        world.metrics.query("oom_failures_per_min", at=at(world, 0))
    with pytest.raises(BackendUnavailable, match="unreachable"):
        world.metrics.query_range("oom_failures_per_min", start=at(world, -60), end=at(world, 0), step_seconds=15)
    assert len(world.cluster.list_pods("llm", VLLM)) == 3  # the rest of the world still answers


# ---------------------------------------------------------------------------- reactions

def test_lowering_max_model_len_stops_ooms_60s_later_and_keeps_history():
    world, clock = world_of("oom-surge")
    clock.advance(30)
    args = list(world.cluster.get_workload("llm", "statefulset", "vllm-server").container("vllm").args)
    args[args.index("--max-model-len=7372")] = "--max-model-len=6635"
    world.cluster.set_container_argv("llm", "statefulset", "vllm-server", "vllm", command=None, args=args)
    clock.advance(59)
    assert total(world, "oom_failures_per_min", 89) > 0
    clock.advance(1)
    assert total(world, "oom_failures_per_min", 90) == 0
    assert total(world, "kv_cache_usage", 90) == 0.81
    clock.advance(120)
    assert total(world, "kv_cache_usage", 210) == 0.78
    assert total(world, "oom_failures_per_min", 0) == 21  # the past is not rewritten
    assert [m["op"] for m in world.mutations][:2] == ["set_container_argv", "container_restarted"]
    assert any(m["op"] == "reaction" and m["reaction"] == "lower-max-model-len-stops-ooms" for m in world.mutations)


def test_a_change_that_misses_the_threshold_triggers_nothing():
    world, clock = world_of("oom-surge")
    args = ["--model=meta-llama/Meta-Llama-3-8B-Instruct", "--max-model-len=7200", "--port=8000"]
    world.cluster.set_container_argv("llm", "statefulset", "vllm-server", "vllm", command=None, args=args)
    clock.advance(120)
    assert total(world, "oom_failures_per_min", 120) == 24
    assert not any(m["op"] == "reaction" for m in world.mutations)


def test_scaling_to_one_lowers_but_does_not_stop_ooms():
    world, clock = world_of("oom-surge")
    clock.advance(10)
    world.cluster.scale("llm", "statefulset", "vllm-server", 1)
    by_pod = world.metrics.query("oom_failures_per_min", at=at(world, 10), by=["pod"])
    assert [(s.labels["pod"], s.value) for s in by_pod] == [("vllm-server-0", 6)]
    clock.advance(300)
    assert total(world, "oom_failures_per_min", 310) == 4
    assert len(world.metrics.query("oom_failures_per_min", at=at(world, 5), by=["pod"])) == 3  # history


def test_pod_effects_and_stopped_logs_apply_when_their_time_comes():
    scenario = small(
        pods=[{"name": "vllm-server-0", "ready": False, "health": "hang"}],
        extra_pods=[{"name": "gw", "namespace": "llm", "labels": {"app": "gw"},
                     "logs": [{"id": "err", "every": 10, "from": -60, "text": "{clf} 503 {n}"}]}],
        reactions=[{"on": {"process_killed": {"pod": "vllm-server-0", "pattern": "vllm\\.entrypoints"}},
                    "effects": [{"after": 20, "pod": "vllm-server-0", "ready": False},
                                {"after": 5, "stop_logs": "err"}]}])
    clock = FakeClock(scenario.start)
    world = build_world(scenario, clock)
    assert exec_(world, "vllm-server-0", ["pkill", "-KILL", "-f", "vllm.entrypoints"]).exit_code == 0
    clock.advance(29)
    assert not pod(world, "vllm-server-0").ready  # restarting (30 s)
    clock.advance(1)
    assert not pod(world, "vllm-server-0").ready  # the effect at +20 set it unready
    assert [m["op"] for m in world.mutations].count("effect") == 2
    clock.advance(60)
    text = world.cluster.logs("llm", {"app": "gw"}, since_seconds=60)[0].text
    assert text == ""  # the repeating line stopped 5 s after the kill
    assert "503 6" in world.cluster.logs("llm", {"app": "gw"}, since_seconds=200)[0].text


# ---------------------------------------------------------------------------- cluster reads

def test_pods_have_deterministic_identities():
    world, _ = world_of("waiting-queue")
    again, _ = world_of("waiting-queue")
    pods = world.cluster.list_pods("llm", VLLM)
    assert [p.name for p in pods] == [f"vllm-server-{i}" for i in range(4)]
    assert [p.uid for p in pods] == [p.uid for p in again.cluster.list_pods("llm", VLLM)]
    assert len({p.uid for p in pods}) == 4 and len({p.ip for p in pods}) == 4
    assert [p.ready for p in pods] == [True, True, False, True]
    p = pods[0]
    assert p.owner == "statefulset/vllm-server" and p.phase == "Running" and p.ip.startswith("10.")
    assert re.fullmatch(r"containerd://[0-9a-f]{64}", p.containers[0].container_id)
    assert p.labels["app"] == "vllm-server" and p.node == "gpu-node-0"
    gateway = world.cluster.list_pods("llm", {"app": "api-gateway"})
    assert [g.name for g in gateway] == ["api-gateway-7d9f6c5b8-qm7rt", "api-gateway-7d9f6c5b8-x2k4p"]
    assert world.cluster.list_pods("other", VLLM) == []
    with pytest.raises(InvalidInput):
        world.cluster.list_pods("llm", {})


def test_last_termination_and_restarts():
    world, _ = world_of("oom-surge")
    p = pod(world, "vllm-server-2")
    assert p.restarts == 1 and p.last_termination_reason == "Error"
    assert p.containers[0].last_termination_at == at(world, -180)
    assert pod(world, "vllm-server-0").last_termination_reason is None


def test_workload_and_node():
    world, _ = world_of("waiting-queue")
    w = world.cluster.get_workload("llm", "statefulset", "vllm-server")
    assert (w.replicas, w.ready_replicas, w.ref) == (4, 3, "statefulset/vllm-server")
    assert "--max-model-len=8192" in w.container("vllm").args
    with pytest.raises(NotFound):
        world.cluster.get_workload("llm", "statefulset", "nope")
    with pytest.raises(NotFound):
        world.cluster.get_workload("llm", "deployment", "vllm-server")
    with pytest.raises(InvalidInput):
        world.cluster.get_workload("llm", "cronjob", "vllm-server")
    node = world.cluster.get_node("gpu-node-1")
    assert node.ready and not node.unschedulable
    with pytest.raises(NotFound):
        world.cluster.get_node("gpu-node-9")


def test_world_backends():
    world, _ = world_of("oom-surge")
    backends = world.world_backends()
    assert isinstance(backends, World)
    # Each backend is the world's own, behind one lock so that fanned-out steps take turns.
    assert backends.metrics._backend is world.metrics and backends.cluster._backend is world.cluster
    assert backends.nodes._backend is world.nodes and backends.http._backend is world.http
    assert backends.cluster.list_pods("llm", {"app": "vllm-server"}) == world.cluster.list_pods("llm", {"app": "vllm-server"})


# ---------------------------------------------------------------------------- cluster mutations

def test_dry_runs_validate_and_change_nothing():
    world, _ = world_of("waiting-queue")
    before = [(p.name, p.uid, p.ready, p.restarts) for p in world.cluster.list_pods("llm", VLLM)]
    preview = world.cluster.scale("llm", "statefulset", "vllm-server", 1, dry_run=True)
    assert preview.replicas == 1
    preview = world.cluster.set_container_argv("llm", "statefulset", "vllm-server", "vllm",
                                               command=None, args=["--port=8000"], dry_run=True)
    assert preview.container("vllm").args == ("--port=8000",)
    uid = pod(world, "vllm-server-2").uid
    world.cluster.delete_pod("llm", "vllm-server-2", uid=uid, dry_run=True)
    with pytest.raises(Conflict):
        world.cluster.delete_pod("llm", "vllm-server-2", uid="0000", dry_run=True)
    with pytest.raises(NotFound):
        world.cluster.set_container_argv("llm", "statefulset", "vllm-server", "sidecar", command=None,
                                         args=[], dry_run=True)
    with pytest.raises(NotFound):
        world.cluster.delete_pod("llm", "vllm-server-9", uid=uid, dry_run=True)
    assert world.mutations == []
    assert [(p.name, p.uid, p.ready, p.restarts) for p in world.cluster.list_pods("llm", VLLM)] == before
    assert world.cluster.get_workload("llm", "statefulset", "vllm-server").replicas == 4


def test_scale_down_removes_highest_ordinals_and_scale_up_waits_for_readiness():
    world, clock = world_of("oom-surge")
    originals = {p.name: p.uid for p in world.cluster.list_pods("llm", VLLM)}
    w = world.cluster.scale("llm", "statefulset", "vllm-server", 1)
    assert (w.replicas, w.ready_replicas) == (1, 1)
    assert [p.name for p in world.cluster.list_pods("llm", VLLM)] == ["vllm-server-0"]
    assert world.mutations[0] | {"at": None} == {"op": "scale", "at": None, "workload": "statefulset/vllm-server",
                                                 "namespace": "llm", "before": 3, "after": 1}
    clock.advance(60)
    w = world.cluster.scale("llm", "statefulset", "vllm-server", 3)
    assert (w.replicas, w.ready_replicas) == (3, 1)
    new = pod(world, "vllm-server-2")
    assert new.phase == "Pending" and not new.ready and new.uid != originals["vllm-server-2"]
    clock.advance(44)
    assert world.cluster.get_workload("llm", "statefulset", "vllm-server").ready_replicas == 1
    clock.advance(1)
    assert world.cluster.get_workload("llm", "statefulset", "vllm-server").ready_replicas == 3
    with pytest.raises(InvalidInput):
        world.cluster.scale("llm", "statefulset", "vllm-server", -1)


def test_set_container_argv_restarts_every_pod_with_the_new_args():
    world, clock = world_of("oom-surge")
    old = {p.name: p for p in world.cluster.list_pods("llm", VLLM)}
    args = ["--model=meta-llama/Meta-Llama-3-8B-Instruct", "--max-model-len=6635", "--port=8000"]
    w = world.cluster.set_container_argv("llm", "statefulset", "vllm-server", "vllm", command=None, args=args)
    assert w.container("vllm").args == tuple(args)
    assert w.container("vllm").command == ("python3", "-m", "vllm.entrypoints.openai.api_server")
    assert w.ready_replicas == 0
    for p in world.cluster.list_pods("llm", VLLM):
        assert p.uid == old[p.name].uid and p.restarts == old[p.name].restarts + 1
        assert p.containers[0].container_id != old[p.name].containers[0].container_id
        assert p.last_termination_reason == "Completed"
    ps = exec_(world, "vllm-server-0", PS).stdout
    assert "--max-model-len=6635" in ps and "--max-model-len=7372" not in ps
    clock.advance(44)
    assert world.cluster.get_workload("llm", "statefulset", "vllm-server").ready_replicas == 0
    clock.advance(1)
    assert world.cluster.get_workload("llm", "statefulset", "vllm-server").ready_replicas == 3
    count = len(world.mutations)
    world.cluster.set_container_argv("llm", "statefulset", "vllm-server", "vllm", command=None, args=args)
    assert len(world.mutations) == count  # nothing changed, nothing restarted
    with pytest.raises(InvalidInput):
        world.cluster.set_container_argv("llm", "statefulset", "vllm-server", "vllm", command=None,
                                         args="--max-model-len=1")  # type: ignore[arg-type]


def test_delete_pod_checks_the_uid_and_the_controller_recreates_it():
    world, clock = world_of("waiting-queue")
    victim = pod(world, "vllm-server-2")
    with pytest.raises(Conflict):
        world.cluster.delete_pod("llm", "vllm-server-2", uid=pod(world, "vllm-server-1").uid)
    world.cluster.delete_pod("llm", "vllm-server-2", uid=victim.uid)
    fresh = pod(world, "vllm-server-2")
    assert fresh.uid != victim.uid and not fresh.ready and fresh.phase == "Pending" and fresh.restarts == 0
    with pytest.raises(Conflict):  # the old uid no longer names this pod
        world.cluster.delete_pod("llm", "vllm-server-2", uid=victim.uid)
    with pytest.raises(CommandFailed):
        exec_(world, "vllm-server-2", PS)
    clock.advance(39)
    assert not pod(world, "vllm-server-2").ready
    clock.advance(1)
    assert pod(world, "vllm-server-2").ready
    assert world.http.get(f"http://{fresh.ip}:8000/health", timeout=5).status == 200
    assert exec_(world, "vllm-server-2", ["pgrep", "-f", "vllm.entrypoints"]).stdout == "1\n"
    delete = next(m for m in world.mutations if m["op"] == "delete_pod")
    assert delete["uid"] == victim.uid and delete["replacement_uid"] == fresh.uid


# ---------------------------------------------------------------------------- exec and logs

def test_exec_errors():
    world, _ = world_of("oom-surge")
    with pytest.raises(NotFound):
        world.cluster.exec("llm", "vllm-server-9", "vllm", PS, timeout=5)
    with pytest.raises(NotFound):
        world.cluster.exec("llm", "vllm-server-0", "sidecar", PS, timeout=5)
    result = exec_(world, "vllm-server-0", ["curl", "-s", "localhost:8000/metrics"])
    assert result.exit_code == 127 and "curl: not found" in result.stderr
    assert exec_(world, "vllm-server-0", ["ps", "aux"]).exit_code == 127


def test_logs_by_selector_since_and_limits():
    world, clock = world_of("waiting-queue")
    logs = world.cluster.logs("llm", {"app": "api-gateway"}, since_seconds=300)
    assert [log.pod for log in logs] == ["api-gateway-7d9f6c5b8-qm7rt", "api-gateway-7d9f6c5b8-x2k4p"]
    errors = [line for log in logs for line in log.text.splitlines() if '" 503 ' in line]
    assert len(errors) >= 20 and "[17/Mar/2026:14:" in errors[0]
    recent = world.cluster.logs("llm", {"app": "api-gateway"}, since_seconds=30)
    assert sum(log.text.count("\n") for log in recent) < sum(log.text.count("\n") for log in logs)
    tail = world.cluster.logs("llm", {"app": "api-gateway"}, since_seconds=300, tail_lines=3)
    assert all(log.text.count("\n") == 3 for log in tail)
    cut = world.cluster.logs("llm", {"app": "api-gateway"}, since_seconds=300, limit_bytes=100)
    assert all(log.truncated and len(log.text.encode()) <= 100 for log in cut)
    with pytest.raises(InvalidInput):
        world.cluster.logs("llm", {}, since_seconds=60)
    world.cluster.delete_pod("llm", "vllm-server-2", uid=pod(world, "vllm-server-2").uid)
    clock.advance(300)
    later = world.cluster.logs("llm", {"app": "api-gateway"}, since_seconds=200)
    assert not any('" 503 ' in log.text for log in later) and all(log.text for log in later)


# ---------------------------------------------------------------------------- commands in pods

def test_nvidia_smi_memory_report_in_a_pod():
    world, _ = world_of("oom-surge")
    out = exec_(world, "vllm-server-0", MEMORY).stdout
    assert "==============NVSMI LOG==============" in out
    assert re.search(r"^GPU 00000000:00:1E\.0$", out, re.M)
    assert re.search(r"^        Total +: 23028 MiB$", out, re.M)
    assert re.search(r"^        Used +: 22386 MiB$", out, re.M)
    assert re.search(r"^        Free +: 543 MiB$", out, re.M)  # total - reserved - used
    assert "    BAR1 Memory Usage" in out


def test_ps_in_a_pod_lists_its_processes_and_itself():
    world, _ = world_of("zombie-process")
    out = exec_(world, "vllm-server-1", PS).stdout
    lines = out.splitlines()
    assert lines[0] == "    PID    PPID STAT ELAPSED COMMAND"
    assert re.match(r"^ +1 +0 Dsl +\d+ python3 -m vllm\.entrypoints\.openai\.api_server --model=", lines[1])
    assert re.match(r"^ +87 +1 Z +\d+ \[python3\] <defunct>$", lines[2])
    assert lines[3].endswith(" ps -eo pid,ppid,stat,etimes,args")


def test_sockets_in_a_pod():
    world, _ = world_of("zombie-process")
    healthy = exec_(world, "vllm-server-0", ["cat", "/proc/net/tcp"]).stdout
    assert healthy.splitlines()[0].startswith("  sl  local_address rem_address   st tx_queue")
    assert re.search(r"^ +0: 00000000:1F40 00000000:0000 0A ", healthy, re.M)
    stuck = exec_(world, "vllm-server-1", ["cat", "/proc/net/tcp"]).stdout
    assert " 0A " not in stuck and re.search(r":1F40 [0-9A-F]{8}:[0-9A-F]{4} 08 ", stuck)  # CLOSE_WAIT only
    assert exec_(world, "vllm-server-1", ["cat", "/proc/net/tcp6"]).stdout.startswith("  sl  local_address")
    assert "0.0.0.0:8000" in exec_(world, "vllm-server-0", ["ss", "-tln"]).stdout
    assert exec_(world, "vllm-server-1", ["ss", "-tln"]).stdout.count("\n") == 1  # the header only


def test_pgrep_matches_args_and_zombies_by_name():
    world, _ = world_of("zombie-process")
    assert exec_(world, "vllm-server-0", ["pgrep", "-f", "vllm.entrypoints"]).stdout == "1\n"
    none = exec_(world, "vllm-server-0", ["pgrep", "-f", "sglang"])
    assert (none.stdout, none.exit_code) == ("", 1)
    assert exec_(world, "vllm-server-1", ["pgrep", "-f", "python3"]).stdout == "1\n87\n"
    assert exec_(world, "vllm-server-1", ["pgrep", "-f", "("]).exit_code == 2


def test_pkill_of_the_vllm_process_restarts_the_container():
    world, clock = world_of("oom-surge")
    before = pod(world, "vllm-server-0")
    result = exec_(world, "vllm-server-0", ["pkill", "-KILL", "-f", "vllm.entrypoints"])
    assert result.exit_code == 0
    after = pod(world, "vllm-server-0")
    assert not after.ready and after.restarts == before.restarts + 1 and after.uid == before.uid
    assert after.last_termination_reason == "Error"
    assert re.search(r"^ +1 +0 Ssl +0 python3 -m vllm", exec_(world, "vllm-server-0", PS).stdout, re.M)
    with pytest.raises(BackendUnavailable, match="refused"):
        world.http.get(f"http://{after.ip}:8000/health", timeout=5)
    clock.advance(45)
    assert pod(world, "vllm-server-0").ready
    assert exec_(world, "vllm-server-0", ["pkill", "-TERM", "-f", "sglang"]).exit_code == 1
    ops = [m["op"] for m in world.mutations]
    assert ops == ["process_killed", "container_restarted"]


def test_an_uninterruptible_process_survives_sigkill():
    world, _ = world_of("zombie-process")
    assert exec_(world, "vllm-server-1", ["pkill", "-KILL", "-f", "vllm.entrypoints"]).exit_code == 0
    assert re.search(r"^ +1 +0 Dsl ", exec_(world, "vllm-server-1", PS).stdout, re.M)
    assert pod(world, "vllm-server-1").restarts == 0
    assert [(m["op"], m["signal"], m["effect"]) for m in world.mutations] == [("process_signalled", "KILL", "none")]


# ---------------------------------------------------------------------------- commands on nodes

def test_node_gpu_queries():
    world, _ = world_of("lingering-cuda-context")
    rows = world.nodes.run("gpu-node-2", QUERY_GPU, timeout=10).stdout.splitlines()
    assert re.fullmatch(r"0, GPU-[0-9a-f-]{36}, 78850, 81559, 86", rows[0])
    assert re.fullmatch(r"1, GPU-[0-9a-f-]{36}, 79872, 81559, 0", rows[1])
    apps = world.nodes.run("gpu-node-2", COMPUTE_APPS, timeout=10).stdout
    assert re.fullmatch(r"GPU-[0-9a-f-]{36}, 3121, 78850, python3\n", apps)  # nothing listed on GPU 1
    assert world.nodes.run("gpu-node-3", COMPUTE_APPS, timeout=10).stdout.count("\n") == 1


def test_fuser_shows_every_holder_in_the_real_layout():
    world, _ = world_of("lingering-cuda-context")
    out = world.nodes.run("gpu-node-2", FUSER, timeout=10)
    assert out.exit_code == 0
    assert out.stdout.splitlines() == [
        "                     USER        PID ACCESS COMMAND",
        "/dev/nvidia0:        root       3121 F...m python3",
        "/dev/nvidia1:        root      48213 F...m python3",
        "/dev/nvidiactl:      root       3121 F...m python3",
        "                     root      48213 F...m python3",
        "/dev/nvidia-uvm:     root       3121 F.... python3",
        "                     root      48213 F.... python3",
    ]


def test_cgroups_map_host_pids_to_containers():
    world, _ = world_of("lingering-cuda-context")
    serving = pod(world, "vllm-server-0")
    line = world.nodes.run("gpu-node-2", ["cat", "/proc/3121/cgroup"], timeout=10).stdout
    uid = serving.uid.replace("-", "_")
    cid = serving.containers[0].container_id.removeprefix("containerd://")
    assert line == (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice/"
                    f"cri-containerd-{cid}.scope\n")
    orphan = world.nodes.run("gpu-node-2", ["cat", "/proc/48213/cgroup"], timeout=10).stdout
    live = {p.containers[0].container_id.removeprefix("containerd://") for p in world.cluster.list_pods("llm", VLLM)}
    assert re.search(r"cri-containerd-([0-9a-f]{64})\.scope", orphan).group(1) not in live
    gone = world.nodes.run("gpu-node-2", ["cat", "/proc/777/cgroup"], timeout=10)
    assert (gone.exit_code, gone.stderr) == (1, "cat: /proc/777/cgroup: No such file or directory\n")


def test_node_ps_shows_the_orphan_reparented_to_init():
    world, _ = world_of("lingering-cuda-context")
    out = world.nodes.run("gpu-node-2", PS, timeout=10).stdout
    assert re.search(r"^  48213       1 Sl +\d+ python3 -m vllm\.entrypoints\.openai\.api_server ", out, re.M)
    shim = re.search(r"^ +3121 +(\d+) Ssl ", out, re.M).group(1)
    assert re.search(rf"^ +{shim} +1 Sl +\d+ /usr/bin/containerd-shim-runc-v2 ", out, re.M)


def test_killing_the_orphan_frees_its_memory_five_seconds_later():
    world, clock = world_of("lingering-cuda-context")
    run = world.nodes.run
    assert run("gpu-node-2", ["kill", "-TERM", "48213"], timeout=5).exit_code == 0  # ignored
    assert "48213" in run("gpu-node-2", PS, timeout=5).stdout
    reset = run("gpu-node-2", ["nvidia-smi", "--gpu-reset", "-i", "1"], timeout=5)
    assert reset.exit_code == 255 and "In use by another client" in reset.stdout
    assert run("gpu-node-2", ["kill", "-KILL", "48213"], timeout=5).exit_code == 0
    assert "48213" not in run("gpu-node-2", FUSER, timeout=5).stdout
    assert run("gpu-node-2", ["cat", "/proc/48213/cgroup"], timeout=5).exit_code == 1
    clock.advance(4)
    assert ", 79872, 81559, 0" in run("gpu-node-2", QUERY_GPU, timeout=5).stdout
    assert world.metrics.query("gpu_memory_used_ratio", at=clock.now(), labels={"gpu": "1", "node": "gpu-node-2"})[
        0].value == 0.979
    clock.advance(1)
    assert ", 0, 81559, 0" in run("gpu-node-2", QUERY_GPU, timeout=5).stdout
    assert world.metrics.query("gpu_memory_used_ratio", at=clock.now(), labels={"gpu": "1", "node": "gpu-node-2"})[
        0].value == 0.0
    again = run("gpu-node-2", ["kill", "-KILL", "48213"], timeout=5)
    assert (again.exit_code, again.stderr) == (1, "bash: line 1: kill: (48213) - No such process\n")
    assert pod(world, "vllm-server-0").ready  # the serving pod was spared
    ok = run("gpu-node-2", ["nvidia-smi", "--gpu-reset", "-i", "1"], timeout=5)
    assert ok.exit_code == 0 and "was successfully reset" in ok.stdout
    assert run("gpu-node-2", ["nvidia-smi", "--gpu-reset", "-i", "7"], timeout=5).exit_code == 6
    ops = [m["op"] for m in world.mutations]
    assert ops == ["process_signalled", "process_killed", "reaction", "gpu_reset", "reaction"]


def test_memory_held_after_exit_needs_a_gpu_reset():
    scenario = small(nodes=[{"name": "gpu-node-0", "gpus": [{"index": 0, "memory_total_mib": 23028}],
                             "processes": [{"pid": 900, "args": "python3 train.py", "gpu_index": 0,
                                            "gpu_memory_mib": 5000, "frees_memory_on_kill": False}]}])
    clock = FakeClock(scenario.start)
    world = build_world(scenario, clock)
    run = world.nodes.run
    assert run("gpu-node-0", ["kill", "-9", "900"], timeout=5).exit_code == 0
    clock.advance(600)
    assert ", 25000, 23028," in run("gpu-node-0", QUERY_GPU, timeout=5).stdout  # 20000 + 5000 leaked
    assert run("gpu-node-0", ["nvidia-smi", "--gpu-reset", "-i", "0"], timeout=5).exit_code == 255  # the pod
    world.cluster.scale("llm", "statefulset", "vllm-server", 0)
    assert run("gpu-node-0", ["nvidia-smi", "--gpu-reset", "-i", "0"], timeout=5).exit_code == 0
    assert ", 0, 23028," in run("gpu-node-0", QUERY_GPU, timeout=5).stdout


def test_unknown_nodes_and_commands():
    world, _ = world_of("lingering-cuda-context")
    with pytest.raises(NotFound):
        world.nodes.run("gpu-node-9", PS, timeout=5)
    result = world.nodes.run("gpu-node-2", ["dcgmi", "discovery", "-l"], timeout=5)
    assert result.exit_code == 127 and result.stderr == "sh: 1: dcgmi: not found\n"
    bad = world.nodes.run("gpu-node-2", ["kill", "-BOGUS", "48213"], timeout=5)
    assert bad.exit_code == 1 and "invalid signal specification" in bad.stderr


def test_scenario_commands_answer_first_and_can_hang():
    scenario = small(commands=[
        {"node": "gpu-node-0", "argv": ["dmesg", "-T"], "stdout": "NVRM: Xid 79\n"},
        {"pod": "vllm-server-0", "argv": ["curl", "-s", "localhost:8000/metrics"], "hang": True}])
    clock = FakeClock(scenario.start)
    world = build_world(scenario, clock)
    assert world.nodes.run("gpu-node-0", ["dmesg", "-T"], timeout=5).stdout == "NVRM: Xid 79\n"
    with pytest.raises(BackendUnavailable, match="timed out after 7s"):
        world.cluster.exec("llm", "vllm-server-0", "vllm", ["curl", "-s", "localhost:8000/metrics"], timeout=7)
    assert clock.now() == scenario.start + dt.timedelta(seconds=7)


# ---------------------------------------------------------------------------- http

def test_health_answers_per_pod_health():
    world, clock = world_of("zombie-process")
    ok = pod(world, "vllm-server-0")
    response = world.http.get(f"http://{ok.ip}:8000/health", timeout=5)
    assert response.status == 200 and response.elapsed_seconds < 1
    assert world.http.get(f"http://{ok.ip}:8000/nope", timeout=5).status == 404
    stuck = pod(world, "vllm-server-1")
    start = clock.now()
    with pytest.raises(BackendUnavailable, match="timed out after 5s"):
        world.http.get(f"http://{stuck.ip}:8000/health", timeout=5)
    assert clock.now() - start == dt.timedelta(seconds=5)
    with pytest.raises(BackendUnavailable):
        world.http.get("http://10.99.99.99:8000/health", timeout=5)
    with pytest.raises(BackendUnavailable, match="refused"):
        world.http.get(f"http://{ok.ip}:9999/health", timeout=5)


def test_health_error_is_a_503():
    scenario = small(pods=[{"name": "vllm-server-0", "health": "error"}])
    world = build_world(scenario, FakeClock(scenario.start))
    assert world.http.get(f"http://{pod(world, 'vllm-server-0').ip}:8000/health", timeout=5).status == 503


def test_a_deployment_names_its_pods_and_replaces_deleted_ones_under_new_names():
    scenario = small(workloads=[{"kind": "deployment", "name": "router", "namespace": "llm", "replicas": 2,
                                 "selector": {"app": "router"}, "containers": [{"name": "router"}],
                                 "restart_seconds": 10}], signals=[])
    world = build_world(scenario, FakeClock(scenario.start))
    pods = world.cluster.list_pods("llm", {"app": "router"})
    assert len(pods) == 2 and all(re.fullmatch(r"router-[a-z0-9]{10}-[a-z0-9]{5}", p.name) for p in pods)
    world.cluster.delete_pod("llm", pods[0].name, uid=pods[0].uid)
    names = {p.name for p in world.cluster.list_pods("llm", {"app": "router"})}
    assert pods[0].name not in names and pods[1].name in names and len(names) == 2


# ---------------------------------------------------------------------------- the parsers read it all

def _parsers():
    nvidia_smi = pytest.importorskip("runbook.parsers.nvidia_smi")
    procs = pytest.importorskip("runbook.parsers.procs")
    sockets = pytest.importorskip("runbook.parsers.sockets")
    return nvidia_smi, procs, sockets


def test_pod_outputs_parse():
    nvidia_smi, procs, sockets = _parsers()
    world, _ = world_of("zombie-process")
    [report] = nvidia_smi.parse_memory_report(exec_(world, "vllm-server-0", MEMORY).stdout)
    assert (report.bus_id, report.fb_total_mib, report.fb_reserved_mib, report.fb_used_mib, report.fb_free_mib) == (
        "00000000:00:1E.0", 23028, 99, 19716, 23028 - 99 - 19716)
    assert report.bar1_total_mib == 32768
    table = procs.parse_ps(exec_(world, "vllm-server-1", PS).stdout)
    by_pid = {p.pid: p for p in table}
    assert by_pid[1].uninterruptible and "vllm.entrypoints" in by_pid[1].args and by_pid[1].ppid == 0
    assert by_pid[87].zombie and by_pid[87].defunct and by_pid[87].elapsed_seconds == 4 * 86400
    assert sockets.is_listening(sockets.parse_proc_net_tcp(exec_(world, "vllm-server-0", ["cat", "/proc/net/tcp"]).stdout), 8000)
    stuck = sockets.parse_proc_net_tcp(exec_(world, "vllm-server-1", ["cat", "/proc/net/tcp"]).stdout)
    assert stuck and not sockets.is_listening(stuck, 8000) and {s.state for s in stuck} == {"CLOSE_WAIT"}
    assert sockets.parse_proc_net_tcp(exec_(world, "vllm-server-1", ["cat", "/proc/net/tcp6"]).stdout) == []
    [listener] = sockets.parse_ss_listening(exec_(world, "vllm-server-0", ["ss", "-tln"]).stdout)
    assert (listener.local_address, listener.local_port, listener.state) == ("0.0.0.0", 8000, "LISTEN")
    assert sockets.parse_ss_listening(exec_(world, "vllm-server-1", ["ss", "-tln"]).stdout) == []


def test_node_outputs_parse():
    nvidia_smi, procs, _ = _parsers()
    world, _ = world_of("lingering-cuda-context")
    run = world.nodes.run
    gpus = nvidia_smi.parse_query_gpu(run("gpu-node-2", QUERY_GPU, timeout=5).stdout)
    assert [(g.index, g.memory_used_mib, g.memory_total_mib, g.utilization_pct) for g in gpus] == [
        (0, 78850, 81559, 86), (1, 79872, 81559, 0)]
    [app] = nvidia_smi.parse_compute_apps(run("gpu-node-2", COMPUTE_APPS, timeout=5).stdout)
    assert (app.gpu_uuid, app.pid, app.used_memory_mib, app.process_name) == (gpus[0].uuid, 3121, 78850, "python3")
    assert len(nvidia_smi.parse_memory_report(run("gpu-node-2", MEMORY, timeout=5).stdout)) == 2
    entries = procs.parse_fuser(run("gpu-node-2", FUSER, timeout=5).stdout)
    assert procs.fuser_pids(entries) == {3121, 48213}
    assert {(e.path, e.pid) for e in entries if e.pid == 48213} == {
        ("/dev/nvidia1", 48213), ("/dev/nvidiactl", 48213), ("/dev/nvidia-uvm", 48213)}
    assert all(e.user == "root" and e.command == "python3" for e in entries)
    serving = pod(world, "vllm-server-0")
    assert procs.parse_cgroup(run("gpu-node-2", ["cat", "/proc/3121/cgroup"], timeout=5).stdout) == \
        procs.normalize_container_id(serving.containers[0].container_id)
    live = {procs.normalize_container_id(p.containers[0].container_id) for p in world.cluster.list_pods("llm", VLLM)}
    orphan = procs.parse_cgroup(run("gpu-node-2", ["cat", "/proc/48213/cgroup"], timeout=5).stdout)
    assert orphan is not None and orphan not in live
    table = {p.pid: p for p in procs.parse_ps(run("gpu-node-2", PS, timeout=5).stdout)}
    assert table[48213].ppid == 1 and table[48213].elapsed_seconds == 51 * 3600
    world.nodes.run("gpu-node-2", ["kill", "-KILL", "48213"], timeout=5)
    assert procs.fuser_pids(procs.parse_fuser(run("gpu-node-2", FUSER, timeout=5).stdout)) == {3121}


@pytest.mark.parametrize("name", ["oom-surge", "waiting-queue", "zombie-process", "lingering-cuda-context",
                                  "waiting-queue-all-unready", "oom-surge-metrics-down"])
def test_every_native_output_of_every_scenario_parses(name):
    nvidia_smi, procs, sockets = _parsers()
    world, _ = world_of(name)
    for p in world.cluster.list_pods("llm", VLLM):
        nvidia_smi.parse_memory_report(exec_(world, p.name, MEMORY).stdout)
        for row in procs.parse_ps(exec_(world, p.name, PS).stdout):
            assert procs.parse_cgroup(exec_(world, p.name, ["cat", f"/proc/{row.pid}/cgroup"]).stdout) is None \
                or row.args.startswith("ps ")
        sockets.parse_proc_net_tcp(exec_(world, p.name, ["cat", "/proc/net/tcp"]).stdout)
        sockets.parse_proc_net_tcp(exec_(world, p.name, ["cat", "/proc/net/tcp6"]).stdout)
        sockets.parse_ss_listening(exec_(world, p.name, ["ss", "-tln"]).stdout)
    for node in world.scenario.nodes:
        if not node.gpus:
            continue
        nvidia_smi.parse_query_gpu(world.nodes.run(node.name, QUERY_GPU, timeout=5).stdout)
        nvidia_smi.parse_compute_apps(world.nodes.run(node.name, COMPUTE_APPS, timeout=5).stdout)
        nvidia_smi.parse_memory_report(world.nodes.run(node.name, MEMORY, timeout=5).stdout)
        procs.parse_fuser(world.nodes.run(node.name, FUSER, timeout=5).stdout)
        for row in procs.parse_ps(world.nodes.run(node.name, PS, timeout=5).stdout):
            result = world.nodes.run(node.name, ["cat", f"/proc/{row.pid}/cgroup"], timeout=5)
            if result.exit_code == 0:
                procs.parse_cgroup(result.stdout)
