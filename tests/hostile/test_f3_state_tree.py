"""Finding 3: the state tree is 0700/0600, never follows a link planted inside, and an unsafe one is refused.

A hostile neighbour plants links where the lock file, the journal or an incident folder will be,
pointing at a file of the victim's outside: the file keeps every byte and the refusal says why.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from runbook.record import journal as journals
from runbook import settings
from runbook.cli import main
from runbook.clock import utc
from runbook.errors import JournalError, Refused
from runbook.record.locks import LocalLocks

TARGET = "llm/statefulset/vllm-server"
PRECIOUS = b"root:x:0:0:root:/root:/bin/bash\n" * 10
INCIDENT = "20260314-031207-oom-surge-ab12"


@pytest.fixture
def victim(tmp_path) -> Path:
    """A file of the victim's outside the state tree."""
    path = tmp_path / "outside" / "passwd"
    path.parent.mkdir()
    path.write_bytes(PRECIOUS)
    return path


@pytest.fixture
def state(tmp_path) -> Path:
    path = tmp_path / "state"
    path.mkdir(mode=0o700)
    return path


def test_f3_a_lock_file_planted_as_a_link_is_neither_truncated_nor_written(state, victim):
    locks = LocalLocks(state)
    planted = locks.path_of(TARGET)
    planted.parent.mkdir(mode=0o700)
    planted.symlink_to(victim)
    with pytest.raises(Refused) as caught:
        with locks.hold(TARGET, holder="root's runbook"):
            pass
    assert victim.read_bytes() == PRECIOUS
    assert str(planted) in str(caught.value) and "symbolic link" in str(caught.value)


def test_f3_a_locks_folder_planted_as_a_link_is_refused(state, victim):
    (state / "locks").symlink_to(victim.parent)
    with pytest.raises(Refused, match="symbolic link"):
        with LocalLocks(state).hold(TARGET, holder="root's runbook"):
            pass
    assert sorted(p.name for p in victim.parent.iterdir()) == ["passwd"]


def test_f3_a_journal_planted_as_a_link_is_never_appended_to(state, victim):
    folder = journals.incident_dir(state, INCIDENT)
    folder.mkdir(parents=True)
    (folder / "journal.jsonl").symlink_to(victim)
    with pytest.raises(JournalError) as caught:
        journal = journals.JsonlJournal.for_incident(state, INCIDENT, "run1")
        journal.record("alert.received", at=utc(2026, 3, 14), data={"labels": {"x": "y" * 9000}})
    assert victim.read_bytes() == PRECIOUS
    assert str(folder / "journal.jsonl") in str(caught.value) and "symbolic link" in str(caught.value)


@pytest.mark.parametrize("planted", ["incidents", f"incidents/{INCIDENT}"])
def test_f3_an_incident_folder_planted_as_a_link_is_refused(state, victim, planted):
    link = state / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim.parent)
    with pytest.raises(JournalError, match="symbolic link"):
        journals.JsonlJournal.for_incident(state, INCIDENT, "run1")
    assert sorted(p.name for p in victim.parent.iterdir()) == ["passwd"]


def test_f3_a_lock_left_by_a_holder_is_rewritten_in_place_and_kept_private(state):
    locks = LocalLocks(state)
    with locks.hold(TARGET, holder="first"):
        pass
    os.chmod(locks.path_of(TARGET), 0o644)
    with locks.hold(TARGET, holder="second"):
        assert json.loads(locks.path_of(TARGET).read_text())["holder"] == "second"
    assert stat.S_IMODE(os.stat(locks.path_of(TARGET)).st_mode) == 0o600


@pytest.mark.parametrize("mode", [0o1777, 0o777])
def test_f3_a_drill_refuses_a_state_directory_others_can_write(tmp_path, monkeypatch, mode):
    shared = tmp_path / "shared-state"
    shared.mkdir()
    shared.chmod(mode)
    monkeypatch.setenv("RUNBOOK_STATE_DIR", str(shared))
    result = CliRunner().invoke(main, ["drill", "oom-surge", "--yes"])
    assert result.exit_code == 2, result.output
    assert str(shared) in result.stderr and f"chmod 700 {shared}" in result.stderr
    assert "Traceback" not in result.output
    assert list(shared.iterdir()) == []


@pytest.mark.parametrize("command", [["incidents"], ["rca", INCIDENT]])
def test_f3_reading_commands_refuse_a_state_directory_others_can_write(tmp_path, monkeypatch, command):
    shared = tmp_path / "shared-state"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setenv("RUNBOOK_STATE_DIR", str(shared))
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 2, result.output
    assert f"chmod 700 {shared}" in result.stderr


def test_f3_a_fresh_state_tree_after_a_drill_is_0700_and_0600_throughout(tmp_path, monkeypatch):
    state = tmp_path / "fresh" / "runbook"
    monkeypatch.setenv("RUNBOOK_STATE_DIR", str(state))
    before = os.umask(0o022)  # the usual umask: the tree must be private regardless
    try:
        result = CliRunner().invoke(main, ["drill", "oom-surge", "--yes", "--output", "json"])
        after = os.umask(0o022)
    finally:
        os.umask(before)
    assert result.exit_code == 0, result.output
    assert after == 0o022, "the command left its umask behind in the calling process"
    wrong = []
    for folder, dirs, files in os.walk(tmp_path / "fresh"):
        for name in [folder, *(os.path.join(folder, d) for d in dirs)]:
            if stat.S_IMODE(os.lstat(name).st_mode) != 0o700:
                wrong.append(f"{name} {stat.S_IMODE(os.lstat(name).st_mode):o}")
        for name in (os.path.join(folder, f) for f in files):
            if stat.S_IMODE(os.lstat(name).st_mode) != 0o600:
                wrong.append(f"{name} {stat.S_IMODE(os.lstat(name).st_mode):o}")
    assert wrong == []
    assert any(p.name == "journal.jsonl" for p in state.rglob("*")) and any(p.name == "rca.md" for p in state.rglob("*"))


def test_f3_a_kill_file_that_is_a_dangling_link_still_switches_remediations_off(state, tmp_path):
    (state / settings.KILL_SWITCH_FILE).symlink_to(tmp_path / "nowhere")
    assert settings.kill_switch(state, env={}) is not None
