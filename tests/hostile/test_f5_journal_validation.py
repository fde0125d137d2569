"""Finding 5b: a journal line that parses as JSON but is not an event is skipped with a warning, never a crash.

`runbook run` (its guards read every journal in the window), `incidents` and `rca` each read a
journal holding one such line between good ones: the good events stand, the bad line is named.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from runbook.record import journal as journals
from runbook import settings
from runbook.cli import main
from runbook.clock import utc
from runbook.model import events as ev

TARGET = "llm/statefulset/vllm-server"
INCIDENT = "20260314-031207-oom-surge-ab12"
T = utc(2026, 3, 14, 3, 12, 7)
GOOD = {"seq": 9, "at": "2026-03-14T03:12:07.000Z", "incident": INCIDENT, "run": "run1", "type": "note",
        "step": None, "data": {}}


def _line(**changed) -> str:
    return json.dumps({**GOOD, **changed})


DEEP = 100_000
CORRUPT = {
    "at-a-number": (_line(at=12345), "at"),
    "seq-infinity": (_line().replace('"seq": 9', '"seq": Infinity'), "seq"),
    "nested-100000-deep": (_line(data={}).replace('"data": {}', '"data": {"x": ' + "[" * DEEP + "]" * DEEP + "}"),
                           "nested"),
    "data-a-list": (_line(data=[1, 2]), "data"),
    "type-a-number": (_line(type=5), "type"),
    "at-without-a-zone": (_line(at="2026-03-14T03:12:07"), "time zone"),
    "incident-null": (_line(incident=None), "incident"),
    "step-an-object": (_line(step={}), "step"),
    "seq-a-string": (_line(seq="9"), "seq"),
    "seq-true": (_line(seq=True), "seq"),
    "not-an-object": ("[1, 2, 3]", "object"),
}


@pytest.fixture(params=sorted(CORRUPT), ids=sorted(CORRUPT))
def corrupt(request):
    return CORRUPT[request.param]


@pytest.fixture
def journal_with(corrupt):
    """A journal whose third line is the corrupt one, with good events before and after it."""
    state = settings.state_dir()
    journal = journals.JsonlJournal.for_incident(state, INCIDENT, "run1")
    journal.record(ev.RUN_STARTED, at=T, data={"playbook": "oom-surge"})
    journal.record(ev.ACTION_APPLIED, at=T, step="scale", data={"target": TARGET, "action": "k8s.scale"})
    with open(journal.path, "a", encoding="utf-8") as handle:
        handle.write(corrupt[0] + "\n")
    journal.record(ev.RUN_FINISHED, at=T, data={"outcome": "resolved"})
    journal.close()
    return journal.path, corrupt[1]


def test_f5_read_journal_skips_the_line_and_names_file_line_and_what_is_wrong(journal_with):
    path, what = journal_with
    read = journals.read_journal(path)
    assert [e.type for e in read.events] == [ev.RUN_STARTED, ev.ACTION_APPLIED, ev.RUN_FINISHED]
    assert [e.seq for e in read.events] == [1, 2, 3]
    assert len(read.warnings) == 1
    assert read.warnings[0].startswith(f"{path}:3: skipped an unreadable line") and what in read.warnings[0]


def test_f5_the_guards_history_counts_the_good_lines_around_a_bad_one(journal_with):
    assert journals.History(settings.state_dir()).applications(TARGET, since=T) == [T]


def test_f5_incidents_lists_the_incident_and_warns_of_the_line(journal_with):
    path, _ = journal_with
    result = CliRunner().invoke(main, ["incidents", "--output", "json"])
    assert result.exit_code == 0, result.output
    assert [(i["id"], i["outcome"]) for i in json.loads(result.stdout)] == [(INCIDENT, "resolved")]
    assert f"{path}:3" in result.stderr


def test_f5_rca_writes_the_report_and_warns_of_the_line(journal_with):
    path, _ = journal_with
    result = CliRunner().invoke(main, ["rca", INCIDENT, "-f", "-"])
    assert result.exit_code == 0, result.output
    assert f"{path}:3" in result.stderr and INCIDENT in result.stdout


def test_f5_nesting_is_bounded_before_json_can_recurse():
    with pytest.raises(ValueError, match="nested deeper than"):
        ev.parse_line(b'{"data": ' + b"[" * 1000 + b"]" * 1000 + b"}")


def test_f5_brackets_inside_strings_are_not_nesting():
    line = _line(data={"message": "[" * 5000 + '"\\"{' * 100})
    assert ev.parse_line(line.encode()).data["message"].startswith("[[[")


def test_f5_every_bundled_drill_journal_reads_back_clean(tmp_path, monkeypatch):
    # The bound must leave room for everything runbook itself writes.
    result = CliRunner().invoke(main, ["drill", "oom-surge", "--yes", "--output", "json"])
    assert result.exit_code == 0, result.output
    assert journals.read_journal(json.loads(result.stdout)["journal"]).warnings == []
