"""Finding 6: a journal's new name is fsynced with its folder, a short write is never success, and the
guards' history reads only the journals that can hold something inside their window.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runbook.record import journal as journals
from runbook.model import events as ev

TARGET = "llm/statefulset/vllm-server"
NOW = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)


@pytest.fixture
def fsynced(monkeypatch) -> list[str]:
    """The path of every descriptor fsynced (the real fsync still runs)."""
    seen: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


def test_f6_a_new_journal_is_fsynced_with_its_folder_and_each_folder_above(tmp_path, fsynced):
    state = tmp_path / "state"
    journal = journals.JsonlJournal.for_incident(state, "20260314-031207-oom-surge-ab12", "run1")
    journal.close()
    folder = journal.path.parent
    for name in (folder, folder.parent, state):
        assert str(name) in fsynced, f"{name} was not fsynced after an entry was created in it"


def test_f6_reopening_a_journal_fsyncs_no_folder(tmp_path, fsynced):
    state = tmp_path / "state"
    journals.JsonlJournal.for_incident(state, "inc-1", "run1").close()
    fsynced.clear()
    journals.JsonlJournal.for_incident(state, "inc-1", "run2").close()
    assert fsynced == []


SHORT_WRITE = textwrap.dedent("""
    import os, resource, signal, sys
    from pathlib import Path
    from runbook.record import journal as journals
    from runbook.clock import utc
    from runbook.errors import JournalError

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit: EFBIG, not a signal
    journal = journals.JsonlJournal.for_incident(Path(sys.argv[1]), "inc-1", "run1")
    journal.record("note", at=utc(2026, 3, 14), data={"message": "first"})
    # The kernel writes only up to the file size limit and returns the count: a short write.
    limit = os.path.getsize(journal.path) + 20
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    try:
        journal.record("note", at=utc(2026, 3, 14), data={"message": "x" * 500})
    except JournalError as exc:
        print("JournalError:", exc)
    else:
        print("recorded")
""")


def test_f6_a_short_write_is_a_journal_error_not_success(tmp_path):
    done = subprocess.run([sys.executable, "-c", SHORT_WRITE, str(tmp_path / "state")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("JournalError: cannot write the journal"), done.stdout
    read = journals.read_journal(next((tmp_path / "state").rglob("journal.jsonl")))
    assert [e.data["message"] for e in read.events] == ["first"]


def _journal(state: Path, incident: str, *, at: dt.datetime, written: dt.datetime, target: str = TARGET) -> Path:
    journal = journals.JsonlJournal.for_incident(state, incident, "run1")
    journal.record(ev.ACTION_APPLIED, at=at, data={"target": target, "action": "k8s.scale"})
    journal.close()
    os.utime(journal.path, (written.timestamp(), written.timestamp()))
    return journal.path


@pytest.fixture
def read_paths(monkeypatch) -> list[Path]:
    """Which journals History reads (the real reader still answers)."""
    seen: list[Path] = []
    real = journals.counted_events

    def counted_events(path):
        seen.append(Path(path))
        return real(path)

    monkeypatch.setattr(journals, "counted_events", counted_events)
    return seen


def test_f6_history_reads_only_journals_written_within_the_window(tmp_path, read_paths):
    state = tmp_path / "state"
    old = [_journal(state, f"old-{i}", at=NOW - dt.timedelta(days=3), written=NOW - dt.timedelta(days=3))
           for i in range(5)]
    recent = _journal(state, "recent", at=NOW - dt.timedelta(minutes=10), written=NOW - dt.timedelta(minutes=10))
    since = NOW - dt.timedelta(hours=1)
    assert journals.History(state).applications(TARGET, since=since) == [NOW - dt.timedelta(minutes=10)]
    assert recent in read_paths and not set(old) & set(read_paths)


def test_f6_a_long_incident_written_recently_is_read_whole(tmp_path):
    state = tmp_path / "state"
    journal = journals.JsonlJournal.for_incident(state, "long", "run1")
    journal.record(ev.ACTION_APPLIED, at=NOW - dt.timedelta(days=2), data={"target": TARGET, "action": "k8s.scale"})
    journal.record(ev.ACTION_APPLIED, at=NOW - dt.timedelta(minutes=30), data={"target": TARGET, "action": "k8s.scale"})
    journal.record(ev.NOTE, at=NOW, data={"message": "still going"})
    journal.close()
    history = journals.History(state)
    assert history.applications(TARGET, since=NOW - dt.timedelta(hours=1)) == [NOW - dt.timedelta(minutes=30)]
    assert len(history.applications(TARGET, since=NOW - dt.timedelta(days=3))) == 2


def test_f6_a_file_time_a_little_behind_its_events_still_counts(tmp_path):
    # File times come from a coarser clock than the events' (and clocks get stepped back a little).
    state = tmp_path / "state"
    since = NOW - dt.timedelta(hours=1)
    _journal(state, "edge", at=since + dt.timedelta(seconds=1), written=since - dt.timedelta(seconds=1))
    assert journals.History(state).applications(TARGET, since=since) == [since + dt.timedelta(seconds=1)]


def test_f6_drills_still_never_count(tmp_path):
    state = tmp_path / "state"
    _journal(state, journals.DRILL_PREFIX + "x", at=NOW, written=NOW)
    assert journals.History(state).applications(TARGET, since=NOW - dt.timedelta(hours=1)) == []


def test_f6_journal_paths_skip_a_journal_that_is_a_link(tmp_path):
    state = tmp_path / "state"
    kept = _journal(state, "kept", at=NOW, written=NOW)
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_bytes(kept.read_bytes())
    (journals.incidents_root(state) / "planted").mkdir(mode=0o700)
    (journals.incidents_root(state) / "planted" / "journal.jsonl").symlink_to(outside)
    assert list(journals.journal_paths(state)) == [kept]


def test_f6_journal_paths_of_a_missing_state_is_empty(tmp_path):
    assert list(journals.journal_paths(tmp_path / "nothing")) == []
