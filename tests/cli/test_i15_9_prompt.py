"""Issue 15, item 9: the confirmation prompt offers yes / skip this step / abort, in letters or words.

A skipped step is journaled as skipped (not refused) and the run goes on; abort ends it, refused.
"""

from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import sys

from rich.console import Console

from runbook.cli.prompt import TerminalOperator
from runbook.engine.operator import ConfirmRequest, Scripted
from runbook.record.journal import read_journal
from runbook.model import events as ev
from tests.engine.helpers import engine, playbook

REQUEST = ConfirmRequest("inc-1", "scale-down", "k8s.scale", "llm/statefulset/vllm-server",
                         "scale statefulset/vllm-server 3 → 1", ("- replicas: 3", "+ replicas: 1"))
QUESTION = "? scale statefulset/vllm-server 3 → 1  (llm/statefulset/vllm-server)\n"
ASK = "  apply this change? [y]es / [n]o, skip this step / [a]bort the playbook: "


def ask(typed: str):
    out = io.StringIO()
    operator = TerminalOperator(Console(file=out, width=200, color_system=None), "alice", stream=io.StringIO(typed))
    return operator.confirm(REQUEST), out.getvalue()


def test_item9_yes_in_a_letter_or_a_word_applies():
    for typed in ("y\n", "yes\n", " YES \n"):
        answer, shown = ask(typed)
        assert (answer.approved, answer.skip, answer.by, answer.reason) == (True, False, "alice", "prompt")
        assert shown == QUESTION + ASK


def test_item9_no_or_skip_skips_only_this_step():
    for typed in ("n\n", "no\n", "s\n", "skip\n"):
        answer, shown = ask(typed)
        assert (answer.approved, answer.skip, answer.reason) == (False, True, "skipped at the prompt")


def test_item9_abort_ends_the_playbook():
    for typed in ("a\n", "abort\n", "q\n"):
        answer, _ = ask(typed)
        assert (answer.approved, answer.skip, answer.reason) == (False, False, "aborted at the prompt")


def test_item9_anything_else_is_asked_again_and_eof_aborts():
    answer, shown = ask("\nmaybe\ny\n")
    assert answer.approved
    again = "  answer y (apply this change), n (skip this step) or a (abort the playbook)\n"
    assert shown == QUESTION + ASK + again + ASK + again + ASK
    answer, _ = ask("")
    assert (answer.approved, answer.skip, answer.reason) == (False, False, "aborted at the prompt (end of input)")


def test_item9_the_engine_journals_a_skipped_step_as_skipped_and_goes_on(clock):
    book = playbook(guard="{floor: 1}")
    e = engine(clock, operator=Scripted(["skip"], by="alice"))
    result = e.run(book)
    events = e.journal.events()
    step = {s.id: s for s in result.steps}["scale-down"]
    assert step.status == "skipped" and step.guard is None
    assert step.summary == "skipped by alice at the prompt: scale statefulset/vllm-server 3 → 1 was not applied"
    assert not any(x.type in (ev.GUARD_REFUSED, ev.ACTION_APPLIED, ev.ACTION_CONFIRMED) for x in events)
    skipped = next(x for x in events if x.type == ev.ACTION_SKIPPED)
    assert skipped.step == "scale-down" and skipped.data["reason"] == "skipped by alice at the prompt"
    assert [s.id for s in result.steps] == ["oom", "scale-down", "observe"]  # the run went on


def _drill_on_a_terminal(tmp_path, scenario: str, answers: bytes):
    primary, secondary = pty.openpty()
    env = {**os.environ, "RUNBOOK_STATE_DIR": str(tmp_path / "state"), "NO_COLOR": "1", "COLUMNS": "200"}
    try:
        os.write(primary, answers)
        done = subprocess.run([sys.executable, "-m", "runbook", "drill", scenario, "--operator", "alice"],
                              stdin=secondary, capture_output=True, env=env, timeout=30, text=True)
    finally:
        os.close(secondary)
        os.close(primary)
    journal = next((tmp_path / "state" / "incidents").glob("*/journal.jsonl"))
    return done, read_journal(journal).events


def test_item9_a_drill_on_a_terminal_applies_skips_and_aborts(tmp_path):
    """The real prompt on a pseudo-terminal: yes to the scale, `no` to the kill (oom-surge kills the
    server only at the floor of --max-model-len, issue 16 item 9), `abort` at the lowered value."""
    done, events = _drill_on_a_terminal(tmp_path / "at-floor", "oom-surge-at-floor", b"yes\nno\n")
    finished = {e.step: e.data for e in events if e.type == ev.STEP_FINISHED}
    assert done.stderr.count("apply this change? [y]es / [n]o, skip this step / [a]bort the playbook: ") == 2, \
        done.stderr
    assert finished["scale-down"]["status"] == "changed"
    assert finished["lower-max-model-len"]["status"] == "skipped"  # `when`: at its floor, never asked
    assert finished["kill-server"]["status"] == "skipped"
    assert json.dumps([e.data for e in events if e.type == ev.ACTION_SKIPPED]).count("skipped by alice") == 1
    done, events = _drill_on_a_terminal(tmp_path / "lowered", "oom-surge", b"yes\nabort\n")
    assert done.returncode == 4, done.stderr
    assert done.stderr.count("apply this change? [y]es / [n]o, skip this step / [a]bort the playbook: ") == 2, \
        done.stderr
    finished = {e.step: e.data for e in events if e.type == ev.STEP_FINISHED}
    assert finished["scale-down"]["status"] == "changed"
    assert finished["lower-max-model-len"]["status"] == "refused"
    assert finished["lower-max-model-len"]["summary"] == "guard confirm: aborted at the prompt (asked alice)"
    assert "kill-server" not in finished and "observe" not in finished
