"""A real Prometheus on a loopback port, over a TSDB backfilled with the scenario data.

Skipped with the reason when `prometheus` or `promtool` is missing; failing instead under
RUNBOOK_REQUIRE_INTEGRATION=1. One server serves the whole session (about two seconds to build).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.conftest import REQUIRE_INTEGRATION
from tests.processes import die_with_the_tests
from tests.prometheus.data import openmetrics

READY_DEADLINE = 30.0


def need_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        reason = f"`{name}` is not installed (Debian package `prometheus`)"
        if REQUIRE_INTEGRATION:
            pytest.fail(f"RUNBOOK_REQUIRE_INTEGRATION=1 but {reason}")
        pytest.skip(reason)
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrometheusServer:
    """A started `prometheus` process; `stop()` ends it (and only it)."""

    def __init__(self, binary: str, data: Path, workdir: Path, *, flags: Sequence[str] = ()):
        """`flags`: more command-line flags (e.g. a shorter `--query.lookback-delta`)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = workdir / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 15s\n  evaluation_interval: 15s\n")
        self.log = workdir / f"prometheus-{self.port}.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [binary, f"--config.file={config}", f"--storage.tsdb.path={data}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=20y",
                 *flags, "--log.level=warn"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=die_with_the_tests)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_DEADLINE
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.process.returncode}:\n{self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.05)  # waiting for the server to come up, bounded by the deadline
        self.stop()
        raise RuntimeError(f"prometheus was not ready within {READY_DEADLINE:g}s:\n{self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@pytest.fixture(scope="session")
def tsdb(tmp_path_factory) -> Path:
    """Blocks backfilled from the scenario data (read-only for the servers that use copies)."""
    promtool = need_binary("promtool")
    need_binary("prometheus")
    work = tmp_path_factory.mktemp("tsdb")
    source = work / "scenarios.om"
    source.write_text(openmetrics())
    blocks = work / "blocks"
    done = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(blocks)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    source.unlink()
    return blocks


def start_server(tsdb: Path, workdir: Path) -> PrometheusServer:
    data = workdir / "data"
    shutil.copytree(tsdb, data)
    return PrometheusServer(shutil.which("prometheus") or "prometheus", data, workdir)


@pytest.fixture(scope="session")
def prometheus(tsdb, tmp_path_factory) -> Iterator[PrometheusServer]:
    server = start_server(tsdb, tmp_path_factory.mktemp("prometheus"))
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _loopback_without_proxy(monkeypatch):
    """A proxy from the environment must not sit between the tests and their loopback servers."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
