"""Benchmark: what one `runbook triage` asks of Prometheus, at a quiet hour and during an incident.

Usage: python bench/triage_samples.py   (needs `prometheus` and `promtool`; target: at quiet ≥ 5× fewer samples)

A real Prometheus backfilled with the tests' scenario data (tests/prometheus/data.py) answers through
a proxy that asks it for its query stats (`stats=all`) and adds up the samples it evaluated
(`totalQueryableSamples`), query by query. Each triage runs twice in the same run: as it is (an
instant query per detect, the range only for one that holds) and as it was (a 241-point range
query for every detect: `runbook.triage.evaluate.INSTANT_FIRST = False`). Counted, not timed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from click.testing import CliRunner  # noqa: E402

from runbook.cli import main as cli  # noqa: E402
from runbook.triage import evaluate as evaluation  # noqa: E402
from tests.prometheus.conftest import start_server  # noqa: E402
from tests.prometheus.data import SCENARIOS, openmetrics  # noqa: E402
from tests.prometheus.servers import CountingProxy  # noqa: E402

TARGET_RATIO = 5.0


def blocks(work: Path) -> Path:
    source = work / "scenarios.om"
    source.write_text(openmetrics())
    out = work / "blocks"
    done = subprocess.run([shutil.which("promtool") or "promtool", "tsdb", "create-blocks-from", "openmetrics",
                           str(source), str(out)], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"promtool failed: {done.stderr[-1000:]}")
    return out


def counted(url: str, at: str, *, instant_first: bool) -> tuple[int, int, int, int]:
    """(instant queries, range queries, samples, triage's exit code) of one triage at `at`."""
    evaluation.INSTANT_FIRST = instant_first
    try:
        with CountingProxy(url) as proxy:
            result = CliRunner().invoke(cli, ["triage", "--prometheus-url", proxy.url, "--at", at, "-o", "json"])
            json.loads(result.stdout)  # a whole answer, or this raises
    finally:
        evaluation.INSTANT_FIRST = True
    return proxy.asked("query"), proxy.asked("query_range"), proxy.samples(), result.exit_code


def main() -> int:
    if not (shutil.which("prometheus") and shutil.which("promtool")):
        print("needs prometheus and promtool (Debian package `prometheus`)")
        return 2
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    scenario = SCENARIOS["oom-surge"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        server = start_server(blocks(work), work)
        try:
            rows = {}
            for name, at in (("quiet", scenario.quiet_at.isoformat()), ("incident", scenario.at.isoformat())):
                before = counted(server.url, at, instant_first=False)
                after = counted(server.url, at, instant_first=True)
                rows[name] = (before, after)
        finally:
            server.stop()
    for name, (before, after) in rows.items():
        print(f"triage at {name} (oom-surge's data, exit {after[3]}): before {before[0]} instant + {before[1]} range "
              f"queries, {before[2]:,} samples; now {after[0]} instant + {after[1]} range queries, "
              f"{after[2]:,} samples ({before[2] / max(after[2], 1):.1f}× fewer)")
    (before, after) = rows["quiet"]
    ratio = before[2] / max(after[2], 1)
    met = ratio >= TARGET_RATIO and after[1] == 0
    print(f"triage at quiet: {ratio:.1f}× fewer samples than a range query per detect, no range query "
          f"(target ≥ {TARGET_RATIO:.0f}× fewer) {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
