"""Issue 15, item 8: `runbook rca` keeps what people wrote in the report's "for the humans" sections.

The sections sit between `<!-- runbook:human begin NAME -->` and `<!-- runbook:human end NAME -->`;
a report whose human text cannot be carried over is not overwritten without --force.
"""

from __future__ import annotations

import json

import pytest

from runbook.errors import InvalidInput
from runbook.reporting import human_sections
from tests.cli.helpers import runbook

LESSONS = ("<!-- runbook:human begin lessons -->\n- What went well: the drill found it in 2 minutes\n"
           "- What went wrong: nobody had run it before\n<!-- runbook:human end lessons -->")


@pytest.fixture
def drilled(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNBOOK_STATE_DIR", str(tmp_path / "state"))
    done = runbook("drill", "waiting-queue", "--yes", "-o", "json")
    assert done.exit_code == 0, done.stderr
    document = json.loads(done.stdout)
    return document["incident_id"], tmp_path / "state" / "incidents" / document["incident_id"]


def _edit(text: str, name: str, body: str) -> str:
    begin, end = f"<!-- runbook:human begin {name} -->", f"<!-- runbook:human end {name} -->"
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    assert rest, f"the report has no {name} section"
    return head + begin + body + end + tail


def test_item8_regenerating_keeps_what_people_wrote(drilled):
    incident, folder = drilled
    report = folder / "rca.md"
    edited = _edit(report.read_text(encoding="utf-8"), "lessons",
                   "\n- What went well: the drill found it in 2 minutes\n- What went wrong: nobody had run it before\n")
    edited = _edit(edited, "impact", "\nAbout 300 users saw 503s for 3 minutes.\n")
    report.write_text(edited, encoding="utf-8")
    result = runbook("rca", incident)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == f"{report}\n"
    assert result.stderr == "kept what people wrote in rca.md: impact, lessons\n"
    text = report.read_text(encoding="utf-8")
    assert LESSONS in text
    assert "<!-- runbook:human begin impact -->\nAbout 300 users saw 503s for 3 minutes.\n" in text
    assert text.count("runbook:human begin") == edited.count("runbook:human begin")
    again = runbook("rca", incident)  # nothing lost the second time either
    assert again.exit_code == 0 and report.read_text(encoding="utf-8") == text


def test_item8_the_html_report_keeps_its_sections_too(drilled):
    incident, folder = drilled
    assert runbook("rca", incident, "-o", "html").exit_code == 0
    report = folder / "rca.html"
    report.write_text(_edit(report.read_text(encoding="utf-8"), "root-cause",
                            "<p>--max-model-len 7372 left no KV-cache headroom.</p>"), encoding="utf-8")
    result = runbook("rca", incident, "-o", "html")
    assert result.exit_code == 0, result.stderr
    assert result.stderr == "kept what people wrote in rca.html: root-cause\n"
    assert ("<!-- runbook:human begin root-cause --><p>--max-model-len 7372 left no KV-cache headroom.</p>"
            "<!-- runbook:human end root-cause -->") in report.read_text(encoding="utf-8")


def test_item8_a_report_with_nothing_to_carry_over_needs_force(drilled):
    incident, folder = drilled
    report = folder / "rca.md"
    report.write_text("# our postmortem, written by hand\n", encoding="utf-8")
    result = runbook("rca", incident)
    assert result.exit_code == 3
    assert result.stdout == ""
    assert result.stderr == (f"Error: {report} has no <!-- runbook:human begin NAME --> sections to keep (written "
                             "by hand, or by an older runbook): overwriting it would lose what people wrote; pass "
                             "--force to overwrite it, or write the report elsewhere with -f FILE\n")
    assert report.read_text(encoding="utf-8") == "# our postmortem, written by hand\n"
    forced = runbook("rca", incident, "--force")
    assert forced.exit_code == 0 and report.read_text(encoding="utf-8").startswith("# RCA: ")


def test_item8_a_broken_marker_is_refused_with_its_line(drilled):
    incident, folder = drilled
    report = folder / "rca.md"
    text = report.read_text(encoding="utf-8").replace("<!-- runbook:human end lessons -->", "")
    report.write_text(text, encoding="utf-8")
    line = text[:text.index("<!-- runbook:human begin lessons -->")].count("\n") + 1
    result = runbook("rca", incident)
    assert result.exit_code == 3
    assert result.stderr == (f"Error: {report}:{line}: <!-- runbook:human begin lessons --> has no "
                             "<!-- runbook:human end lessons --> after it; put the end marker back after your text "
                             "(or pass --force to overwrite the report)\n")
    assert report.read_text(encoding="utf-8") == text


def test_item8_a_section_the_new_report_has_no_place_for_is_never_dropped():
    old = "a\n<!-- runbook:human begin notes -->\nmine\n<!-- runbook:human end notes -->\n"
    new = "b\n<!-- runbook:human begin lessons -->\n-\n<!-- runbook:human end lessons -->\n"
    with pytest.raises(InvalidInput, match=r"^rca.md: the new report has no place for the section notes that "
                                           r"rca.md holds; pass --force"):
        human_sections.carry_over(old, new, where="rca.md")


def test_item8_carry_over_changes_only_the_sections():
    old = ("old header\n<!-- runbook:human begin impact -->\nours\n<!-- runbook:human end impact -->\nold timeline\n")
    new = ("new header\n<!-- runbook:human begin impact -->\n_For the humans_\n<!-- runbook:human end impact -->\n"
           "new timeline\n")
    merged = human_sections.carry_over(old, new, where="rca.md")
    assert merged.text == ("new header\n<!-- runbook:human begin impact -->\nours\n<!-- runbook:human end impact -->\n"
                           "new timeline\n")
    assert merged.kept == ("impact",)
