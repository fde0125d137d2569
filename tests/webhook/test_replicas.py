"""Two `runbook serve --coordination kubernetes` processes on one test API server, the same
deliveries sent to both (and repeated): each incident is acted on once.

The replicas are the real CLI in processes of their own, each with its own state directory, so
nothing but the Kubernetes API is shared. The API server's audit log and the StatefulSets prove
the world changed once per incident; the two journals prove one run applied it.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

from runbook.model import events as ev
from runbook.backends.kubernetes.claims import claim_name
from tests.kubernetes import world
from tests.webhook.helpers import AM_TOKEN, am_group, am_headers, journal, request

ROOT = Path(__file__).resolve().parents[2]
INCIDENTS = 6
PLAYBOOK = """
name: replica-scale
title: OOM surge on one vLLM StatefulSet
match: {alerts: [VllmOomSurge], labels: {namespace: namespace, name: app}}
params: {namespace: llm, name: vllm-server}
steps:
  - id: scale-down
    uses: k8s.scale
    with: {target: "statefulset/{{ params.name }}", replicas: 1, namespace: "{{ params.namespace }}"}
    guard: {floor: 1}
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(tmp_path: Path, name: str, kubeconfig: Path) -> tuple[subprocess.Popen, str, Path]:
    state, port = tmp_path / f"state-{name}", _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RUNBOOK_STATE_DIR": str(state),
           "RUNBOOK_ALERTMANAGER_TOKEN": AM_TOKEN}
    env.pop("RUNBOOK_PAGERDUTY_SECRET", None)
    with (tmp_path / f"{name}.log").open("wb") as log:  # the child keeps its own descriptor
        proc = _popen(port, name, tmp_path, kubeconfig, env, log)
    return proc, f"http://127.0.0.1:{port}", state


def _popen(port: int, name: str, tmp_path: Path, kubeconfig: Path, env: dict, log) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "runbook", "serve", "--port", str(port),
                             "--playbooks", str(tmp_path / "playbooks"), "--config", str(tmp_path / "runbook.yaml"),
                             "--kubeconfig", str(kubeconfig), "--context", "runbook-test",
                             "--coordination", "kubernetes", "--coordination-namespace", "llm",
                             "--replica-id", f"replica-{name}", "--log-level", "warning"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def _wait_healthy(proc: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, f"the server exited:\n{log.read_text(errors='replace')[-3000:]}"
        assert time.monotonic() < deadline, "the server did not start"
        try:
            if request(url, "GET", "/healthz", timeout=1).status == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)


def _deliver(url: str, body: bytes) -> int:
    """As a sender does: retry a 503 (another replica holds the claim) until a 2xx, within bounds."""
    deadline = time.monotonic() + 20
    while True:
        reply = request(url, "POST", "/webhooks/alertmanager", body, am_headers())
        if reply.status != 503 or time.monotonic() > deadline:
            return reply.status
        time.sleep(0.1)


def _wait_for(predicate, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_two_replicas_receiving_the_same_deliveries_act_once_per_incident(k8s, kubeconfig, tmp_path):
    names = [f"vllm-{n}" for n in range(INCIDENTS)]
    k8s.apply(*[world.workload("StatefulSet", name, replicas=3, labels={"app": name}) for name in names])
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "replica-scale.yaml").write_text(PLAYBOOK)
    (tmp_path / "runbook.yaml").write_text(yaml.safe_dump({
        "kubernetes": {"request_timeout": 5, "connect_timeout": 2, "retries": 2, "max_retry_wait": 5},
        "webhook": {"workers": 2, "sweep_interval": "1s",
                    "policy": {"unattended": {"replica-scale": ["scale-down"]}}}}))

    started = time.monotonic()
    replicas = [_start(tmp_path, name, kubeconfig) for name in ("a", "b")]
    try:
        for (proc, url, _), name in zip(replicas, ("a", "b")):
            _wait_healthy(proc, url, tmp_path / f"{name}.log")
        bodies = [am_group(fingerprint=f"{n:016x}", labels={"app": name}) for n, name in enumerate(names)]
        # Every delivery twice to each replica, all at once: four senders racing per incident.
        sends = [(url, body) for body in bodies for _, url, _ in replicas for _ in range(2)]
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(lambda s: _deliver(*s), sends))
        assert all(s in (200, 202) for s in statuses), statuses
        assert statuses.count(202) == INCIDENTS, statuses  # one acceptance per incident, the rest duplicates

        def all_scaled() -> bool:
            return all(k8s.get("StatefulSet", "llm", n)["spec"]["replicas"] == 1 for n in names)

        _wait_for(all_scaled, "every StatefulSet to be scaled down")
        time.sleep(2.5)  # two sweeps more: a second run would show by now
        # The same deliveries again, later: both replicas still say duplicate.
        for body in bodies:
            for _, url, _ in replicas:
                assert _deliver(url, body) == 200
    finally:
        for proc, _, _ in replicas:
            proc.send_signal(signal.SIGTERM)
        for proc, _, _ in replicas:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
    assert time.monotonic() - started < 90

    # The world: one real scale per StatefulSet, through the API, by runbook's ServiceAccount.
    scales = [s for s in k8s.seen if s.resource == "statefulsets/scale" and s.method == "PATCH" and not s.dry_run
              and 200 <= s.code < 300]
    assert sorted(s.name for s in scales) == sorted(names), scales

    # The journals: each incident is in one replica's journal only, with one run that applied it.
    runs: dict[str, list[str]] = {}
    applied: dict[str, list[str]] = {}
    for _, _, state in replicas:
        incidents = state / "incidents"
        for folder in sorted(incidents.iterdir()) if incidents.exists() else []:
            for event in journal(state, folder.name):
                if event.type == ev.RUN_STARTED:
                    runs.setdefault(folder.name, []).append(state.name)
                if event.type == ev.ACTION_APPLIED:
                    applied.setdefault(event.data["target"], []).append(state.name)
    assert len(runs) == INCIDENTS and all(len(where) == 1 for where in runs.values()), runs
    assert sorted(applied) == sorted(f"llm/statefulset/{n}" for n in names), applied
    assert all(len(where) == 1 for where in applied.values()), applied
    print(f"\nreplicas: runs per replica {sorted(w[0] for w in runs.values())}, "
          f"{len(sends)} sends in {time.monotonic() - started:.1f}s")

    # The claims are committed Leases naming their incident; the incident locks were released.
    leases = {lease["metadata"]["name"]: lease for lease in k8s.objects("Lease")}
    claims = [lease for lease in leases.values() if lease["metadata"]["name"].startswith("runbook-seen-")]
    assert claims and all(c["metadata"]["annotations"]["runbook/state"] == "committed" for c in claims)
    assert {c["spec"]["holderIdentity"] for c in claims} <= {"replica-a", "replica-b"}
    assert not [n for n in leases if n.startswith("runbook-incident-")], "an incident lock was left behind"
    assert len(claims) == 2 * INCIDENTS  # the alert's event key and its incident, each claimed once
    assert {claim_name(c["metadata"]["annotations"]["runbook/key"]) for c in claims} == {c["metadata"]["name"] for c in claims}
