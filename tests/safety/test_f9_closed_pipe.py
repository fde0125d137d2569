"""Finding 9: a closed output pipe, a hung-up terminal or a signal never stops a run mid-fix.

The console falls silent and the journal goes on to `run.finished`; SIGINT/SIGTERM stop at a safe
point and roll back what the run applied; SIGHUP is ignored (and journaled).
"""

from __future__ import annotations

import errno
import io
import os
import select
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from runbook.cli.live import LiveView
from runbook.cli.output import stderr_console
from runbook.cli.signals import HANGUP_NOTE, RunSignals, run_signals
from runbook.drill.run import run_drill
from runbook.engine.operator import AssumeYes, Confirmation, ConfirmRequest
from runbook.record.journal import read_journal
from runbook.model import events as ev
from tests.conftest import assert_sequence, event_types

DRILL = [sys.executable, "-m", "runbook", "drill", "oom-surge", "--yes"]
ROOT = Path(__file__).resolve().parents[2]
# Never reached by a healthy run; only keeps a broken one from hanging the suite.
SAFETY_TIMEOUT = 120


def child_env(state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RUNBOOK_KILL_SWITCH", "RUNBOOK_DRY_RUN", "RUNBOOK_CONFIG")}
    env["RUNBOOK_STATE_DIR"] = str(state)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def only_journal(state: Path) -> list[ev.Event]:
    paths = sorted(state.glob("incidents/*/journal.jsonl"))
    assert len(paths) == 1, paths
    return read_journal(paths[0]).events


@pytest.fixture(scope="module")
def unpiped(tmp_path_factory) -> tuple[int, list[str]]:
    """The exit code and event types of `runbook drill oom-surge --yes` with nowhere to fail to print."""
    state = tmp_path_factory.mktemp("unpiped")
    done = subprocess.run(DRILL, env=child_env(state), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          timeout=SAFETY_TIMEOUT)
    types = event_types(only_journal(state))
    assert types[-1] == ev.RUN_FINISHED and ev.ACTION_APPLIED in types
    return done.returncode, types


def run_with_pipe(state: Path, extra: list[str], *, close_after_first_line: bool) -> int:
    """The drill with stdout and stderr on one pipe whose reader leaves (before or after one line)."""
    read_end, write_end = os.pipe()
    if not close_after_first_line:
        os.close(read_end)  # every write fails, whenever it comes: no race with the reader
    child = subprocess.Popen(DRILL + extra, env=child_env(state), stdout=write_end, stderr=write_end)
    os.close(write_end)
    if close_after_first_line:
        with os.fdopen(read_end, "rb", buffering=0) as reader:
            while reader.read(1) not in (b"\n", b""):
                pass
    return child.wait(timeout=SAFETY_TIMEOUT)


@pytest.mark.parametrize("extra", [[], ["-o", "json"]], ids=["text", "json"])
@pytest.mark.parametrize("close_after_first_line", [True, False], ids=["after-first-line", "before-any-line"])
def test_f9_a_closed_pipe_leaves_the_whole_journal_and_the_drills_exit_code(tmp_path, unpiped, extra,
                                                                             close_after_first_line):
    rc = run_with_pipe(tmp_path / "state", extra, close_after_first_line=close_after_first_line)
    events = only_journal(tmp_path / "state")
    assert (rc, event_types(events)) == unpiped
    assert events[-1].data["outcome"] == "resolved"


@pytest.mark.parametrize("pipeline", ["| head -1 >/dev/null", "2>&1 | head -1 >/dev/null",
                                      "-o json | head -1 >/dev/null", "-o json 2>&1 | head -1 >/dev/null",
                                      ">&- 2>&-", "-o json >&- 2>&-"])
def test_f9_a_shell_pipeline_into_head_leaves_the_whole_journal(tmp_path, unpiped, pipeline):
    """`| head -1` as typed at a shell; `>&-`: started with its output descriptors already closed."""
    command = f"{shlex.join(DRILL)} {pipeline}; exit ${{PIPESTATUS[0]}}"
    done = subprocess.run(["bash", "-c", command], env=child_env(tmp_path / "state"), stderr=subprocess.DEVNULL,
                          timeout=SAFETY_TIMEOUT)
    assert (done.returncode, event_types(only_journal(tmp_path / "state"))) == unpiped


# -- in process: the live view and the journal's subscribers -------------------------------------


class ClosingStream(io.StringIO):
    """A terminal or pipe that goes away once `after` has been written: every later write fails."""

    def __init__(self, after: str, error: OSError):
        super().__init__()
        self.after, self.error, self.closed_at = after, error, None

    def write(self, text: str) -> int:
        if self.closed_at is not None:
            raise self.error
        written = super().write(text)
        if self.after in self.getvalue():
            self.closed_at = len(self.getvalue())
        return written


def drill_in_process(tmp_path, **kwargs):
    return run_drill("oom-surge", state=tmp_path / "state", operator=AssumeYes("tester"), **kwargs)


@pytest.mark.parametrize("error", [BrokenPipeError(errno.EPIPE, "Broken pipe"), OSError(errno.EIO, "I/O error")],
                         ids=["EPIPE", "EIO"])
def test_f9_the_live_view_falls_silent_when_its_stream_closes_mid_fix(tmp_path, unpiped, error):
    stream = ClosingStream("applied scale", error)
    console = stderr_console()  # the console every run command draws its live view on
    console.file = stream
    result = drill_in_process(tmp_path, on_event=LiveView(console))
    assert stream.closed_at is not None, "the stream never closed: the test did not reach the apply"
    assert len(stream.getvalue()) == stream.closed_at  # nothing more was shown once it closed
    assert (result.run.exit_code, event_types(read_journal(result.journal).events)) == unpiped


def test_f9_a_subscriber_that_raises_broken_pipe_does_not_stop_the_run(tmp_path, unpiped):
    def broken_view(event):
        if event.type == ev.ACTION_APPLIED:
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    result = drill_in_process(tmp_path, on_event=broken_view)
    events = read_journal(result.journal).events
    first_apply = event_types(events).index(ev.ACTION_APPLIED)
    # The journal says the view was detached, right after the event it failed on, and goes on.
    assert events[first_apply + 1].type == ev.NOTE and "BrokenPipeError" in events[first_apply + 1].data["message"]
    assert [t for i, t in enumerate(event_types(events)) if i != first_apply + 1] == unpiped[1]
    assert result.run.outcome == "resolved"


# -- signals -------------------------------------------------------------------------------------


class SignalOnConfirm:
    """Says yes, but while asked to confirm `step` the process receives `signum` (a real signal)."""

    def __init__(self, step: str, signum: int):
        self.step, self.signum, self.by = step, signum, "tester"

    def confirm(self, request: ConfirmRequest) -> Confirmation:
        if request.step == self.step:
            signal.raise_signal(self.signum)  # its Python handler has run when this returns
        return Confirmation(True, self.by, "--yes")


def test_f9_sigterm_during_a_confirmation_stops_before_the_apply_and_rolls_back(tmp_path):
    with run_signals() as caught:
        result = run_drill("oom-surge", state=tmp_path / "state",
                           operator=SignalOnConfirm("lower-max-model-len", signal.SIGTERM), interrupted=caught.journaled)
    events = read_journal(result.journal).events
    assert_sequence(events, [ev.ACTION_APPLIED, ev.STEP_STARTED, ev.ACTION_CONFIRMED, ev.GUARD_REFUSED,
                             ev.ROLLBACK_APPLIED, ev.RUN_FINISHED])
    applied = [e.step for e in events if e.type == ev.ACTION_APPLIED]
    assert applied == ["scale-down"]
    assert [e.step for e in events if e.type == ev.ROLLBACK_APPLIED] == ["scale-down"]
    assert events[-1].type == ev.RUN_FINISHED and events[-1].data["outcome"] == "interrupted"
    assert "SIGTERM" in events[-1].data["reason"]
    assert result.run.exit_code == 130


def test_f9_sighup_is_journaled_and_the_run_goes_on_to_its_end(tmp_path, unpiped):
    with run_signals() as caught:
        result = run_drill("oom-surge", state=tmp_path / "state",
                           operator=SignalOnConfirm("lower-max-model-len", signal.SIGHUP), interrupted=caught.journaled)
    events = read_journal(result.journal).events
    notes = [e for e in events if e.type == ev.NOTE and e.data.get("message") == HANGUP_NOTE]
    assert len(notes) == 1
    assert [e.type for e in events if e is not notes[0]] == unpiped[1]
    assert result.run.outcome == "resolved"


def test_f9_a_second_sigint_raises_and_the_handlers_are_restored_after_the_run():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    with run_signals() as caught:
        signal.raise_signal(signal.SIGINT)
        assert caught.interrupted() == "SIGINT from the terminal"
        signal.raise_signal(signal.SIGTERM)  # already stopping: changes nothing
        assert caught.interrupted() == "SIGINT from the terminal"
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)  # the person insists
    assert {s: signal.getsignal(s) for s in before} == before


