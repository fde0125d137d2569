"""Issue 31, item 1, on the simulated world: a signal with no source here (a stock vLLM exports no OOM
counter) read by triage from the playbook workload's pods' logs — firing on the oom-surge world's
CUDA OOM lines, quiet where there are none, never quiet where a log was cut or a pod not read.
The same against the real control plane and a real Prometheus: tests/controlplane/test_triage_logs.py.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from runbook.actions import load_builtin
from runbook.clock import FakeClock
from runbook.drill.run import bundled_playbook
from runbook.signals.catalog import build_catalog
from runbook.sim.scenario import load_scenario
from runbook.sim.world import build_world
from runbook.triage.evaluate import Finding, Report
from runbook.triage.from_logs import describe, read_from_logs
from runbook.triage.verdict import headline

NO_SOURCE = ("oom_failures_per_min has no source here: no series of vllm_log_errors_total (from a log pipeline, "
             "e.g. promtail, Vector or a Loki rule) with namespace=llm")


def _no_source(labels=None) -> Finding:
    return Finding("oom-surge", "OOM surge on vLLM pods", "P1", "no_source", signal="oom_failures_per_min",
                   condition="> 0", labels=labels or {"namespace": "llm"}, for_seconds=10.0,
                   missing_sources={"vllm_log_errors_total": "a log pipeline"}, reason=NO_SOURCE)


def _world(*, quiet: bool = False, oom_killed_at: float | None = None):
    scenario = load_scenario("oom-surge")
    if quiet:  # the same pods, logging their health checks only
        workload = scenario.workloads[0]
        logs = [entry for entry in workload.logs if "OutOfMemoryError" not in entry.text]
        scenario = scenario.model_copy(update={"workloads": [workload.model_copy(update={"logs": logs})]})
    if oom_killed_at is not None:
        pods = list(scenario.pods)
        pods[2] = pods[2].model_copy(update={"last_termination": pods[2].last_termination.model_copy(
            update={"reason": "OOMKilled", "at": oom_killed_at, "exit_code": 137})})
        scenario = scenario.model_copy(update={"pods": pods})
    clock = FakeClock(scenario.t0)
    return build_world(scenario, clock), clock


def _read(world, clock, finding=None, *, catalog=None, params=None, workload=None, at=None) -> Finding:
    playbook = bundled_playbook("oom-surge", load_builtin())
    now = clock.now().replace(microsecond=0)
    report = Report(at or now, (finding or _no_source(),))
    read = read_from_logs(report, [playbook], catalog or build_catalog(), world.world_backends().cluster,
                          now=now, params=params or {}, workload=workload)
    return read.findings[0]


def test_the_oom_lines_in_the_pods_logs_fire_oom_surge():
    world, clock = _world()
    found = _read(world, clock)
    assert found.state == "firing"
    assert found.read_from == "from logs, 3 pods, last 5m"
    # Each pod logs one CUDA OOM line every 20 s: 3 a minute, 9 across the three.
    assert found.value == pytest.approx(9.0)
    assert found.since_is_lower_bound and found.held_seconds >= 240
    assert found.logs["restarted"] == ["vllm-server-2"]  # its previous container's last words were read too
    assert found.logs["oom_killed_restarts"] == 0
    assert describe(found).startswith("from logs, 3 pods, last 5m: ")
    assert "CUDA out-of-memory error lines, previous logs of vllm-server-2" in describe(found)
    assert headline(Report(found.since, (found,))).startswith("Firing: oom-surge (P1)")


def test_no_oom_line_reads_quiet_and_the_verdict_says_it_came_from_logs():
    world, clock = _world(quiet=True)
    found = _read(world, clock)
    assert (found.state, found.value, found.reason) == ("quiet", 0.0, "")
    assert found.to_json()["read_from"] == "from logs, 3 pods, last 5m"
    assert found.to_json()["logs"]["events"] == 0
    assert headline(Report(clock.now(), (found,))) == "All clear: nothing fires (1 playbook evaluated, 1 from the pods' logs)"


def test_a_restart_after_an_oomkilled_termination_counts_one():
    world, clock = _world(quiet=True, oom_killed_at=-30)
    found = _read(world, clock)
    assert found.state == "firing" and found.value == pytest.approx(1.0)
    assert found.held_seconds == pytest.approx(30, abs=15)
    assert found.logs["oom_killed_restarts"] == 1 and "1 OOMKilled restart" in describe(found)


def test_an_oomkilled_restart_before_the_window_does_not_count():
    world, clock = _world(quiet=True, oom_killed_at=-600)
    assert _read(world, clock).state == "quiet"


def _capped(catalog):
    signal = catalog.get("oom_failures_per_min")
    small = signal.logs.model_copy(update={"max_bytes": 65_536})
    return dataclasses.replace(catalog, signals={**catalog.signals, signal.name: dataclasses.replace(signal, logs=small)})


def _chatty(world, pod: str = "vllm-server-1") -> None:
    """`pod` logs a 400-byte request line every second: 5 minutes of it pass a 64 KiB cap."""
    from runbook.sim.scenario import LogEntry

    chatter = LogEntry.model_validate({"every": "1s", "from": -300, "text": "INFO request " + "x" * 400})
    world.state.pods[("llm", pod)].logs.append(chatter)


def test_a_log_cut_at_its_cap_is_never_quiet():
    world, clock = _world(quiet=True)
    _chatty(world)
    found = _read(world, clock, catalog=_capped(build_catalog()))
    assert found.state == "unknown"
    assert found.logs["capped"] == ["vllm-server-1"]
    assert "vllm-server-1 were cut at 65536 bytes" in found.reason and "lower bound" in found.reason
    assert headline(Report(clock.now(), (found,))).startswith("Not all clear: 1 playbook could not be seen "
                                                              "(no source here, and the pods' logs")


def test_a_cut_log_still_fires_on_what_it_holds():
    world, clock = _world()
    _chatty(world)
    found = _read(world, clock, catalog=_capped(build_catalog()))
    assert found.state == "firing" and found.logs["capped"] == ["vllm-server-1"]


def test_a_workload_that_is_not_there_leaves_the_signal_without_a_source_saying_why():
    world, clock = _world()
    found = _read(world, clock, workload="deployment/vllm")
    assert found.state == "no_source"
    assert found.reason.startswith(NO_SOURCE + "; its pods' logs were not read: ")
    assert "--workload KIND/NAME" in found.reason


def test_more_pods_than_the_bound_are_not_read_and_never_quiet():
    world, clock = _world(quiet=True)
    catalog = build_catalog()
    signal = catalog.get("oom_failures_per_min")
    two = dataclasses.replace(signal, logs=signal.logs.model_copy(update={"max_pods": 2}))
    found = _read(world, clock, catalog=dataclasses.replace(catalog, signals={**catalog.signals, signal.name: two}))
    assert found.state == "unknown" and "has 3 pods, more than the 2 triage reads" in found.reason


def test_a_moment_long_past_is_not_read_from_logs():
    world, clock = _world()
    found = _read(world, clock, at=clock.now().replace(microsecond=0) - dt.timedelta(hours=2))
    assert found.state == "no_source" and "logs are read only within 1h before now" in found.reason


def test_a_detect_naming_one_pod_reads_that_pods_log_only():
    world, clock = _world()
    found = _read(world, clock, _no_source({"namespace": "llm", "pod": "vllm-server-0"}))
    assert found.state == "firing" and found.read_from == "from logs, 1 pod, last 5m"
    assert found.value == pytest.approx(3.0)


def test_the_config_file_can_bound_or_retarget_the_log_reading():
    from runbook.config import Config

    config = Config(None, {"signals": {"overrides": {"oom_failures_per_min": {
        "logs": {"patterns": ["OutOfMemoryError"], "max_pods": 64, "window": "10m"}}}}})
    logs = build_catalog(config).get("oom_failures_per_min").logs
    assert (logs.patterns, logs.max_pods, logs.window, logs.rate_window) == (["OutOfMemoryError"], 64, 600.0, 60.0)
    assert build_catalog(config).get("oom_failures_per_min").sources == build_catalog().get("oom_failures_per_min").sources


@pytest.mark.parametrize(("logs", "says"), [
    ({"patterns": ["(a+)+"]}, "repeats a group that itself repeats"),
    ({"patterns": []}, "at least 1 item"),
    ({"patterns": ["OOM"], "window": "2m", "rate_window": "5m"}, "rate_window (300s) must fit in window (120s)"),
    ({"patterns": ["OOM"], "max_pods": 0}, "logs.max_pods  [RB111 bad-value]\n    expected a number ≥ 1, found 0"),
])
def test_a_bad_log_reading_is_refused_where_it_is_written(logs, says):
    from runbook.config import Config
    from runbook.errors import InvalidInput

    config = Config(None, {"signals": {"overrides": {"oom_failures_per_min": {"logs": logs}}}})
    with pytest.raises(InvalidInput) as refused:
        build_catalog(config)
    assert "oom_failures_per_min" in str(refused.value) and says in str(refused.value)
