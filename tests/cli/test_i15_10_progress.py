"""Issue 15, item 10: a verify step shows its reading, the threshold and a countdown live; the dry-run
plan says which steps depend on earlier changes; a kill shows readiness before → after like a delete."""

from __future__ import annotations

import datetime as dt
import io

from rich.console import Console

from runbook.cli.live import LiveView, progress_line
from runbook.model import events as ev
from runbook.model.events import Event
from runbook.sim.fakes import FakeMetrics
from tests.cli.helpers import runbook
from tests.engine.helpers import engine, playbook

UPDATE = {"condition": "oom_failures_per_min < 1", "seen": "oom_failures_per_min = 4", "value": 4.0,
          "holds": False, "held_for": 0.0, "for": 120.0, "left": 300.0}


def test_item10_verify_reports_each_reading_to_the_view(clock):
    seen: list[tuple[str, dict]] = []
    start = clock.now()
    # Failing for the first 30 s of the run, then quiet: the verify sees both.
    e = engine(clock, metrics=FakeMetrics({"oom_failures_per_min": lambda at: 4.0 if at < start + dt.timedelta(seconds=30)
                                           else 0.0}))
    e.progress = lambda step, update: seen.append((step, update))
    e.run(playbook())
    steps = {step for step, _ in seen}
    assert steps == {"observe"}
    first, last = seen[0][1], seen[-1][1]
    assert {k: first[k] for k in ("condition", "holds", "for")} == {"condition": "oom_failures_per_min < 1",
                                                                     "holds": False, "for": 120.0}
    assert last["holds"] and last["held_for"] == 120.0
    assert [u["left"] for _, u in seen] == sorted((u["left"] for _, u in seen), reverse=True)  # a countdown


def test_item10_the_progress_line_reads_value_threshold_and_time_left():
    assert progress_line("observe", UPDATE) == ("           watching oom_failures_per_min < 1: oom_failures_per_min = 4 "
                                                "· held 0s of 2m · 5m left")
    holding = {**UPDATE, "seen": "oom_failures_per_min = 0", "holds": True, "held_for": 45.0, "left": 200.0}
    assert progress_line("observe", holding) == ("           watching oom_failures_per_min < 1: oom_failures_per_min = 0 "
                                                 "· held 45s of 2m · 3m20s left")


def _event(type: str, step: str, **data) -> Event:
    return Event(at=dt.datetime(2026, 3, 14, 3, 12, 7, tzinfo=dt.timezone.utc), incident="inc-1", run="r", seq=1,
                 type=type, step=step, data=data)


def test_item10_on_a_terminal_the_reading_is_live_and_gone_when_the_step_ends():
    out = io.StringIO()
    view = LiveView(Console(file=out, force_terminal=True, width=160, color_system=None))
    view.progress("observe", UPDATE)
    assert "watching oom_failures_per_min < 1: oom_failures_per_min = 4 · held 0s of 2m · 5m left" in out.getvalue()
    view(_event(ev.STEP_FINISHED, "observe", status="ok", summary="held"))
    assert view.live is None


def test_item10_off_a_terminal_readings_print_nothing():
    out = io.StringIO()
    view = LiveView(Console(file=out, force_terminal=False, width=160))
    view.progress("observe", UPDATE)
    assert out.getvalue() == ""


def test_item10_the_dry_run_says_which_plans_come_after_earlier_changes():
    result = runbook("drill", "oom-surge", "--dry-run")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    note = ("           in a real run this follows scale-down (scale statefulset/vllm-server 3 → 1): "
            "planned on the world before that change")
    assert lines.count(note) == 1
    notes = [line for line in lines if "in a real run this follows" in line]
    # One restart, not two (issue 16, item 9): only the set_arg rollout follows the scale-down; then the
    # restore of the replicas follows both (issue 34).
    assert notes == [note, "           in a real run this follows scale-down (scale statefulset/vllm-server 3 → 1), "
                           "lower-max-model-len (set --max-model-len of statefulset/vllm-server/vllm 7372 → 6635): "
                           "planned on the world before those changes"]


def test_item10_a_kill_shows_readiness_before_and_after():
    # oom-surge kills the server only at the floor of --max-model-len (issue 16, item 9).
    lines = runbook("drill", "oom-surge-at-floor", "--yes").stdout.splitlines()
    plan = lines.index("           plan: send SIGKILL to 1 process(es) matching `vllm\\.entrypoints|vllm serve` "
                       "in vllm-server-0")
    assert "             - ready: 1/1" in lines[plan:plan + 8]
    assert "             + ready: 0/1 until restarted" in lines[plan:plan + 8]
