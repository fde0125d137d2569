"""Issue 15, item 3, against a real Prometheus: `lingering-cuda-context` is detected by node across
the fleet on the idle-held ratio (memory held on a GPU doing no work), never on one host named in
advance; the firing node becomes the param `triage --run` runs it with. A GPU busy with 96% of its
memory in use (vLLM's --gpu-memory-utilization at work) is not a lingering context.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from runbook.cli import main
from runbook.errors import ExitCode
from tests.prometheus.data import SCENARIOS

CUDA = SCENARIOS["lingering-cuda-context"]


def triage_json(url: str, *args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(main, ["triage", "--prometheus-url", url, "--output", "json", *args],
                                catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout)


def test_the_node_holding_memory_idle_is_found_across_the_fleet(prometheus):
    code, doc = triage_json(prometheus.url, "--at", CUDA.at.isoformat())
    assert code == 10
    [finding] = [f for f in doc["firing"] if f["playbook"] == "lingering-cuda-context"]
    assert finding["signal"] == "gpu_memory_idle_held_ratio"
    assert finding["labels"] == {"node": "gpu-node-3"}  # not the drill's gpu-node-2
    assert finding["value"] == pytest.approx(0.979, abs=0.001)


def test_a_busy_gpu_with_full_memory_is_quiet(prometheus):
    # The OOM surge: every GPU at 97% memory and 98% busy; only the condition of memory held idle counts.
    code, doc = triage_json(prometheus.url, "--at", SCENARIOS["oom-surge"].at.isoformat())
    quiet = {q["playbook"]: q for q in doc["quiet"]}
    assert quiet["lingering-cuda-context"]["value"] == pytest.approx(0.00004, abs=1e-5)


def test_triage_run_runs_it_with_the_firing_node(prometheus, monkeypatch):
    ran: dict = {}

    def run_playbook(playbook, world, **kwargs):
        ran.update(playbook=playbook.name, params=dict(kwargs["params"]))
        raise SystemExit(int(ExitCode.OK))

    monkeypatch.setattr("runbook.cli.triage.parse_at", lambda text, now=None: CUDA.at)
    monkeypatch.setattr("runbook.cli.running.run_playbook", run_playbook)
    monkeypatch.setattr("runbook.cli.connect.real_world", lambda *a, **k: None)
    monkeypatch.setattr("runbook.cli.connect.close_world", lambda world: None)
    result = CliRunner().invoke(main, ["triage", "--prometheus-url", prometheus.url, "--run", "--dry-run",
                                       "--playbook", "lingering-cuda-context"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert ran == {"playbook": "lingering-cuda-context", "params": {"node": "gpu-node-3"}}


def test_signals_asks_the_detected_signal_across_the_fleet():
    listing = CliRunner().invoke(main, ["signals", "--output", "json"])
    rows = {r["name"]: r for r in json.loads(listing.stdout)["signals"]}
    assert rows["gpu_memory_idle_held_ratio"]["detected_by"] == ["lingering-cuda-context"]
    assert rows["gpu_memory_idle_held_ratio"]["labels_asked"] == {}
