"""A real Prometheus for replayed drills: one-second lookback, over a TSDB backfilled elsewhere.

Started and stopped like the Prometheus suite's server (`tests.prometheus.conftest`).
"""

from __future__ import annotations

from pathlib import Path

from tests.prometheus.conftest import PrometheusServer
from tests.realstack import timeline


class SteppedPrometheus(PrometheusServer):
    """A Prometheus whose instant answers look back one sample interval only, so a series that
    stops is absent a second later, as in the drill (the default 5 minutes would keep it)."""

    def __init__(self, binary: str, data: Path, workdir: Path):
        super().__init__(binary, data, workdir, flags=[f"--query.lookback-delta={timeline.GRID:g}s"])
