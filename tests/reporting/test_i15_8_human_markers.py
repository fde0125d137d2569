"""Issue 15, item 8 (the templates' part): every "for the humans" section of both report formats is
wrapped in `<!-- runbook:human begin NAME -->` … `<!-- runbook:human end NAME -->`, so what people
write there can be kept when the report is written again."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runbook.record.journal import read_journal
from runbook.reporting.rca import render

FIXTURE = Path(__file__).parent / "fixtures" / "oom-surge.jsonl"
NAMES = ["impact", "root-cause", "improvements-short", "improvements-mid", "improvements-long", "lessons"]
MARKER = re.compile(r"<!-- runbook:human (begin|end) ([a-z0-9-]+) -->")


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_8_each_human_section_is_marked_once_in_order(fmt):
    text = render(read_journal(FIXTURE).events, fmt=fmt, with_charts=False).text
    marks = MARKER.findall(text)
    assert marks == [(kind, name) for name in NAMES for kind in ("begin", "end")]
    for name in NAMES:
        inside = text.split(f"<!-- runbook:human begin {name} -->", 1)[1].split(f"<!-- runbook:human end {name} -->")[0]
        assert inside.strip(), f"the {name} section holds no prompt for the humans"
