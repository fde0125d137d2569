"""Issue 15, item 11: `runbook incidents` newest first by wall time, ids never wrapped, and filters.

A drill's journal is stamped with the scenario's virtual time: when it ran is when its journal was written.
"""

from __future__ import annotations

import datetime as dt
import json
import os

import pytest

from runbook.record import safe_fs
from runbook.record.journal import JsonlJournal
from runbook.model import events as ev
from tests.cli.helpers import runbook

UTC = dt.timezone.utc
NOW = dt.datetime.now(UTC).replace(microsecond=0)
REAL_OLD = "20260301-101500-waiting-queue-aaaa"
REAL_NEW = "20260302-031207-oom-surge-with-a-rather-long-playbook-name-bbbb"
DRILL = "drill-20260314-031207-oom-surge-cccc"


def _incident(state, incident: str, playbook: str, at: dt.datetime, outcome: str, *, written: dt.datetime) -> None:
    journal = JsonlJournal.for_incident(state, incident, "run-1")
    journal.record(ev.RUN_STARTED, at=at, data={"playbook": playbook, "title": playbook})
    journal.record(ev.RUN_FINISHED, at=at + dt.timedelta(minutes=6), data={"outcome": outcome, "reason": "-"})
    journal.close()
    os.utime(journal.path, (written.timestamp(), written.timestamp()))


@pytest.fixture
def state(tmp_path):
    state = safe_fs.private_dir(tmp_path / "state")
    old, new = NOW - dt.timedelta(days=3), NOW - dt.timedelta(hours=5)
    _incident(state, REAL_OLD, "waiting-queue", old, "resolved", written=old + dt.timedelta(minutes=6))
    _incident(state, REAL_NEW, "oom-surge", new, "rolled_back", written=new + dt.timedelta(minutes=6))
    # A drill of a March scenario, run an hour ago: newest by wall time, oldest by its virtual time.
    _incident(state, DRILL, "oom-surge", dt.datetime(2026, 3, 14, 3, 12, 7, tzinfo=UTC), "resolved",
              written=NOW - dt.timedelta(hours=1))
    return state


def _clock(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S")


def test_item11_newest_first_by_wall_time_one_line_each(state):
    result = runbook("incidents", env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.stderr
    ran_drill, ran_new, ran_old = NOW - dt.timedelta(hours=1), NOW - dt.timedelta(hours=5), NOW - dt.timedelta(days=3)
    width = len(REAL_NEW)
    assert result.stdout.splitlines() == [
        f"{'id'.ljust(width)}  playbook       ran (UTC)            outcome",
        f"{DRILL.ljust(width)}  oom-surge      {_clock(ran_drill)}  resolved",
        f"{REAL_NEW}  oom-surge      {_clock(ran_new)}  rolled_back",
        f"{REAL_OLD.ljust(width)}  waiting-queue  {_clock(ran_old)}  resolved",
    ]
    assert result.stderr == ""


def test_item11_since_limit_and_no_drills(state):
    since = runbook("incidents", "--since", "2d")
    assert [line.split()[0] for line in since.stdout.splitlines()[1:]] == [DRILL, REAL_NEW]
    limited = runbook("incidents", "--limit", "1")
    assert [line.split()[0] for line in limited.stdout.splitlines()[1:]] == [DRILL]
    real = runbook("incidents", "--no-drills", "--limit", "1")
    assert [line.split()[0] for line in real.stdout.splitlines()[1:]] == [REAL_NEW]
    at = runbook("incidents", "--since", (NOW - dt.timedelta(hours=2)).isoformat())
    assert [line.split()[0] for line in at.stdout.splitlines()[1:]] == [DRILL]


def test_item11_json_in_the_same_order_with_when_it_ran(state):
    result = runbook("incidents", "--output", "json", "--no-drills")
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    assert [i["id"] for i in document] == [REAL_NEW, REAL_OLD]
    first = document[0]
    assert first["ran"] == (NOW - dt.timedelta(hours=5)).isoformat() and first["drill"] is False
    assert first["started"] == (NOW - dt.timedelta(hours=5)).isoformat() and first["outcome"] == "rolled_back"


def test_item11_nothing_matching_says_so(state):
    later = NOW + dt.timedelta(hours=1)
    result = runbook("incidents", "--since", later.isoformat())
    assert result.exit_code == 0
    assert result.stdout == ""
    assert result.stderr == f"no incidents in {state} since {_clock(later)} UTC\n"


def test_item11_a_bad_since_names_the_option(state):
    result = runbook("incidents", "--since", "yesterday-ish")
    assert result.exit_code == 2
    assert "Invalid value for --since: 'yesterday-ish' is not a time" in result.stderr
