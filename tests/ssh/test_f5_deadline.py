"""Finding 5 of issue 12: one deadline per node command, over every phase, even an exec request nobody answers.

A paramiko server on loopback (tests/ssh/silent_server.py) logs in and then goes silent at one phase;
a guard thread join keeps a hang from wedging the suite.
"""

from __future__ import annotations

import threading

import pytest

from runbook.backends.ssh.nodes import SshNodes
from runbook.errors import BackendUnavailable
from tests.ssh import silent_server

GUARD = 30.0  # far past any 1 s deadline: only a hang reaches it


def run_guarded(nodes: SshNodes, argv: list[str], *, timeout: float) -> BaseException:
    """What `nodes.run` raised, failing the test if it has not returned within GUARD seconds."""
    outcome: dict[str, object] = {}

    def call() -> None:
        try:
            outcome["result"] = nodes.run("gpu-node-2", argv, timeout=timeout)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome["error"] = exc

    thread = threading.Thread(target=call, name="f5-guarded-run", daemon=True)
    thread.start()
    thread.join(GUARD)
    assert not thread.is_alive(), f"Nodes.run did not return within {GUARD:g}s: the command has no deadline"
    assert "error" in outcome, f"expected an error, got {outcome.get('result')!r}"
    return outcome["error"]  # type: ignore[return-value]


def test_f5_an_exec_request_that_gets_no_answer_ends_at_the_deadline(tmp_path):
    with silent_server.serve(tmp_path, "exec request") as server, \
            SshNodes.from_section(server.section(), server_mode=True) as nodes:
        error = run_guarded(nodes, ["nvidia-smi", "-q"], timeout=1)
        assert server.commands == ["nvidia-smi -q"]  # it got as far as the exec request
        assert isinstance(error, BackendUnavailable), repr(error)
        message = str(error)
        assert "gpu-node-2" in message and "exec request" in message, message
        assert nodes._connections == {}  # discarded, not kept half-open for the next command


def test_f5_a_connection_past_its_deadline_is_never_reused(tmp_path):
    with silent_server.serve(tmp_path, "exec request") as server, \
            SshNodes.from_section(server.section(), server_mode=True) as nodes:
        run_guarded(nodes, ["true"], timeout=1)
        run_guarded(nodes, ["true"], timeout=1)
        assert server.connections == 2 and server.commands == ["true", "true"]


@pytest.mark.parametrize("phase", ["authentication", "channel open", "output"])
def test_f5_every_phase_is_bounded_by_the_one_deadline(tmp_path, phase):
    with silent_server.serve(tmp_path, phase) as server, \
            SshNodes.from_section(server.section(), server_mode=True) as nodes:
        error = run_guarded(nodes, ["nvidia-smi", "-q"], timeout=1)
        assert server.hung.is_set()  # the server did go silent there
        assert isinstance(error, BackendUnavailable), repr(error)
        message = str(error)
        assert "gpu-node-2" in message and phase in message, message
        assert nodes._connections == {}
