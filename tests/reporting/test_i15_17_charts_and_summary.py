"""Issue 15, item 17: charts titled with what the signal means and its unit, the detect threshold
drawn, change markers that do not overlap (numbered, listed below), gaps shown as gaps, the window
starting before the onset; Markdown rendered inside the HTML; improvements deduplicated; a summary
that names the cause and the fix, and why a failed run failed."""

from __future__ import annotations

import datetime as dt
import math
import re
from io import BytesIO

import pytest

from runbook.drill.run import run_drill
from runbook.engine.operator import AssumeYes
from runbook.record.journal import read_journal
from runbook.model import events as ev
from runbook.reporting import charts
from runbook.reporting.context import build_context
from runbook.reporting.rca import render

AT = dt.datetime(2026, 3, 14, 3, 12, 7, tzinfo=dt.timezone.utc)
THRESHOLD_RGB = [int(charts.THRESHOLD_COLOR[i:i + 2], 16) / 255 for i in (1, 3, 5)]


@pytest.fixture(scope="module")
def oom(tmp_path_factory) -> list[ev.Event]:
    drill = run_drill("oom-surge", state=tmp_path_factory.mktemp("state"), operator=AssumeYes("alice"))
    return read_journal(drill.journal).events


def plan_of(events, signal):
    context = build_context(events)
    [plan] = [p for p in charts.plans(events, context["markers"]) if p.signal == signal]
    return plan, context


def test_17_a_chart_is_titled_with_the_signals_meaning_and_unit(oom):
    plan, _ = plan_of(oom, "oom_failures_per_min")
    assert "CUDA out-of-memory failures per minute" in plan.title and "oom_failures_per_min" in plan.title
    assert plan.ylabel == "per minute"
    kv, _ = plan_of(oom, "kv_cache_usage")
    assert kv.ylabel == "ratio" and "KV cache occupancy" in kv.title


def test_17_the_detect_threshold_is_drawn_on_the_alerts_own_line(oom):
    plan, _ = plan_of(oom, "oom_failures_per_min")
    assert plan.threshold == 0.0 and "oom_failures_per_min > 0" in plan.threshold_label
    assert any(line.alerts_view for line in plan.lines)  # the sum the alert reads, beside the per-pod lines
    assert sum(not line.alerts_view for line in plan.lines) == 3
    from matplotlib import image

    pixels = image.imread(BytesIO(charts.draw(plan)), format="png")[:, :, :3]
    close = (abs(pixels - THRESHOLD_RGB) < 0.03).all(axis=2)
    assert close.sum() > 100, "no threshold line in the chart"
    other, _ = plan_of(oom, "kv_cache_usage")
    assert other.threshold is None


def test_17_markers_are_numbered_and_their_labels_never_overlap(oom):
    plan, context = plan_of(oom, "oom_failures_per_min")
    markers = context["markers"]
    assert [m["number"] for m in markers] == list(range(1, len(markers) + 1))
    assert [m["kind"] for m in markers][:2] == ["onset", "alert"]
    # The alert and three changes share one instant: their numbers go on separate rows.
    placed = plan.marker_labels
    for a in placed:
        for b in placed:
            if a is not b and a.row == b.row:
                assert abs(a.x - b.x) >= charts.LABEL_GAP, (a, b)
    text = render(oom, with_charts=False).text
    listing = text.split("## Charts", 1)[1].split("\n## ", 1)[0]
    for m in markers:
        assert f"{m['number']}. {m['label']} at {m['clock']}" in listing


def test_17_gaps_are_shown_as_gaps():
    start = AT - dt.timedelta(minutes=5)
    points = [[ev.iso_ms(start + dt.timedelta(seconds=10 * k)), None if 10 <= k < 15 else 5.0] for k in range(30)]
    del points[20:25]  # no sample at all for 50 s: an absent series
    series = ev.Event(seq=1, at=AT, incident="i", run="r", type=ev.EVIDENCE, step=None,
                      data={"kind": "series", "signal": "waiting_requests", "step": 10.0, "start": ev.iso_ms(start),
                            "end": ev.iso_ms(AT), "series": [{"labels": {}, "points": points}]})
    [plan] = charts.plans([series], [])
    values = plan.lines[0].values
    assert sum(math.isnan(v) for v in values) >= 6  # the five null samples, and a break where samples are missing
    assert not math.isnan(values[0]) and not math.isnan(values[-1])


def test_17_the_window_starts_before_the_onset(oom):
    plan, context = plan_of(oom, "oom_failures_per_min")
    onset = context["milestones"][0]["at"]
    assert plan.xlim[0] < onset - dt.timedelta(minutes=2)
    for other in charts.plans(oom, context["markers"]):
        assert other.xlim == plan.xlim  # every chart on the same clock


def test_17_markdown_is_rendered_inside_the_html(oom):
    html = render(oom, fmt="html", with_charts=False).text
    outside_pre = re.sub(r"<pre>.*?</pre>", "", html, flags=re.S)
    assert "`" not in outside_pre
    assert "<code>--max-model-len</code> 6635 permanent" in html


def test_17_improvements_are_deduplicated(oom):
    improvements = build_context(oom)["improvements"]
    short = improvements["short"]
    assert sum("permanent in the manifest" in item for item in short) == 1, short
    assert any("6635" in item for item in short)  # the one that says the value stays
    everything = [item for h in ("short", "mid", "long") for item in improvements[h]]
    assert len(everything) == len(set(everything))


def test_17_the_summary_names_the_cause_and_the_fix(oom):
    summary = build_context(oom)["summary"]
    assert "--max-model-len too close to the GPU memory water line" in summary
    assert "set --max-model-len of statefulset/vllm-server/vllm 7372 → 6635" in summary
    assert "resolved" in summary and "stopped holding at 03:13:" in summary


def test_17_the_summary_says_why_a_refused_run_stopped(tmp_path):
    drill = run_drill("waiting-queue-all-unready", state=tmp_path / "state", operator=AssumeYes("alice"))
    summary = build_context(read_journal(drill.journal).events)["summary"]
    assert "refused" in summary and "min_ready" in summary and "would leave 0 ready pod(s)" in summary


def test_17_the_summary_says_why_a_failed_run_failed():
    def event(seq, type_, step=None, **data):
        return ev.Event(seq=seq, at=AT + dt.timedelta(seconds=seq), incident="i", run="r", type=type_, step=step,
                        data=data)

    events = [event(1, ev.RUN_STARTED, playbook="oom-surge", root_cause_hints=["the KV cache is too small"]),
              event(2, ev.ACTION_APPLIED, "lower", action="k8s.set_arg", summary="set --max-model-len 7372 → 6635",
                    target="llm/statefulset/vllm-server", before={}, after={}),
              event(3, ev.VERIFY_FAILED, "observe", summary="oom_failures_per_min < 1 did not hold within 5m"),
              event(4, ev.ROLLBACK_APPLIED, "lower", target="llm/statefulset/vllm-server",
                    restored={"--max-model-len": "7372"}),
              event(5, ev.RUN_FINISHED, outcome="rolled_back", reason="oom_failures_per_min < 1 did not hold within 5m")]
    summary = build_context(events)["summary"]
    assert "rolled back" in summary and "did not hold within 5m" in summary
    assert "the KV cache is too small" in summary
