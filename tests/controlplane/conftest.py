"""Fixtures: the real control plane for the whole session, and a namespace of its own per test.

Without the binaries (tests/controlplane/build.sh builds them; it needs Go) or kubectl these tests
skip with the reason, and fail instead under RUNBOOK_REQUIRE_INTEGRATION=1.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REQUIRE_INTEGRATION
from tests.controlplane import drills, objects
from tests.controlplane import plane as planes
from tests.controlplane.identity import connect, runbook_kubeconfig

_pool = itertools.cycle(planes.NAMESPACES[1:])


@pytest.fixture(scope="session")
def plane(tmp_path_factory) -> Iterator[planes.ControlPlane]:
    reason = planes.missing_reason()
    if reason is not None:
        if REQUIRE_INTEGRATION:
            pytest.fail(f"RUNBOOK_REQUIRE_INTEGRATION=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    made = planes.ControlPlane(tmp_path_factory.mktemp("controlplane"), planes.binaries_folder())
    made.start()
    yield made
    made.stop()


@pytest.fixture(scope="session")
def oracle(plane) -> Iterator[drills.PodOracle]:
    """What the pods' tools print and their ports answer, from the scenario a test lays (`drills.lay`)."""
    made = drills.PodOracle(plane)
    yield made
    made.stop()


@pytest.fixture
def namespace(plane) -> Iterator[str]:
    """A namespace made for this test (kwok knows its pods by name), deleted after it."""
    name = next(_pool)
    plane.make_namespace(name)
    yield name
    plane.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=false")


@pytest.fixture
def kubeconfig(plane, namespace, tmp_path) -> Path:
    """deploy/rbac.yaml applied in the test's namespace, and a kubeconfig with its service account's token."""
    return runbook_kubeconfig(plane, namespace, tmp_path / "kubeconfig")


@pytest.fixture
def cluster(kubeconfig):
    """runbook's Cluster connected as the `runbook` service account (what a user's pod would be)."""
    made = connect(kubeconfig)
    yield made
    made.close()


@pytest.fixture
def vllm(plane, namespace) -> dict:
    """Three vLLM pods of a StatefulSet, made by the controller and Running on the kwok nodes."""
    plane.apply(objects.vllm_statefulset(namespace, replicas=3))
    return objects.settled(plane, namespace, "statefulset", "vllm-server")


@pytest.fixture(autouse=True)
def _loopback_without_proxy(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
