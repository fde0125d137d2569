"""Benchmark: render the RCA report of a 10,000-event journal (target: under 2 seconds).

Usage: python bench/rca_render.py [EVENTS]. Prints the median of 3 runs for Markdown and HTML,
with and without charts, against the target.
"""

from __future__ import annotations

import datetime as dt
import statistics
import sys
import tempfile
import time
from pathlib import Path

from runbook.record import redaction
from runbook.clock import FakeClock, utc
from runbook.record.journal import JsonlJournal, read_journal
from runbook.model import events as ev
from runbook.reporting.rca import render

TARGET_SECONDS = 2.0


def make_journal(path: Path, count: int) -> None:
    clock = FakeClock(utc(2026, 3, 14, 3, 12, 7))
    journal = JsonlJournal(path, incident="bench", run="r")
    journal.record(ev.ALERT_RECEIVED, at=clock.now(), data={"name": "VllmOomSurge", "labels": {"namespace": "llm"}})
    journal.record(ev.RUN_STARTED, at=clock.now(), data={"playbook": "oom-surge", "title": "OOM", "severity": "P1"})
    for i in range(count - 4):
        clock.advance(0.5)
        step = f"s{i // 4}"
        kind = i % 4
        if kind == 0:
            journal.record(ev.STEP_STARTED, at=clock.now(), step=step, data={"uses": "prom.query"})
        elif kind == 1:
            journal.record(ev.EVIDENCE, at=clock.now(), step=step, data={
                "kind": "samples", "title": f"waiting_requests {i}", "signal": "waiting_requests",
                "samples": [{"labels": {"pod": f"vllm-server-{p}"}, "value": float(p + i % 7)} for p in range(4)]})
        elif kind == 2:
            journal.record(ev.EVIDENCE, at=clock.now(), step=step, data={
                "kind": "command", "title": f"ps in pod {i}", "stdout": "PID PPID STAT ELAPSED COMMAND\n" * 30})
        else:
            journal.record(ev.STEP_FINISHED, at=clock.now(), step=step, data={"status": "ok", "summary": "fine",
                                                                               "kind": "diagnostic"})
    start = utc(2026, 3, 14, 3, 0)
    points = [[ev.iso_ms(start + dt.timedelta(seconds=10 * k)), float(k % 50)] for k in range(120)]
    journal.record(ev.EVIDENCE, at=clock.now(), data={"kind": "series", "title": "history", "signal": "waiting_requests",
                                                      "series": [{"labels": {}, "points": points}]})
    journal.record(ev.RUN_FINISHED, at=clock.now(), data={"outcome": "resolved", "reason": "bench"})
    journal.close()


def main() -> int:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "journal.jsonl"
        make_journal(path, count)
        failed = False
        for fmt in ("md", "html"):
            for charts in (False, True):
                times = []
                for _ in range(3):
                    # Each run starts cold: no redaction remembered from the previous one.
                    redaction._redact_short.cache_clear()
                    redaction.looks_secret.cache_clear()
                    started = time.perf_counter()
                    events = read_journal(path).events
                    render(events, fmt=fmt, with_charts=charts)
                    times.append(time.perf_counter() - started)
                median = statistics.median(times)
                met = median <= TARGET_SECONDS
                failed |= not met
                print(f"rca {fmt:4} charts={'yes' if charts else 'no ':3} {len(events):6} events: "
                      f"median {median:.2f}s (target ≤ {TARGET_SECONDS:.1f}s) {'met' if met else 'NOT met'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
