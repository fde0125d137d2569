"""A drill's course of the incident placed on the wall clock, in a real Prometheus: its fix lands
a given number of seconds from now, for runs of the real CLI (`runbook run`, `runbook serve`).
"""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path

from tests.prometheus.conftest import need_binary
from tests.realstack import timeline
from tests.realstack.stepped import SteppedPrometheus


def prometheus_on_wall_time(drill: timeline.Played, signal: str, work: Path, *,
                            fix_lands_after: float) -> tuple[SteppedPrometheus, dt.datetime]:
    """Prometheus holding `drill`'s timeline shifted so that `signal` falls below 1
    `fix_lands_after` seconds from now (with the hour and the day before, for comparisons); and
    the wall time the drill's data starts at."""
    promtool, binary = need_binary("promtool"), need_binary("prometheus")
    fixed = timeline.first_time_below(drill, signal, 1)
    start = dt.datetime.now(dt.timezone.utc)
    shift = start + dt.timedelta(seconds=fix_lands_after) - fixed
    begin = fixed - dt.timedelta(seconds=fix_lands_after)  # the drill time written at `start`
    hour, day = dt.timedelta(hours=1), dt.timedelta(days=1)
    windows = [(begin - day - hour - dt.timedelta(minutes=10), begin - day + dt.timedelta(minutes=10)),
               (begin - hour - dt.timedelta(minutes=10), fixed + dt.timedelta(minutes=16))]
    source = work / "wall.om"
    source.write_text(timeline.openmetrics([drill], shift=shift, windows=windows))
    done = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(work / "data")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return SteppedPrometheus(binary, work / "data", work), start
