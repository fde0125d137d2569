"""OOM evidence from the logs on stock vLLM (issue 16, item 7): `k8s.logs` over the current and the
previous containers, counted per pod and minute, on the oom-surge world (vllm-server-2 restarted
3 minutes ago: its earlier OOM lines are in the previous container's log only)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from runbook.record import journal as journals
from runbook.actions import load_builtin
from runbook.cli import main
from runbook.clock import FakeClock
from runbook.engine.operator import AssumeYes
from runbook.engine.runner import Engine
from runbook.loading import validation
from runbook.record.locks import MemoryLocks
from runbook.model import events as ev
from runbook.sim.scenario import load_scenario
from runbook.sim.world import build_world
from tests.realstack.timeline import alert_of

# The step the oom-surge playbook can carry (its owner adds it): OOM lines of the current and previous containers.
BOOK = """\
name: oom-evidence
title: OOM lines in the vLLM logs
match: {alerts: [VllmOomSurge]}
params: {namespace: llm, workload: statefulset/vllm-server, container: vllm}
steps:
  - id: oom-in-logs
    name: CUDA out-of-memory lines per pod and minute, the crashed containers' included
    uses: k8s.logs
    with:
      workload: "{{ params.workload }}"
      container: "{{ params.container }}"
      since: 10m
      read: both
      patterns: ["CUDA out of memory", "torch\\\\.(cuda\\\\.)?OutOfMemoryError"]
      above: 0
"""


def _run(text: str, state: Path):
    registry = load_builtin()
    loaded = validation.load_playbook_text(text, file="oom-evidence.yaml", registry=registry)
    assert loaded.ok, [p.format() for p in loaded.problems]
    scenario = load_scenario("oom-surge")
    clock = FakeClock(scenario.t0)
    world = build_world(scenario, clock)
    journal = journals.JsonlJournal.for_incident(state, journals.new_incident_id(scenario.t0, "oom-evidence", drill=True),
                                                 journals.new_run_id())
    engine = Engine(registry=registry, world=world.world_backends(), clock=clock, journal=journal,
                    operator=AssumeYes("test"), locks=MemoryLocks(), history=journals.History(None, extra=journal),
                    holder="test")
    try:
        result = engine.run(loaded.playbook, alert=alert_of(scenario), params={})
    finally:
        journal.close()
    return result, journals.read_journal(journal.path).events


def test_oom_lines_are_counted_in_current_and_previous_containers(tmp_path):
    result, events = _run(BOOK, tmp_path)
    assert result.outcome == "resolved"
    found = next(e for e in events if e.type == ev.EVIDENCE and e.step == "oom-in-logs").data
    # Every 20 s from -7m to the alert: 22 lines per pod; vllm-server-2's first 13 were written by its
    # previous container (until it ended, 3 minutes ago), the other 9 by the current one.
    assert found["by_pod"] == {"vllm-server-0": 22, "vllm-server-1": 22, "vllm-server-2": 22}
    assert found["no_previous"] == ["vllm-server-0", "vllm-server-1"]
    assert found["above"] is True and found["firing"] == ["vllm-server-0", "vllm-server-1", "vllm-server-2"]
    assert found["peak_per_min"] == 3
    assert all(len(line) <= 300 + 30 for line in found["excerpt"])


def test_a_backtracking_pattern_is_refused_at_validation_saying_where(tmp_path):
    book = tmp_path / "bad.yaml"
    book.write_text(BOOK.replace('"CUDA out of memory"', '"(a+)+b"'))
    result = CliRunner().invoke(main, ["validate", str(book)], catch_exceptions=False)
    assert result.exit_code == 3
    assert "steps[0].with.patterns" in result.output and "repeats a group that itself repeats" in result.output
    assert "Traceback" not in result.output


def test_the_step_reads_as_json_without_python_reprs(tmp_path):
    _, events = _run(BOOK, tmp_path)
    finished = next(e for e in events if e.type == ev.STEP_FINISHED and e.step == "oom-in-logs")
    assert "66 lines matching" in finished.data["summary"] and "above 0/min in vllm-server-0" in finished.data["summary"]
    json.dumps(finished.data)


def test_the_simulated_cluster_reads_both_logs_as_the_api_backend_does():
    # Parity with tests/standin/test_i16_7_pod_logs.py: every previous log first, then the running ones.
    scenario = load_scenario("oom-surge")

    def cluster():
        return build_world(scenario, FakeClock(scenario.t0)).world_backends().cluster

    both = cluster().logs("llm", {"app": "vllm-server"}, since_seconds=600, container="vllm", with_previous=True)
    alone = cluster()
    previous = alone.logs("llm", {"app": "vllm-server"}, since_seconds=600, container="vllm", previous=True)
    current = alone.logs("llm", {"app": "vllm-server"}, since_seconds=600, container="vllm")
    assert [(log.pod, log.previous) for log in both] == [(log.pod, log.previous) for log in [*previous, *current]]
    assert [log.pod for log in both if log.absent] == ["vllm-server-0", "vllm-server-1"]
    assert [log.text for log in both] == [log.text for log in [*previous, *current]]
