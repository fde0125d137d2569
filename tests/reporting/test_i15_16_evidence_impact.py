"""Issue 15, item 16: each piece of evidence appears once in the body, trimmed with a link to its
full text in the appendix; the impact is told in the alert's own terms (the summed queue, not one
pod's), with units."""

from __future__ import annotations

import datetime as dt
import re

from runbook.drill.run import run_drill
from runbook.engine.operator import AssumeYes
from runbook.record.journal import read_journal
from runbook.model import events as ev
from runbook.reporting.context import build_context
from runbook.reporting.rca import render

AT = dt.datetime(2026, 3, 14, 3, 12, 7, tzinfo=dt.timezone.utc)


def drill_events(name: str, tmp_path) -> list[ev.Event]:
    drill = run_drill(name, state=tmp_path / "state", operator=AssumeYes("alice"))
    return read_journal(drill.journal).events


def section(text: str, title: str) -> str:
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def long_output_journal() -> list[ev.Event]:
    def event(seq, type_, step=None, **data):
        return ev.Event(seq=seq, at=AT, incident="inc", run="r", type=type_, step=step, data=data)

    stdout = "\n".join(f"line {i:03d} of dmesg" for i in range(1, 101))
    return [event(1, ev.RUN_STARTED, playbook="p"),
            event(2, ev.STEP_STARTED, "dmesg", uses="node.run", kind="diagnostic"),
            event(3, ev.EVIDENCE, "dmesg", kind="command", title="dmesg on gpu-node-2", stdout=stdout, exit_code=0),
            event(4, ev.STEP_FINISHED, "dmesg", status="ok", summary="100 lines", kind="diagnostic"),
            event(5, ev.RUN_FINISHED, outcome="resolved", reason="every step finished")]


def test_16_trimmed_evidence_links_to_its_full_text_in_the_appendix():
    events = long_output_journal()
    md = render(events, with_charts=False).text
    body, appendix = md.split("## Appendix", 1)
    assert "### E1. dmesg on gpu-node-2" in body and "line 001 of dmesg" in body
    assert "line 100 of dmesg" not in body  # trimmed
    assert "[full text: A1](#a1)" in body
    assert '<a id="a1"></a>' in appendix and "line 100 of dmesg" in appendix
    html = render(events, fmt="html", with_charts=False).text
    assert '<a href="#A1">full text: A1</a>' in html and 'id="A1"' in html


def test_16_each_evidence_appears_once_in_the_body(tmp_path):
    events = drill_events("oom-surge", tmp_path)
    text = render(events, with_charts=False).text
    body = text.split("## Appendix", 1)[0]
    for item in build_context(events)["evidence"]:
        # (the observe step's title is the start of the restore's, "… at 2 replicas": not counted as it)
        assert len(re.findall(re.escape(item["title"]) + r"(?! at \d+ replicas)", body)) == 1, item["title"]
    # The peaks are the impact's; the root cause does not repeat them.
    assert "peaked at" not in section(text, "Root cause")


def test_16_verification_readings_read_as_stretches(tmp_path):
    events = drill_events("oom-surge", tmp_path)
    evidence = build_context(events)["evidence"]
    [verification] = [e for e in evidence if e["title"] == "verification of oom_failures_per_min < 1"]
    # The restore's own, one per size it came back to (issue 34).
    assert [e["title"] for e in evidence if e["title"].startswith("verification of oom_failures_per_min < 1 at")] == [
        "verification of oom_failures_per_min < 1 at 2 replicas", "verification of oom_failures_per_min < 1 at 3 replicas"]
    lines = verification["text"].splitlines()
    assert len(lines) == 2, lines
    assert re.match(r"03:12:07–03:12:52 +6 +does not hold \(4 readings\)", lines[0]), lines[0]
    assert re.match(r"03:13:07–03:18:07 +0 +holds \(21 readings\)", lines[1]), lines[1]


def test_16_impact_in_the_alerts_own_terms_with_units(tmp_path):
    events = drill_events("waiting-queue", tmp_path)
    [alerts_view] = [e for e in events if e.type == ev.EVIDENCE and e.data.get("detect")]
    [per_pod] = [e for e in events if e.type == ev.EVIDENCE and e.data.get("kind") == "series"
                 and e.data["signal"] == "waiting_requests" and e.data["by"] == ["pod"]]
    [by_pod_now] = [e for e in events if e.type == ev.EVIDENCE and e.step == "waiting-by-pod"]
    total = max([v for s in alerts_view.data["series"] for _, v in s["points"] if v is not None]
                + [sum(s["value"] for s in by_pod_now.data["samples"])])  # the alert's sum, at the alert
    one_pod = max(v for s in per_pod.data["series"] for _, v in s["points"] if v is not None)
    assert total > one_pod  # the alert reads the sum over the pods
    impact = section(render(events, with_charts=False).text, "Impact")
    [headline] = [line for line in impact.splitlines() if "the alert's condition" in line]
    assert f"**{total:g} requests**" in headline, headline
    assert "waiting_requests > 50" in headline and "requests waiting to be scheduled" in headline
    assert re.search(r"held for \*\*\d+m(\d+s)?\*\*", impact), impact
    assert f"**{one_pod:g} requests**" not in headline


def test_16_every_peak_carries_its_unit(tmp_path):
    events = drill_events("oom-surge", tmp_path)
    impact = section(render(events, with_charts=False).text, "Impact")
    [headline] = [line for line in impact.splitlines() if "the alert's condition" in line]
    assert "per minute**" in headline and "CUDA out-of-memory failures per minute" in headline
    assert re.search(r"`kv_cache_usage`[^\n]*\*\*0\.\d+ \(\d+%\)\*\*", impact), impact
