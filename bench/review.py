"""Benchmark: `runbook review` over 10,000 incidents written in the last 30 days.

Usage: python bench/review.py [INCIDENTS]   (default 10,000; target: ≤ 2 s, median of 3)

The journals are copies of what the engine really wrote for three drills (oom-surge resolved,
waiting-queue-all-unready refused and escalated, zombie-process resolved; 30–70 KB each, most of it
series evidence), renamed as real incidents and moved onto the days of the window by replacing their
date. Timed: reading every journal, the review's document and its text, as `runbook review -o text`
does in-process; the whole command in a fresh interpreter once, as a figure.
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runbook.engine.operator import AssumeYes
from runbook.drill.run import run_drill
from runbook.record.journal import journal_paths
from runbook.reporting import review, review_render
from runbook.reporting.review_facts import from_journal

TARGET_SECONDS = 2.0
SCENARIOS = ("oom-surge", "waiting-queue-all-unready", "zombie-process")


def templates(folder: Path) -> list[tuple[bytes, bytes]]:
    """(journal bytes, the date its events carry) of each drill, as the engine wrote them."""
    folder.mkdir(mode=0o700)
    out = []
    for name in SCENARIOS:
        done = run_drill(name, state=folder, operator=AssumeYes("bench"))
        out.append((done.journal.read_bytes(), done.scenario.t0.strftime("%Y-%m-%dT").encode()))
    return out


def build_state(state: Path, count: int, now: dt.datetime, made: list[tuple[bytes, bytes]]) -> int:
    total = 0
    for i in range(count):
        raw, day = made[i % len(made)]
        at = now - dt.timedelta(days=1 + i % 28, minutes=i % 997)  # its date stays inside the window
        folder = state / "incidents" / f"{at:%Y%m%d-%H%M%S}-{i:05x}"
        folder.mkdir(parents=True)
        data = raw.replace(day, at.strftime("%Y-%m-%dT").encode())
        (folder / "journal.jsonl").write_bytes(data)
        total += len(data)
    return total


def review_text(state: Path, since: dt.datetime, until: dt.datetime) -> tuple[dict, str]:
    facts = [from_journal(p) for p in journal_paths(state, modified_since=since)]
    document = review.build(facts, since=since, until=until)
    return document, review_render.text(document)


def main() -> int:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    with tempfile.TemporaryDirectory() as tmp:
        made = templates(Path(tmp) / "drills")
        state = Path(tmp) / "state"
        state.mkdir(mode=0o700)
        size = build_state(state, count, now, made)
        since = now - dt.timedelta(days=30)
        times = []
        for _ in range(3):
            started = time.perf_counter()
            document, text = review_text(state, since, dt.datetime.now(dt.timezone.utc))
            times.append(time.perf_counter() - started)
        if document["incidents"] != count or not text.startswith("Review "):
            print(f"wrong answer: {document['incidents']} incidents reviewed instead of {count}")
            return 2
        env = {**os.environ, "RUNBOOK_STATE_DIR": str(state)}
        started = time.perf_counter()
        cli = subprocess.run([sys.executable, "-m", "runbook", "review", "--since", "30d"], env=env,
                             capture_output=True, text=True, timeout=120)
        whole = time.perf_counter() - started
        if cli.returncode != 0:
            print(f"runbook review failed: {cli.stderr[-500:]}")
            return 2
    median = statistics.median(times)
    met = median <= TARGET_SECONDS
    print(f"review, {count} incidents ({size / 2**20:.0f} MiB of journals) in 30 days: `runbook review` "
          f"as a process {whole:.2f}s (a figure)")
    print(f"review, {count} incidents in 30 days: median {median:.2f}s (runs {' / '.join(f'{t:.2f}' for t in times)}; "
          f"target ≤ {TARGET_SECONDS:.0f}s) {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
