"""SIGKILL the server in the middle of a change, restart it: the change is never applied twice.

The server runs in a subprocess on a file-backed fake cluster that stops forever just before or
just after it changes the world; the journal and the world's own record of changes prove it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from runbook.record.journal import list_incidents
from runbook.model import events as ev
from tests.webhook.helpers import am_group, am_headers, journal, request, start_server



def start(tmp_path: Path, hang: str) -> tuple[subprocess.Popen, str]:
    return start_server("tests.webhook.server_main", "--state", str(tmp_path / "state"), "--world",
                        str(tmp_path / "world.json"), "--hang", hang, port_file=tmp_path / f"port-{hang}")


def wait_for(predicate, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("hang", ["after", "before"])
def test_sigkill_mid_change_then_restart_applies_it_once(tmp_path, hang):
    state = tmp_path / "state"
    proc, url = start(tmp_path, hang)
    try:
        reply = request(url, "POST", "/webhooks/alertmanager", am_group(), am_headers())
        assert reply.status == 202, reply.body
        incident = reply.body["alerts"][0]["incident"]
        wait_for((tmp_path / "world.hung").exists, "the change to start")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    world = json.loads((tmp_path / "world.json").read_text())
    assert len(world["mutations"]) == (1 if hang == "after" else 0)
    assert not any(e.type == ev.ACTION_APPLIED for e in journal(state, incident))  # the crash hid it

    (tmp_path / "world.hung").unlink()
    proc, url = start(tmp_path, "none")
    try:
        def finished():
            done = [e for e in journal(state, incident) if e.type == ev.RUN_FINISHED and e.data["outcome"] == "mitigated"]
            return done or None

        wait_for(finished, "the recovered run to finish")
        assert request(url, "POST", "/webhooks/alertmanager", am_group(), am_headers()).status == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)

    world = json.loads((tmp_path / "world.json").read_text())
    assert world["mutations"] == [["scale", "statefulset/vllm-server", 1]]  # once, whatever the crash hit
    events = journal(state, incident)
    applied = [e for e in events if e.type == ev.ACTION_APPLIED and e.step == "scale-down"]
    assert len(applied) == 1
    interrupted = [e for e in events if e.type == "run.interrupted"]
    assert [e.data["verdict"] for e in interrupted] == ["applied" if hang == "after" else "not_applied"]
    if hang == "after":
        assert applied[0].data["recovered"] is True and applied[0].run == interrupted[0].run
    else:
        assert applied[0].data["by"] == "webhook policy (unattended)"
    outcomes = [e.data["outcome"] for e in events if e.type == ev.RUN_FINISHED and not e.data.get("dry_run")]
    assert outcomes == ["interrupted", "mitigated"]  # scaled down and left there by this playbook (issue 34)
    assert [s.outcome for s in list_incidents(state)] == ["mitigated"]
