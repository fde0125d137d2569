"""`runbook run oom-surge --yes` as a process, on the real stack and on wall time.

Prometheus holds the drill's course of the incident placed on the wall clock: OOM failures go on
for the first seconds of the run (diagnostics, scale, kill and the lowered --max-model-len all see
them) and stop a little later, as they stopped in the drill after the fix; the observation window
is shortened with a param (`-p observe=10s`), the playbook is the bundled one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from runbook import journal as journals
from runbook.clock import SystemClock
from tests.realstack import wall

# Seconds from writing the data to the OOM failures stopping: the run's remediations (a few seconds
# after the server is up) come before it, its verification after.
FIX_LANDS_AFTER = 20.0
OBSERVE = "10s"


@pytest.fixture(scope="module")
def wall_prometheus(played, tmp_path_factory):
    """The oom-surge drill's timeline shifted so that its fix lands FIX_LANDS_AFTER seconds from now."""
    server, start = wall.prometheus_on_wall_time(played["oom-surge"], "oom_failures_per_min",
                                                 tmp_path_factory.mktemp("realstack-wall-prometheus"),
                                                 fix_lands_after=FIX_LANDS_AFTER)
    yield server, start
    server.stop()


def test_runbook_run_oom_surge_yes_on_the_real_stack(played, stack, wall_prometheus, laid_out, tmp_path):
    server, start = wall_prometheus
    drill = played["oom-surge"]
    laid = laid_out(drill, clock=SystemClock(), scenario=drill.scenario.model_copy(update={"start": start}),
                    prometheus_url=server.url)
    state = tmp_path / "state"
    env = {**os.environ, "RUNBOOK_STATE_DIR": str(state), "NO_PROXY": "127.0.0.1,localhost",
           "no_proxy": "127.0.0.1,localhost"}
    env.pop("RUNBOOK_CONFIG", None)
    done = subprocess.run([sys.executable, "-m", "runbook", "run", "oom-surge", "--yes", "-p", f"observe={OBSERVE}",
                           "--config", str(laid.config), "--output", "json"],
                          capture_output=True, text=True, env=env, timeout=240)
    paths = list(journals.journal_paths(state))
    assert len(paths) == 1, done.stderr[-3000:]
    events = journals.read_journal(paths[0]).events
    assert (done.returncode, events[-1].type) == (0, "run.finished"), done.stderr[-3000:]
    assert json.loads(done.stdout)["outcome"] == "resolved"
    applied = [e.step for e in events if e.type == "action.applied"]
    assert applied == ["scale-down", "lower-max-model-len"]  # one restart (issue 16, item 9)
