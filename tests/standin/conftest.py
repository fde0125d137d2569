"""Fixtures: one test API server per session (reset and re-seeded per test), kubeconfigs, backends.

The server needs `websockets` (uvicorn's WebSocket implementation); without it these tests skip
with the reason, or fail when RUNBOOK_REQUIRE_INTEGRATION=1.
"""

from __future__ import annotations

import importlib.util
import shutil

import pytest

from runbook.config import Config
from tests.conftest import REQUIRE_INTEGRATION


def _need(ok: bool, reason: str) -> None:
    if ok:
        return
    if REQUIRE_INTEGRATION:
        pytest.fail(f"{reason} (RUNBOOK_REQUIRE_INTEGRATION=1)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory):
    _need(importlib.util.find_spec("websockets") is not None,
          "the test API server needs `websockets` for exec over WebSocket (uvicorn's other WebSocket "
          "implementation cannot refuse an upgrade with a status): pip install websockets")
    from tests.standin.apiserver.server import ApiServer

    server = ApiServer(tmp_path_factory.mktemp("apiserver")).start()
    yield server
    server.stop()


@pytest.fixture
def k8s(apiserver):
    """The session's server, emptied and seeded with the standard `llm` cluster."""
    from tests.standin import world

    apiserver.reset()
    world.seed(apiserver)
    yield apiserver
    crashes = list(apiserver.state.crashes)
    apiserver.reset()
    assert not crashes, "the test API server crashed:\n" + "\n".join(crashes)


@pytest.fixture
def kubeconfig(k8s, tmp_path):
    return k8s.kubeconfig(tmp_path / "kubeconfig")


def connect_cluster(kubeconfig, **section):
    from runbook.backends.kubernetes.connect import connect

    settings = {"request_timeout": 5, "connect_timeout": 2, "retries": 3, "max_retry_wait": 10} | section
    return connect(Config(None, {"kubernetes": settings}), kubeconfig=str(kubeconfig), context="runbook-test")


@pytest.fixture
def cluster(kubeconfig):
    made = connect_cluster(kubeconfig)
    yield made
    made.close()


@pytest.fixture
def kubectl():
    path = shutil.which("kubectl")
    _need(path is not None, "kubectl is not installed (the realism checks of the test API server need it)")
    return path
