"""A real Prometheus for replayed drills: one-second lookback, over a TSDB backfilled elsewhere.

Started and stopped like the Prometheus suite's server (`tests.prometheus.conftest`).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.prometheus.conftest import PrometheusServer, free_port
from tests.realstack import timeline


class SteppedPrometheus(PrometheusServer):
    """A Prometheus whose instant answers look back one sample interval only, so a series that
    stops is absent a second later, as in the drill (the default 5 minutes would keep it)."""

    def __init__(self, binary: str, data: Path, workdir: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = workdir / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 15s\n")
        self.log = workdir / f"prometheus-{self.port}.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [binary, f"--config.file={config}", f"--storage.tsdb.path={data}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=20y",
                 f"--query.lookback-delta={timeline.GRID:g}s", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._wait_ready()
