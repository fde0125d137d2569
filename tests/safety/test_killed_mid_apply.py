"""A run killed between a change and its record: the next run's cooldown and budget still count it.

A CLI run has no restart to recover it (`runbook serve` journals such a change as `action.unknown`):
the change was journaled as confirmed before the apply, and a confirmation that nothing in its run
settled counts as applied, at its time, in every later guard check.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from runbook.clock import FakeClock
from runbook.record.journal import History, read_journal
from runbook.model import events as ev
from tests.conftest import assert_sequence
from tests.engine.helpers import engine, playbook
from tests.safety.books import SCALE

REPO = Path(__file__).resolve().parents[2]
AT = dt.datetime(2026, 3, 14, 3, 12, 7, tzinfo=dt.timezone.utc)
TARGET = "llm/statefulset/vllm-server"
GUARD = "{confirm: false, cooldown: 30m, floor: 1}"

# The first run: its cluster makes the change and then the process is killed, before the engine
# can journal the result (what a SIGKILL, an OOM kill or a lost node does to `runbook run`).
KILLED_RUN = textwrap.dedent(f"""
    import datetime as dt, os, signal, sys
    from pathlib import Path
    from runbook.clock import FakeClock
    from tests.engine.helpers import cluster, engine, playbook
    from tests.safety.books import SCALE

    class KilledAfterTheChange:
        def __init__(self, inner):
            self.inner = inner
        def __getattr__(self, name):
            return getattr(self.inner, name)
        def scale(self, *args, dry_run=False, **kwargs):
            done = self.inner.scale(*args, dry_run=dry_run, **kwargs)
            if not dry_run:
                os.kill(os.getpid(), signal.SIGKILL)
            return done

    clock = FakeClock(dt.datetime(2026, 3, 14, 3, 12, 7, tzinfo=dt.timezone.utc))
    e = engine(clock, cluster_=KilledAfterTheChange(cluster()), state=Path(sys.argv[1]), incident="inc-killed")
    e.run(playbook(SCALE, {GUARD!r}))
    raise SystemExit("the run was not killed")
""")


def killed_run(state: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", KILLED_RUN, str(state)], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_a_change_whose_run_was_killed_before_its_record_counts_in_the_next_cooldown(tmp_path):
    state = tmp_path / "state"
    done = killed_run(state)
    assert done.returncode == -signal.SIGKILL, done.stderr
    killed = read_journal(state / "incidents" / "inc-killed" / "journal.jsonl").events
    assert_sequence(killed, [ev.RUN_STARTED, ev.ACTION_PLANNED, ev.GUARD_PASSED, ev.ACTION_CONFIRMED],
                    forbidden=(ev.ACTION_APPLIED, ev.ACTION_UNKNOWN, ev.STEP_FINISHED, ev.RUN_FINISHED))
    confirmed = next(e for e in killed if e.type == ev.ACTION_CONFIRMED)
    assert confirmed.data == {"by": "policy (confirm: false)", "how": "not asked", "target": TARGET,
                              "action": "k8s.scale"}
    assert History(state).applications(TARGET, since=AT - dt.timedelta(hours=1)) == [confirmed.at]

    # Ten minutes later another run on the same target: the cooldown counts the change in doubt.
    later = engine(FakeClock(AT + dt.timedelta(minutes=10)), state=state, incident="inc-next")
    result = later.run(playbook(SCALE, GUARD))
    events = later.journal.events()
    assert_sequence(events, [ev.ACTION_PLANNED, ev.GUARD_REFUSED, ev.STEP_FINISHED, ev.RUN_FINISHED],
                    forbidden=(ev.ACTION_CONFIRMED, ev.ACTION_APPLIED))
    refused = next(e for e in events if e.type == ev.GUARD_REFUSED)
    assert refused.data["guard"] == "cooldown"
    # It says the change is one in doubt, and whose: the target may show nothing of it.
    assert refused.data["reason"] == (
        f"{TARGET} may have been changed by this action 10m ago (incident inc-killed: its run stopped after the "
        "yes, before the apply's result was written; counted as applied); cooldown 30m, 20m left")
    assert result.outcome != "resolved"


def test_once_the_cooldown_is_over_the_change_in_doubt_no_longer_stops_the_next_run(tmp_path):
    state = tmp_path / "state"
    assert killed_run(state).returncode == -signal.SIGKILL
    later = engine(FakeClock(AT + dt.timedelta(minutes=31)), state=state, incident="inc-next")
    later.run(playbook(SCALE, GUARD))
    events = later.journal.events()
    assert_sequence(events, [ev.GUARD_PASSED, ev.ACTION_CONFIRMED, ev.ACTION_APPLIED, ev.RUN_FINISHED],
                    forbidden=(ev.GUARD_REFUSED,))
    # Both count in the hour's budget: the one in doubt and the one applied now.
    assert len(History(state).applications(TARGET, since=AT - dt.timedelta(minutes=1))) == 2


def test_a_run_that_ends_normally_leaves_nothing_in_doubt(tmp_path):
    state = tmp_path / "state"
    first = engine(FakeClock(AT), state=state, incident="inc-1")
    first.run(playbook(SCALE, GUARD))
    applied = [e.at for e in first.journal.events() if e.type == ev.ACTION_APPLIED]
    assert len(applied) == 1
    # Its confirmation is settled by the result: counted once, as applied.
    assert History(state).applications(TARGET, since=AT - dt.timedelta(hours=1)) == applied


def test_the_report_of_the_killed_run_says_the_change_is_in_doubt(tmp_path):
    from runbook.reporting.rca import render_markdown

    state = tmp_path / "state"
    assert killed_run(state).returncode == -signal.SIGKILL
    report = render_markdown(read_journal(state / "incidents" / "inc-killed" / "journal.jsonl").events)
    row = next(line for line in report.splitlines() if line.startswith("| scale-down |"))
    assert "in doubt: the run stopped after the yes, before its result (counted as applied)" in row, row
    assert "policy (confirm: false)" in row
