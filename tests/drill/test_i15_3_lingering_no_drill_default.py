"""Issue 15, item 3: no bundled playbook carries a drill-world name as a default. The GPU node of
`lingering-cuda-context` comes from the alert (its `node` label), `-p node=…`, or the node triage
finds firing; a run without one stops before any step, saying how to give it. Its detect is the
idle-held ratio (memory held on a GPU doing no work), and the drill scenario plays that signal.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from runbook.actions import load_builtin
from runbook.cli import main
from runbook.drill.run import bundled_playbook
from runbook.record.journal import read_journal
from runbook.model import events as ev
from runbook.sim.scenario import load_scenario, scenario_names
from runbook.sim.fakes import FakeMetrics
from tests.engine.helpers import engine


def drill_world_names() -> set[str]:
    """The names only a drill's world has: its GPU nodes."""
    return {node.name for name in scenario_names() for node in load_scenario(name).nodes}


def test_no_bundled_playbook_defaults_to_a_drill_worlds_node():
    playbooks = {name: bundled_playbook(name, load_builtin())
                 for name in ("lingering-cuda-context", "oom-surge", "waiting-queue", "zombie-process")}
    hosts = drill_world_names()
    assert "gpu-node-2" in hosts
    for name, book in playbooks.items():
        defaults = {k: v for k, v in book.params.items() if isinstance(v, str)}
        assert not {k for k, v in defaults.items() if v in hosts}, f"{name} defaults to a drill node: {defaults}"
    lingering = playbooks["lingering-cuda-context"]
    assert lingering.params["node"] is None
    assert lingering.detect.signal == "gpu_memory_idle_held_ratio"
    assert dict(lingering.detect.labels) == {"node": "{{ params.node }}"}


def test_a_run_without_a_node_stops_before_any_step_and_says_how_to_give_one(clock):
    book = bundled_playbook("lingering-cuda-context", load_builtin())
    run = engine(clock, metrics=FakeMetrics({"gpu_memory_idle_held_ratio": 0.98})).run(book)
    assert run.outcome == "failed" and run.steps == ()
    assert run.reason == ("params: node has no value, and playbook lingering-cuda-context gives it no default: "
                          "pass -p node=…, or start it from an alert that carries the label node")


def test_the_drill_runs_on_its_alerts_node_and_rechecks_the_idle_held_ratio():
    result = CliRunner().invoke(main, ["drill", "lingering-cuda-context", "--yes", "--output", "json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    events = read_journal(Path(document["journal"])).events
    started = next(e for e in events if e.type == ev.RUN_STARTED)
    assert started.data["params"]["node"] == "gpu-node-2"
    alert = next(e for e in events if e.type == ev.ALERT_RECEIVED)
    assert alert.data["labels"]["node"] == "gpu-node-2"
    passed = [g for e in events if e.type == ev.GUARD_PASSED for g in e.data["guards"]]
    assert {"guard": "recheck", "reason": "gpu_memory_idle_held_ratio > 0.9 still holds (now 0.979)"} in passed
