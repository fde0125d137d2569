"""Fixtures: every drill played once, one Prometheus backfilled with all their timelines, one test
API server, one sshd per GPU node and the oracle their tools ask — all for the whole session.

Skipped with the reason when a binary or `websockets` is missing; failing instead under
RUNBOOK_REQUIRE_INTEGRATION=1 (as the other integration suites do).
"""

from __future__ import annotations

import importlib.util
import subprocess
from collections.abc import Iterator

import pytest

from runbook.sim.scenario import scenario_names
from runbook.engine.operator import AssumeYes
from tests.conftest import REQUIRE_INTEGRATION
from tests.prometheus.conftest import free_port, need_binary
from tests.realstack import timeline
from tests.realstack.harness import Stack
from tests.realstack.nodes import NodeLogins, Oracle
from tests.realstack.stepped import SteppedPrometheus
from tests.ssh import server as sshd_server


def _unavailable(reason: str) -> None:
    if REQUIRE_INTEGRATION:
        pytest.fail(f"RUNBOOK_REQUIRE_INTEGRATION=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def played(tmp_path_factory) -> dict[str, timeline.Played]:
    state = tmp_path_factory.mktemp("drills")
    return {name: timeline.play(name, state, AssumeYes("realstack", rehearsal=True)) for name in scenario_names()}


@pytest.fixture(scope="session")
def prometheus(played, tmp_path_factory) -> Iterator[SteppedPrometheus]:
    promtool = need_binary("promtool")
    binary = need_binary("prometheus")
    work = tmp_path_factory.mktemp("realstack-prometheus")
    source = work / "drills.om"
    source.write_text(timeline.openmetrics(played.values()))
    data = work / "data"
    done = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    source.unlink()
    server = SteppedPrometheus(binary, data, work)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory):
    if importlib.util.find_spec("websockets") is None:
        _unavailable("the test API server needs `websockets` for exec over WebSocket: pip install websockets")
    from tests.standin.apiserver.server import ApiServer

    server = ApiServer(tmp_path_factory.mktemp("realstack-apiserver")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def oracle() -> Iterator[Oracle]:
    made = Oracle()
    yield made
    made.stop()


@pytest.fixture(scope="session")
def logins(played, oracle, tmp_path_factory) -> Iterator[NodeLogins]:
    binary = sshd_server.find_sshd()
    if binary is None:
        _unavailable("sshd is not installed (Debian package openssh-server)")
    names = sorted({n.name for p in played.values() for n in p.scenario.nodes})
    try:
        made = NodeLogins(tmp_path_factory.mktemp("realstack-sshd"), binary, names, oracle)
    except RuntimeError as exc:
        _unavailable(str(exc))
    yield made
    made.stop()


@pytest.fixture(scope="session")
def stack(prometheus, apiserver, oracle, logins) -> Stack:
    return Stack(prometheus.url, f"http://127.0.0.1:{free_port()}", apiserver, oracle, logins)


@pytest.fixture(autouse=True)
def _loopback_without_proxy(monkeypatch):
    """A proxy from the environment must not sit between the tests and their loopback servers."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def laid_out(stack, tmp_path):
    """`lay` for a test, undone after it (the API server emptied, the oracle detached)."""
    from tests.realstack.harness import lay

    made = []

    def put(played_one, **kwargs):
        laid = lay(stack, played_one, tmp_path / "stack", **kwargs)
        made.append(laid)
        return laid

    yield put
    crashes = list(stack.apiserver.state.crashes)
    for laid in made:
        laid.close(stack)
    assert not crashes, "the test API server crashed:\n" + "\n".join(crashes)
