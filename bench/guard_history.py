"""Benchmark: one guard's history lookup with 10,000 old incidents in the state directory.

Usage: python bench/guard_history.py [INCIDENTS]   (default 10,000; target: ≤ 0.2 s, median of 5)

The cooldown and budget guards ask `History.applications` before every change. The state holds
INCIDENTS journals of ten events each (an applied remediation in every one), last written 2 to 30
days ago, and three written within the hour, one of which applied a change to the target. The
journals are written directly in the journal's line format (the real writer fsyncs every line,
which would make the set-up take minutes). Checks that exactly the recent application is found.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from runbook.record.journal import History, incident_dir
from runbook.model import events as ev

TARGET = "llm/statefulset/vllm-server"
TARGET_SECONDS = 0.2  # a tenth of what reading every journal took; a quiet run measures about 0.07 s
WINDOW = dt.timedelta(hours=1)  # the budget guard's window, the longer of the two


def write_journal(state: Path, incident: str, at: dt.datetime, target: str) -> Path:
    folder = incident_dir(state, incident)
    folder.mkdir(parents=True)
    kinds = [(ev.ALERT_RECEIVED, {"name": "VllmOomSurge", "labels": {"namespace": "llm"}}),
             (ev.RUN_STARTED, {"playbook": "oom-surge"}),
             *[(ev.EVIDENCE, {"kind": "command", "title": "nvidia-smi", "stdout": "FB Memory Usage\n" * 8})] * 4,
             (ev.ACTION_PLANNED, {"target": target, "action": "k8s.scale"}),
             (ev.GUARD_PASSED, {"guard": "cooldown"}),
             (ev.ACTION_APPLIED, {"target": target, "action": "k8s.scale", "before": 3, "after": 1}),
             (ev.RUN_FINISHED, {"outcome": "resolved"})]
    lines = [json.dumps(ev.Event(seq=n, at=at, incident=incident, run="r", type=kind, data=data).to_json(),
                        separators=(",", ":"))
             for n, (kind, data) in enumerate(kinds, start=1)]
    path = folder / "journal.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def build_state(state: Path, count: int, now: dt.datetime) -> dt.datetime:
    """INCIDENTS old journals and three recent ones; returns when the recent application was made."""
    for i in range(count):
        at = now - dt.timedelta(days=2 + i % 28, minutes=i % 997)
        path = write_journal(state, f"{at:%Y%m%d-%H%M%S}-oom-surge-{i:05x}", at, TARGET)
        os.utime(path, (at.timestamp(), at.timestamp()))
    recent = now - dt.timedelta(minutes=20)
    write_journal(state, f"{recent:%Y%m%d-%H%M%S}-oom-surge-recent", recent, TARGET)
    for n in range(2):
        other = now - dt.timedelta(minutes=5 + n)
        write_journal(state, f"{other:%Y%m%d-%H%M%S}-waiting-queue-{n}", other, "llm/statefulset/other")
    return recent


def main() -> int:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    now = dt.datetime.now(dt.timezone.utc)
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        recent = build_state(state, count, now)
        history = History(state)
        times = []
        for _ in range(5):
            started = time.perf_counter()
            found = history.applications(TARGET, since=now - WINDOW)
            times.append(time.perf_counter() - started)
        expected = [dt.datetime.fromisoformat(ev.iso_ms(recent).replace("Z", "+00:00"))]
        if found != expected:
            print(f"wrong answer: {found} instead of {expected}")
            return 2
    median = statistics.median(times)
    met = median <= TARGET_SECONDS
    print(f"guard history, {count} old incidents + 3 recent: median {median:.3f}s "
          f"(runs {' / '.join(f'{t:.3f}' for t in times)}; target ≤ {TARGET_SECONDS:.1f}s) {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