def test_f9_notes_are_journaled_when_the_engine_asks_not_inside_the_handler():
    from runbook.clock import FakeClock, utc
    from runbook.record.journal import MemoryJournal

    journal, caught = MemoryJournal(), RunSignals()
    check = caught.journaled(journal, FakeClock(utc(2026, 3, 14, 3, 12, 7)))
    with run_signals(caught):
        signal.raise_signal(signal.SIGHUP)
        assert journal.events() == []  # the handler wrote nothing itself
        assert check() is None
    assert [(e.type, e.data["message"]) for e in journal.events()] == [(ev.NOTE, HANGUP_NOTE)]


def test_f9_sigterm_to_a_drill_at_its_prompt_rolls_back_and_exits_130(tmp_path):
    """A real `runbook drill` on a terminal, sent SIGTERM while it waits at the second prompt."""
    master, slave = os.openpty()
    command = [a for a in DRILL if a != "--yes"]
    env = {**child_env(tmp_path / "state"), "TERM": "dumb", "COLUMNS": "200"}
    child = subprocess.Popen(command, env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    try:
        answered, seen = 0, b""
        while answered < 2:
            readable, _, _ = select.select([master], [], [], SAFETY_TIMEOUT)
            assert readable, f"no prompt came: {seen[-2000:]!r}"
            seen += os.read(master, 65536)
            if seen.count(b"apply this change?") > answered:
                if answered == 1:  # the kill's prompt: scale-down is applied, the kill is not
                    child.send_signal(signal.SIGTERM)
                os.write(master, b"y\n")
                answered += 1
        rc = child.wait(timeout=SAFETY_TIMEOUT)
    finally:
        if child.poll() is None:
            child.kill()
        os.close(master)
    events = only_journal(tmp_path / "state")
    assert [e.step for e in events if e.type == ev.ACTION_APPLIED] == ["scale-down"]
    assert [e.step for e in events if e.type == ev.ROLLBACK_APPLIED] == ["scale-down"]
    assert events[-1].type == ev.RUN_FINISHED and events[-1].data["outcome"] == "interrupted"
    assert rc == 130
