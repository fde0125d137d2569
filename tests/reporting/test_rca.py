"""The RCA report: timeline, milestones, actions, evidence, charts, both formats, redaction."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from runbook.cli import main
from runbook.record.journal import read_journal
from runbook.model import events as ev
from runbook.reporting import charts as chart_drawing
from runbook.reporting.context import build_context
from runbook.reporting.rca import render

HERE = Path(__file__).parent
FIXTURE = HERE / "fixtures" / "oom-surge.jsonl"
UPDATE = os.environ.get("RUNBOOK_UPDATE_GOLDEN") == "1"  # regenerate the golden files
PNG = b"\x89PNG\r\n\x1a\n"


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_golden_report(fmt):
    events = read_journal(FIXTURE).events
    text = render(events, fmt=fmt, with_charts=False).text  # chart bytes vary by matplotlib release
    golden = HERE / "golden" / f"rca.{fmt}"
    if UPDATE:
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8"), f"run with RUNBOOK_UPDATE_GOLDEN=1 to regenerate {golden}"


def drill_and_report(scenario: str, *extra: str) -> tuple[dict, Path, list[ev.Event]]:
    document = json.loads(invoke("drill", scenario, "--yes", "--output", "json").stdout)
    result = invoke("rca", document["incident_id"], *extra)
    assert result.exit_code == 0, result.output
    return document, Path(result.stdout.strip()), read_journal(Path(document["journal"])).events


@pytest.mark.parametrize("scenario", ["oom-surge", "waiting-queue", "zombie-process", "lingering-cuda-context"])
def test_each_drill_gets_a_full_markdown_report(scenario):
    document, path, events = drill_and_report(scenario)
    text = path.read_text()
    rows = re.findall(r"^\| (\d\d:\d\d:\d\d) \| (T[+-][\d:]+) \| [^|]+ \| (.*) \|$", text, flags=re.M)
    timeline = text.split("## Timeline", 1)[1].split("## Actions", 1)[0]
    # one row per kept event, the engine's chatter folded into its step (item 15)
    assert len(re.findall(r"^\| \d\d:\d\d:\d\d \|", timeline, flags=re.M)) == len(build_context(events)["timeline"])
    stamps = [row[0] for row in rows]
    assert stamps == sorted(stamps)
    assert "Time to detect:" in text and "Time to resolve:" in text  # each from the onset (item 14)
    applied = [e for e in events if e.type == ev.ACTION_APPLIED]
    for event in applied:
        assert event.data["summary"] in text
    assert "applied" in text.split("## Actions", 1)[1].split("## Charts", 1)[0]
    charts = sorted((path.parent / "charts").glob("*.png"))
    assert charts, "no chart was written"
    for chart in charts:
        assert chart.read_bytes().startswith(PNG)
        assert f"](charts/{chart.name})" in text


def test_the_oom_report_shows_the_change_and_the_nvidia_smi_output():
    _, path, _ = drill_and_report("oom-surge")
    text = path.read_text()
    assert "--max-model-len 7372 → --max-model-len 6635" in text
    assert "`--max-model-len` 7372 → 6635" in text
    assert "FB Memory Usage" in text
    assert "Make `--max-model-len` 6635 permanent" in text


def test_charts_mark_the_alert_actions_and_recovery():
    events = read_journal(FIXTURE).events
    context = build_context(events)
    kinds = [m["kind"] for m in context["markers"]]
    assert kinds[0] == "alert" and "action" in kinds and kinds[-1] == "recovered"
    [chart] = [c for c in chart_drawing.draw_all(events, context["markers"]) if c.signal == "oom_failures_per_min"]
    from io import BytesIO

    from matplotlib import image

    pixels = image.imread(BytesIO(chart.png), format="png")[:, :, :3]
    for color in ("#c0392b", "#e67e22", "#27ae60"):  # alert, action, recovered
        rgb = [int(color[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        close = (abs(pixels - rgb) < 0.03).all(axis=2)
        assert close.sum() > 20, f"no {color} marker line in the chart"  # lines at one instant overlap


def test_html_is_one_file_with_the_charts_inside():
    document, path, _ = drill_and_report("oom-surge", "--format", "html")
    html = path.read_text()
    assert path.suffix == ".html"
    assert html.count('src="data:image/png;base64,') >= 1
    assert not re.search(r'src="(?!data:)', html) and "<link" not in html
    assert "7372 → --max-model-len 6635" in html


def test_a_refused_incident_still_renders_saying_why():
    document, path, _ = drill_and_report("waiting-queue-all-unready")
    text = path.read_text()
    assert "**refused**" in text
    assert "### Refused" in text and "guard **min_ready**" in text and "would leave 0 ready pod(s)" in text
    assert "### Escalated" in text


def test_a_rolled_back_incident_renders_the_rollback(tmp_path):
    events = read_journal(FIXTURE).events
    assert build_context(events)["rollbacks"] == []
    from runbook.clock import utc

    last = events[-1]
    extra = ev.Event(seq=last.seq + 1, at=utc(2026, 3, 14, 3, 20), incident=last.incident, run=last.run,
                     type=ev.ROLLBACK_APPLIED, step="lower-max-model-len",
                     data={"target": "llm/statefulset/vllm-server", "restored": {"--max-model-len": "7372"}})
    text = render([*events, extra], with_charts=False).text
    assert "### Rolled back" in text and "restored to --max-model-len 7372" in text


SECRETS = ["Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.abcDEF123456", "hunter2-very-secret",
           "u+abcdefghijklmnopqrstuvwxyz012345", "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"]


def test_planted_secrets_never_survive_either_format(tmp_path):
    """The journal is written raw here, as if its writer had failed to redact: the report must still."""
    lines = FIXTURE.read_text().splitlines()
    planted = json.loads(lines[3])
    planted["data"] = {"kind": "command", "title": "env in vllm-server-0", "pod": "vllm-server-0",
                       "stdout": f"Authorization: {SECRETS[0]}\npassword={SECRETS[1]}\n"
                                 f"PAGERDUTY_API_TOKEN={SECRETS[2]}\nAWS_ACCESS_KEY_ID={SECRETS[3]}\n"
                                 f"AWS_SECRET_ACCESS_KEY={SECRETS[4]}\n", "exit_code": 0}
    lines.insert(4, json.dumps(planted))
    journal = tmp_path / "journal.jsonl"
    journal.write_text("\n".join(lines) + "\n")
    events = read_journal(journal).events
    for fmt in ("md", "html"):
        text = render(events, fmt=fmt, with_charts=False).text
        assert "env in vllm-server-0" in text
        for secret in SECRETS:
            assert secret not in text, (fmt, secret)
            assert secret.split()[-1] not in text


def test_a_user_template_replaces_the_bundled_one(tmp_path):
    template = tmp_path / "mine.md.j2"
    template.write_text("{{ incident }}: {{ status }} after {{ timeline | length }} events\n")
    result = invoke("rca", str(FIXTURE), "--template", str(template), "-f", "-")
    assert result.exit_code == 0
    assert re.fullmatch(r"\S+: resolved after \d+ events\n", result.stdout)


def test_a_template_with_a_missing_value_is_a_clear_error(tmp_path):
    template = tmp_path / "bad.md.j2"
    template.write_text("{{ no_such_value }}\n")
    result = invoke("rca", str(FIXTURE), "--template", str(template), "-f", "-")
    assert result.exit_code == 3 and "no_such_value" in result.stderr
