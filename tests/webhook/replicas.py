"""`runbook serve --coordination kubernetes` replicas for tests: the real CLI in processes of their
own, each with its own state directory, so nothing but the Kubernetes API is shared between them.

Used on the fault-injecting stand-in (tests/webhook/test_replicas.py) and on the real control plane
(tests/controlplane/test_replicas.py).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from runbook.model import events as ev
from tests.webhook.helpers import AM_TOKEN, am_headers, journal, request

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = "replica-scale"


def write_scale_playbook(tmp_path: Path, kind: str) -> None:
    """`replica-scale` in tmp_path/playbooks: the alert's `app` label's `kind` scaled down to one."""
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / f"{PLAYBOOK}.yaml").write_text(f"""
name: {PLAYBOOK}
title: OOM surge on one vLLM {kind}
match: {{alerts: [VllmOomSurge], labels: {{namespace: namespace, name: app}}}}
params: {{namespace: llm, name: vllm-server}}
steps:
  - id: scale-down
    uses: k8s.scale
    with: {{target: "{kind.lower()}/{{{{ params.name }}}}", replicas: 1, namespace: "{{{{ params.namespace }}}}"}}
    guard: {{floor: 1}}
""")


@dataclasses.dataclass
class Replica:
    name: str
    proc: subprocess.Popen
    url: str
    state: Path
    log: Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(tmp_path: Path, name: str, kubeconfig: Path, *, namespace: str, context: str = "runbook-test",
          playbooks: Path | None = None, config: Path | None = None) -> Replica:
    """`runbook serve` on a free loopback port; its playbooks and config in `tmp_path` unless given."""
    state, port, log = tmp_path / f"state-{name}", _free_port(), tmp_path / f"{name}.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RUNBOOK_STATE_DIR": str(state),
           "RUNBOOK_ALERTMANAGER_TOKEN": AM_TOKEN}
    env.pop("RUNBOOK_PAGERDUTY_SECRET", None)
    with log.open("wb") as out:  # the child keeps its own descriptor
        proc = subprocess.Popen([sys.executable, "-m", "runbook", "serve", "--port", str(port),
                                 "--playbooks", str(playbooks or tmp_path / "playbooks"),
                                 "--config", str(config or tmp_path / "runbook.yaml"),
                                 "--kubeconfig", str(kubeconfig), "--context", context,
                                 "--coordination", "kubernetes", "--coordination-namespace", namespace,
                                 "--replica-id", f"replica-{name}", "--log-level", "warning"],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    return Replica(name, proc, f"http://127.0.0.1:{port}", state, log)


def wait_healthy(replica: Replica, *, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert replica.proc.poll() is None, f"the server exited:\n{replica.log.read_text(errors='replace')[-3000:]}"
        assert time.monotonic() < deadline, "the server did not start"
        try:
            if request(replica.url, "GET", "/healthz", timeout=1).status == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)


def deliver(url: str, body: bytes, *, within: float = 20) -> int:
    """As a sender does: retry a 503 (another replica holds the claim) until a 2xx, within bounds."""
    deadline = time.monotonic() + within
    while True:
        reply = request(url, "POST", "/webhooks/alertmanager", body, am_headers())
        if reply.status != 503 or time.monotonic() > deadline:
            return reply.status
        time.sleep(0.1)


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def stop(replicas: list[Replica]) -> None:
    for replica in replicas:
        replica.proc.send_signal(signal.SIGTERM)
    for replica in replicas:
        try:
            replica.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            replica.proc.kill()
            replica.proc.wait(timeout=5)


def runs_and_applies(replicas: list[Replica]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """From the journals: incident -> the replicas that started a run of it; target -> those that applied."""
    runs: dict[str, list[str]] = {}
    applied: dict[str, list[str]] = {}
    for replica in replicas:
        incidents = replica.state / "incidents"
        for folder in sorted(incidents.iterdir()) if incidents.exists() else []:
            for event in journal(replica.state, folder.name):
                if event.type == ev.RUN_STARTED:
                    runs.setdefault(folder.name, []).append(replica.name)
                if event.type == ev.ACTION_APPLIED:
                    applied.setdefault(event.data["target"], []).append(replica.name)
    return runs, applied
