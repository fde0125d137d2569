"""The guards' history reads each journal once and then only what was appended (issue 17, alert to action).

A journal only grows: a torn last line is taken once it is complete, a journal replaced by another
file is read afresh, and what is counted is what `read_journal` would have counted.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from runbook.record.journal import History, JsonlJournal, counted_events, read_journal
from runbook.model import events as ev

AT = dt.datetime(2026, 3, 14, 3, 12, tzinfo=dt.timezone.utc)


def applied(journal: JsonlJournal, minutes: int, target: str = "llm/statefulset/vllm") -> None:
    journal.record(ev.ACTION_APPLIED, at=AT + dt.timedelta(minutes=minutes), step="s",
                   data={"action": "k8s.scale", "target": target})


def test_appended_applications_are_seen_and_nothing_is_counted_twice(tmp_path):
    path = tmp_path / "incidents" / "inc-1" / "journal.jsonl"
    journal = JsonlJournal(path, incident="inc-1", run="r1")
    journal.record(ev.RUN_STARTED, at=AT, data={"playbook": "p"})
    applied(journal, 1)
    assert [e.seq for e in counted_events(path)] == [2]
    journal.record(ev.NOTE, at=AT, data={"message": "x"})
    applied(journal, 2)
    assert [e.seq for e in counted_events(path)] == [2, 4]
    assert [e.seq for e in counted_events(path)] == [2, 4]
    every = [e for e in read_journal(path).events if e.type in ("action.applied", "action.unknown")]
    assert counted_events(path) == every
    history = History(tmp_path)
    assert len(history.records("llm/statefulset/vllm", since=AT)) == 2
    journal.close()


def test_a_torn_last_line_counts_once_it_is_complete(tmp_path):
    path = tmp_path / "journal.jsonl"
    line = json.dumps({"seq": 1, "at": "2026-03-14T03:13:00.000Z", "incident": "i", "run": "r",
                       "type": "action.applied", "step": "s", "data": {"action": "a", "target": "t"}},
                      separators=(",", ":"))
    path.write_bytes(line[:40].encode())
    assert counted_events(path) == []
    path.write_bytes(line.encode() + b"\n")
    assert [e.seq for e in counted_events(path)] == [1]


def test_a_journal_replaced_by_another_file_is_read_afresh(tmp_path):
    path = tmp_path / "incidents" / "inc-2" / "journal.jsonl"
    first = JsonlJournal(path, incident="inc-2", run="r1")
    applied(first, 1)
    applied(first, 2)
    first.close()
    assert len(counted_events(path)) == 2
    path.unlink()
    second = JsonlJournal(path, incident="inc-2", run="r2")
    applied(second, 3)
    second.close()
    assert [e.run for e in counted_events(path)] == ["r2"]


def _damaged_journal(tmp_path, incident: str, damaged: bytes):
    path = tmp_path / "incidents" / incident / "journal.jsonl"
    journal = JsonlJournal(path, incident=incident, run="r1")
    journal.record(ev.RUN_STARTED, at=AT, data={"playbook": "p"})
    journal.close()
    with open(path, "ab") as handle:
        handle.write(damaged + b"\n")
    return path


def test_a_damaged_line_that_may_be_an_application_is_never_counted_as_none(tmp_path):
    from runbook.errors import BackendError
    from runbook.record.journal import DamagedHistory

    # A line cut short and glued to the next write: the JSON is broken, the change it records is not known.
    path = _damaged_journal(tmp_path, "inc-3", b'{"seq":2,"at":"2026-03-14T03:13:00.000Z","incident":"inc-3","run":"r1",'
                                               b'"type":"action.applied","step":"s","data":{"action":"k8s.scale",'
                                               b'"target":"llm/statefulset/vllm"{"seq":3')
    with pytest.raises(DamagedHistory, match=rf"{path}:2: an unreadable line may record a change applied to "
                                             r"llm/statefulset/vllm") as raised:
        History(tmp_path).records("llm/statefulset/vllm", since=AT)
    assert isinstance(raised.value, BackendError)  # the engine refuses the step: "cannot read what was applied"
    # Another target's damaged line says nothing about this one.
    assert History(tmp_path).records("llm/statefulset/other", since=AT) == []


def test_a_damaged_application_line_naming_no_target_may_be_anyones(tmp_path):
    from runbook.record.journal import DamagedHistory

    _damaged_journal(tmp_path, "inc-4", b'{"seq":2,"at":"2026-03-14T03:13:00.000Z","type":"action.unknown","da')
    for target in ("llm/statefulset/vllm", "llm/deployment/anything"):
        with pytest.raises(DamagedHistory, match=":2: an unreadable line may record a change applied to"):
            History(tmp_path).records(target, since=AT)


def test_a_damaged_line_of_anything_else_is_not_a_reason_to_refuse(tmp_path):
    _damaged_journal(tmp_path, "inc-5", b'{"seq":2,"at":"2026-03-14T03:13:00.000Z","type":"note","data":{"mess')
    assert History(tmp_path).records("llm/statefulset/vllm", since=AT) == []


def _confirmed(journal: JsonlJournal, minutes: int, step: str = "s", **data) -> None:
    journal.record(ev.ACTION_CONFIRMED, at=AT + dt.timedelta(minutes=minutes), step=step,
                   data={"by": "alice", "how": "prompt", "target": "llm/statefulset/vllm", "action": "k8s.scale",
                         **data})


def test_a_confirmed_change_nothing_settled_counts_until_its_result_is_appended(tmp_path):
    path = tmp_path / "incidents" / "inc-6" / "journal.jsonl"
    journal = JsonlJournal(path, incident="inc-6", run="r1")
    _confirmed(journal, 1)
    assert [e.type for e in counted_events(path)] == [ev.ACTION_CONFIRMED]
    assert History(tmp_path).applications("llm/statefulset/vllm", since=AT, action="k8s.scale") == \
        [AT + dt.timedelta(minutes=1)]
    assert History(tmp_path).applications("llm/statefulset/vllm", since=AT, action="k8s.set_arg") == []
    applied(journal, 1)  # read on the next check: the confirmation is settled, the change counted once
    assert [e.type for e in counted_events(path)] == [ev.ACTION_APPLIED]
    journal.close()


@pytest.mark.parametrize("settled_by", [
    (ev.ACTION_FAILED, "s"),      # the apply said no change was made
    (ev.ACTION_PLANNED, "s"),     # the apply found the target moved: planned again, nothing changed
    (ev.STEP_FINISHED, "s"),      # refused after the yes (interrupted, the lock lost)
    (ev.RUN_INTERRUPTED, "s"),    # a restart's verdict: not applied (an in-doubt one adds action.unknown)
    (ev.RUN_FINISHED, None),      # the run's end settles every change of that run
])
def test_what_settles_a_confirmed_change(tmp_path, settled_by):
    path = tmp_path / "incidents" / "inc-7" / "journal.jsonl"
    journal = JsonlJournal(path, incident="inc-7", run="r1")
    _confirmed(journal, 1)
    assert len(counted_events(path)) == 1
    kind, step = settled_by
    journal.record(kind, at=AT + dt.timedelta(minutes=2), step=step, data={})
    assert counted_events(path) == []
    journal.close()


def test_only_its_own_run_and_step_settle_a_confirmed_change(tmp_path):
    path = tmp_path / "incidents" / "inc-8" / "journal.jsonl"
    killed = JsonlJournal(path, incident="inc-8", run="r1")
    _confirmed(killed, 1)
    killed.record(ev.STEP_FINISHED, at=AT + dt.timedelta(minutes=1), step="another", data={})
    killed.close()
    rerun = JsonlJournal(path, incident="inc-8", run="r2")
    rerun.record(ev.STEP_FINISHED, at=AT + dt.timedelta(minutes=2), step="s", data={})
    rerun.record(ev.RUN_FINISHED, at=AT + dt.timedelta(minutes=2), data={"outcome": "resolved"})
    rerun.close()
    assert [(e.type, e.run) for e in counted_events(path)] == [(ev.ACTION_CONFIRMED, "r1")]


def test_a_confirmation_journaled_before_they_named_their_action_counts_for_any(tmp_path):
    path = tmp_path / "incidents" / "inc-9" / "journal.jsonl"
    journal = JsonlJournal(path, incident="inc-9", run="r1")
    _confirmed(journal, 1, action=None)
    journal.close()
    for action in ("k8s.scale", "k8s.set_arg", None):
        assert len(History(tmp_path).applications("llm/statefulset/vllm", since=AT, action=action)) == 1


def test_a_damaged_confirmation_line_refuses_the_count(tmp_path):
    from runbook.record.journal import DamagedHistory

    _damaged_journal(tmp_path, "inc-10", b'{"seq":2,"at":"2026-03-14T03:13:00.000Z","type":"action.confirmed",'
                                         b'"data":{"target":"llm/statefulset/vllm","by')
    with pytest.raises(DamagedHistory, match=":2: an unreadable line may record a change applied to"):
        History(tmp_path).records("llm/statefulset/vllm", since=AT)


def test_the_runs_own_journal_counts_a_confirmation_nothing_settled_too(tmp_path):
    from runbook.record.journal import MemoryJournal

    journal = MemoryJournal("inc-11")
    journal.record(ev.ACTION_CONFIRMED, at=AT, step="s", data={"target": "llm/statefulset/vllm", "action": "k8s.scale"})
    history = History(None, extra=journal)
    assert history.applications("llm/statefulset/vllm", since=AT) == [AT]
    journal.record(ev.ACTION_FAILED, at=AT, step="s", data={"target": "llm/statefulset/vllm", "action": "k8s.scale"})
    assert history.applications("llm/statefulset/vllm", since=AT) == []


def test_each_counted_change_says_whether_it_is_known_to_have_landed(tmp_path):
    """An applied change is plain; an apply that raised, and a yes whose result was never written, each
    carry why they are counted without being known (a cooldown's refusal says it)."""
    path = tmp_path / "incidents" / "inc-3" / "journal.jsonl"
    journal = JsonlJournal(path, incident="inc-3", run="r1")
    applied(journal, 1)
    journal.record(ev.ACTION_UNKNOWN, at=AT + dt.timedelta(minutes=2), step="t",
                   data={"action": "k8s.scale", "target": "llm/statefulset/vllm"})
    journal.record(ev.ACTION_CONFIRMED, at=AT + dt.timedelta(minutes=3), step="u",
                   data={"action": "k8s.scale", "target": "llm/statefulset/vllm", "by": "alice"})
    journal.close()
    found = History(tmp_path).records("llm/statefulset/vllm", since=AT)
    assert [(a.at.minute - AT.minute, a.doubt) for a in found] == [
        (1, None),
        (2, "its apply raised before its result could be read back"),
        (3, "its run stopped after the yes, before the apply's result was written"),
    ]
