"""The journal: fsynced lines, sequence numbers, torn last lines, redaction when written, crashes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from runbook.clock import utc
from runbook.record.journal import Entry, JsonlJournal, list_incidents, read_journal
from runbook.model import events as ev

AT = utc(2026, 3, 14, 3, 12, 7)


def test_lines_are_json_with_milliseconds_and_sequence(tmp_path):
    journal = JsonlJournal.for_incident(tmp_path, "inc-1", "run-1")
    journal.record(ev.RUN_STARTED, at=AT.replace(microsecond=123456), data={"playbook": "oom-surge"})
    journal.record(ev.RUN_FINISHED, at=AT, data={"outcome": "resolved"})
    lines = (tmp_path / "incidents" / "inc-1" / "journal.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    assert first["at"] == "2026-03-14T03:12:07.123Z" and first["seq"] == 1 and first["type"] == "run.started"
    assert json.loads(lines[1])["seq"] == 2


def test_a_second_run_continues_the_sequence(tmp_path):
    for run in ("a", "b"):
        journal = JsonlJournal.for_incident(tmp_path, "inc-1", run)
        journal.record(ev.NOTE, at=AT, data={"message": run})
        journal.close()
    assert [e.seq for e in read_journal(tmp_path / "incidents" / "inc-1" / "journal.jsonl").events] == [1, 2]


def test_secrets_are_redacted_when_written(tmp_path):
    journal = JsonlJournal.for_incident(tmp_path, "inc-1", "run-1")
    journal.record(ev.EVIDENCE, at=AT, data={"stdout": "HF_TOKEN=hf_abcdefghijklmnop\nok", "api_token": "s3cr3t-value"})
    raw = journal.path.read_text()
    assert "hf_abcdefghijklmnop" not in raw and "s3cr3t-value" not in raw
    assert "REDACTED" in raw


def test_a_torn_last_line_is_skipped_with_a_warning(tmp_path):
    journal = JsonlJournal.for_incident(tmp_path, "inc-1", "run-1")
    journal.record(ev.RUN_STARTED, at=AT, data={"playbook": "x"})
    with open(journal.path, "ab") as handle:
        handle.write(b'{"seq": 2, "at": "2026-03-14T03:1')
    read = read_journal(journal.path)
    assert [e.type for e in read.events] == [ev.RUN_STARTED]
    assert len(read.warnings) == 1 and "torn last line" in read.warnings[0]
    # and the next writer carries on after the last complete event
    journal.record(ev.NOTE, at=AT, data={"message": "after the tear"})
    assert read_journal(journal.path).events[-1].seq == 2


def _missing(wanted: list[str]):
    """What a writer of owed lines appends: those of `wanted` (by message) the journal lacks, in order."""
    def pick(present: list[ev.Event]) -> list[Entry]:
        there = {e.data.get("message") for e in present}
        return [Entry(ev.NOTE, AT, None, {"message": m}) for m in wanted if m not in there]
    return pick


def test_extend_appends_what_is_missing_after_the_last_event_and_ends_a_torn_line(tmp_path):
    journal = JsonlJournal.for_incident(tmp_path, "inc-1", "webhook")
    journal.record(ev.NOTE, at=AT, data={"message": "a"})
    with open(journal.path, "ab") as handle:
        handle.write(b'{"seq": 2, "at": "2026-03-14T03:1')  # a writer died mid-line
    written = journal.extend(_missing(["a", "b", "c"]))
    assert [(e.seq, e.data["message"]) for e in written] == [(2, "b"), (3, "c")]
    read = read_journal(journal.path)
    assert [(e.seq, e.data["message"]) for e in read.events] == [(1, "a"), (2, "b"), (3, "c")]
    assert len(read.warnings) == 1  # the torn line stays, ended, and is skipped
    assert journal.extend(_missing(["a", "b", "c"])) == []  # nothing missing: nothing written
    assert len(read_journal(journal.path).events) == 3


def test_writers_racing_to_extend_one_journal_append_each_entry_once_in_order(tmp_path):
    # Processes, not threads: the journal's lock is what keeps them apart, as with two replicas.
    script = textwrap.dedent("""
        import sys
        from runbook.clock import utc
        from runbook.model import events as ev
        from runbook.record.journal import Entry, JsonlJournal
        wanted = [f"line-{n}" for n in range(int(sys.argv[2]))]
        def pick(present):
            there = {e.data.get("message") for e in present}
            return [Entry(ev.NOTE, utc(2026, 3, 14, 3, 12, 7), None, {"message": m}) for m in wanted if m not in there]
        for _ in range(20):
            journal = JsonlJournal.for_incident(sys.argv[1], "inc-1", "webhook")
            journal.extend(pick)
            journal.close()
    """)
    writers = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path), str(n)]) for n in (10, 20, 30, 40)]
    for writer in writers:
        assert writer.wait(timeout=60) == 0
    events = read_journal(tmp_path / "incidents" / "inc-1" / "journal.jsonl").events
    assert [e.data["message"] for e in events] == [f"line-{n}" for n in range(40)]
    assert [e.seq for e in events] == list(range(1, 41))


def test_incidents_are_listed_with_playbook_and_outcome(tmp_path):
    journal = JsonlJournal.for_incident(tmp_path, "20260314-031207-oom-surge-ab12", "r")
    journal.record(ev.RUN_STARTED, at=AT, data={"playbook": "oom-surge"})
    journal.record(ev.RUN_FINISHED, at=AT, data={"outcome": "resolved"})
    [summary] = list_incidents(tmp_path)
    assert (summary.playbook, summary.outcome, summary.started) == ("oom-surge", "resolved", AT)


CRASHING_RUN = textwrap.dedent("""
    import sys
    from runbook.backends.base import World
    from runbook.clock import SystemClock
    from runbook.engine.operator import AssumeYes
    from runbook.engine.runner import Engine
    from runbook.record.journal import History, JsonlJournal
    from runbook.loading.validation import load_playbook_text
    from runbook.record.locks import MemoryLocks
    from runbook.actions import load_builtin
    from runbook.sim.fakes import FakeMetrics

    steps = "".join(f"  - id: q{i}\\n    uses: prom.query\\n    with: {{signal: waiting_requests, by: [pod]}}\\n"
                    for i in range(5000))
    text = "name: long\\ntitle: long\\nsteps:\\n" + steps
    playbook = load_playbook_text(text, file="long.yaml", registry=load_builtin()).playbook
    journal = JsonlJournal.for_incident(sys.argv[1], "crash", "run")
    engine = Engine(registry=load_builtin(), world=World(metrics=FakeMetrics({"waiting_requests": 80})),
                    clock=SystemClock(), journal=journal, operator=AssumeYes("x"), locks=MemoryLocks(),
                    history=History(None))
    engine.run(playbook)
""")


def test_sigkill_mid_run_leaves_a_journal_that_reads_back_whole(tmp_path):
    process = subprocess.Popen([sys.executable, "-c", CRASHING_RUN, str(tmp_path)])
    path = tmp_path / "incidents" / "crash" / "journal.jsonl"
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if path.exists() and path.stat().st_size > 20_000:
                break
            time.sleep(0.02)
        else:
            raise AssertionError("the run wrote too little before the deadline")
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    assert process.returncode == -signal.SIGKILL
    read = read_journal(path)
    assert len(read.warnings) <= 1  # at most the line being written when the process died
    seqs = [e.seq for e in read.events]
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) > 50
    assert read.events[0].type == ev.RUN_STARTED
    assert not any(e.type == ev.RUN_FINISHED for e in read.events)
