"""`runbook run oom-surge --yes` as a process on the real control plane and on wall time: it resolves with
the scale-down and the lowered --max-model-len, and the real StatefulSet controller rolls them out.

Prometheus holds the oom-surge drill's course of the incident placed on the wall clock: OOM failures go on
for the first seconds of the run (diagnostics, scale and the lowered --max-model-len all see them) and stop a
little later, as they stopped in the drill after the fix; the observation window is shortened with
`-p observe=10s`, the playbook is the bundled one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from runbook.record import journal as journals
from tests.controlplane import drills, objects

# Seconds from writing the data to the OOM failures stopping: after the run's remediations, before its verification.
FIX_LANDS_AFTER = 20.0
OBSERVE = "10s"


def test_runbook_run_oom_surge_yes_on_the_real_plane(plane, oracle, tmp_path):
    with drills.on_wall_time(plane, oracle, "oom-surge", tmp_path, fix_lands_after=FIX_LANDS_AFTER) as (_, laid, _):
        state = tmp_path / "state"
        env = {**os.environ, "RUNBOOK_STATE_DIR": str(state)}
        env.pop("RUNBOOK_CONFIG", None)
        done = subprocess.run([sys.executable, "-m", "runbook", "run", "oom-surge", "--yes", "-p", f"observe={OBSERVE}",
                               "-p", f"restore_observe={OBSERVE}",
                               "--config", str(laid.config), "--output", "json"],
                              capture_output=True, text=True, env=env, timeout=240)
        settled = objects.settled(plane, "llm", "statefulset", "vllm-server", timeout=120)
    paths = list(journals.journal_paths(state))
    assert len(paths) == 1, done.stderr[-3000:]
    events = journals.read_journal(paths[0]).events
    assert (done.returncode, events[-1].type) == (0, "run.finished"), done.stderr[-3000:]
    assert json.loads(done.stdout)["outcome"] == "resolved"
    applied = [e.step for e in events if e.type == "action.applied"]
    # one restart (issue 16, item 9), then the replicas back (issue 34)
    assert applied == ["scale-down", "lower-max-model-len", "restore-capacity"]
    assert settled["spec"]["replicas"] == 3
    assert "--max-model-len=6635" in settled["spec"]["template"]["spec"]["containers"][0]["args"]
