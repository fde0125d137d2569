"""Finding 3 of issue 13, the report's files: rca.md and its charts are 0600 and never written through a link.

The CLI's umask covers the commands; `write_report` is also called as a library (drills, the
webhook), so it makes its files private itself.
"""

from __future__ import annotations

import datetime as dt
import os
import stat

import pytest

from runbook.errors import RunbookError
from runbook.record.journal import JsonlJournal
from runbook.model import events as ev
from runbook.reporting.rca import write_report

AT = dt.datetime(2026, 3, 14, 3, 12, tzinfo=dt.timezone.utc)


def journal(tmp_path):
    path = tmp_path / "incidents" / "inc-1" / "journal.jsonl"
    j = JsonlJournal(path, incident="inc-1", run="r1")
    j.record(ev.RUN_STARTED, at=AT, data={"playbook": "oom-surge", "params": {}})
    j.record(ev.RUN_FINISHED, at=AT + dt.timedelta(minutes=3), data={"outcome": "resolved"})
    j.close()
    return path


def test_f3_the_report_is_private_whatever_the_umask(tmp_path):
    path = journal(tmp_path)
    old = os.umask(0o022)
    try:
        out = write_report(path, path.parent / "report" / "rca.md")
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert stat.S_IMODE(out.parent.stat().st_mode) == 0o700
    assert "oom-surge" in out.read_text()


def test_f3_a_link_planted_at_the_report_is_refused_and_its_target_untouched(tmp_path):
    path = journal(tmp_path)
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    planted = path.parent / "rca.md"
    planted.symlink_to(target)
    with pytest.raises(RunbookError) as caught:
        write_report(path, planted)
    assert "symbolic link" in str(caught.value) and str(planted) in str(caught.value)
    assert target.read_text() == "keep me\n"
