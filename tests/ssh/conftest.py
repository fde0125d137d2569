"""Fixtures: one real sshd for the session, a clean world directory per test, backends pointed at it.

Skipped with the reason when sshd cannot run here; failing instead under RUNBOOK_REQUIRE_INTEGRATION=1.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runbook.backends.ssh.nodes import SshNodes
from tests.conftest import REQUIRE_INTEGRATION
from tests.ssh import server


def _unavailable(reason: str) -> None:
    if REQUIRE_INTEGRATION:
        pytest.fail(f"RUNBOOK_REQUIRE_INTEGRATION=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def sshd(tmp_path_factory) -> Iterator[server.Sshd]:
    binary = server.find_sshd()
    if binary is None:
        _unavailable("sshd is not installed (Debian package openssh-server)")
    try:
        running = server.start(tmp_path_factory.mktemp("sshd"), binary)
    except RuntimeError as exc:
        _unavailable(str(exc))
    yield running
    running.stop()


@pytest.fixture
def world(sshd) -> Iterator[Path]:
    """The stand-in tools' world directory, emptied after each test."""
    yield sshd.world
    for child in sshd.world.iterdir():
        if child.is_dir():
            shutil.rmtree(child)
        else:
            child.unlink()


@pytest.fixture
def section(sshd, tmp_path) -> dict[str, Any]:
    """A `nodes:` section reaching the test sshd as `gpu-node-2`, with the host key pinned."""
    return {"user": sshd.user, "key_file": str(sshd.client_key),
            "known_hosts": str(sshd.known_hosts(tmp_path / "known_hosts")),
            "ssh_config": False,
            "timeouts": {"connect": 5, "banner": 5, "auth": 5, "channel": 5},
            "inventory": {"gpu-node-2": {"host": "127.0.0.1", "port": sshd.port}}}


@pytest.fixture
def nodes(section) -> Iterator[SshNodes]:
    backend = SshNodes.from_section(section, server_mode=True)
    yield backend
    backend.close()
