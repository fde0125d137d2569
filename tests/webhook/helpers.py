"""The webhook server for tests: real uvicorn on a free loopback port, in a thread, on fakes.

Also a tiny HTTP client (http.client, so the tests exercise nothing but the wire) and payload
builders for signed PagerDuty V3 events and Alertmanager v4 groups, from the payloads in data/.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runbook.backends.base import World
from runbook.clock import FakeClock
from runbook.loading.validation import load_playbook_text
from runbook.actions import load_builtin
from runbook.sim.fakes import FakeCluster, FakeMetrics
from runbook.webhook import pagerduty
from runbook.webhook.settings import OperatorToken, Secrets, WebhookConfig
from tests.engine.helpers import cluster as fake_cluster

PD_SECRET = b"lDQHScfUeXUKaQRNF+8XIiDKZ7XX3itBAYzwU0TARw8lJqRnkKl2iB1anSb0Z+IK"
PD_NEXT_SECRET = b"next-rotation-secret-0123456789abcdef"
AM_TOKEN = "am-token-0123456789abcdef"
OPERATOR_TOKEN = "operator-token-0123456789abcdef"
# Payloads written from the published formats (PagerDuty V3 webhooks, Alertmanager webhook v4).
DATA = Path(__file__).resolve().parent / "data"

PLAYBOOK = """
name: test-oom
title: OOM surge on vLLM pods
match: {alerts: [VllmOomSurge], titles: ["(?i)\\\\boom\\\\b"], labels: {namespace: namespace}}
detect: {signal: oom_failures_per_min, above: 0}
params: {namespace: llm, workload: statefulset/vllm-server}
steps:
  - id: oom
    uses: prom.query
    with: {signal: oom_failures_per_min}
  - id: scale-down
    uses: k8s.scale
    with: {target: "{{ params.workload }}", replicas: 1, namespace: "{{ params.namespace }}"}
    guard: {floor: 1}
  - id: observe
    uses: flow.verify
    with: {signal: oom_failures_per_min, below: 1, for: 2m, within: 5m, interval: 15s}
    on_fail: rollback
"""
# PLAYBOOK, with the replicas brought back once the fix holds: a run of it can end resolved (issue 34).
RESTORING = PLAYBOOK + """  - id: restore-capacity
    uses: k8s.restore_scale
    with: {target: "{{ params.workload }}", namespace: "{{ params.namespace }}",
           before: "{{ steps['scale-down'].result.before }}", signal: oom_failures_per_min, below: 1, for: 1m}
    guard: {recheck: false}
"""


def playbook(text: str = PLAYBOOK):
    loaded = load_playbook_text(text, file="test-oom.yaml", registry=load_builtin())
    assert loaded.playbook is not None, [p.format() for p in loaded.problems]
    return loaded.playbook


def secrets() -> Secrets:
    return Secrets(pagerduty=(PD_SECRET,), alertmanager=(AM_TOKEN,),
                   operators=(OperatorToken("alice", OPERATOR_TOKEN),))


def oom_world(c: FakeCluster | None = None) -> World:
    """OOM failures go on until the cluster has been changed."""
    c = c if c is not None else fake_cluster()
    return World(metrics=FakeMetrics({"oom_failures_per_min": lambda at: 0.0 if c.mutations else 4.0}), cluster=c)


# -- the server ------------------------------------------------------------------------------

@dataclasses.dataclass
class Running:
    url: str
    service: Any
    port: int

    def wait_idle(self, timeout: float = 10.0) -> None:
        assert self.service.worker.wait_idle(timeout), "the worker did not finish in time"


@contextlib.contextmanager
def serve(state: Path, *, world: World | None = None, config: WebhookConfig | None = None,
          clock: FakeClock | None = None, playbooks: list | None = None, env: dict | None = None,
          secrets_: Secrets | None = None, coordination: Any = None) -> Iterator[Running]:
    import uvicorn

    from runbook.webhook.app import create_app
    from runbook.webhook.service import Service

    service = Service(config=config or WebhookConfig(workers=2), secrets=secrets_ or secrets(), state=state,
                      world=world or oom_world(), playbooks=playbooks or [playbook()], clock=clock or FakeClock(),
                      env=env if env is not None else {}, sweeper=False, coordination=coordination)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(service), log_level="warning", lifespan="on",
                                           access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield Running(f"http://127.0.0.1:{port}", service, port)
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()
        service.store.close()


# -- a client on the wire --------------------------------------------------------------------

@dataclasses.dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str]


def request(url: str, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
            timeout: float = 10.0) -> Reply:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        raw = response.read()
        try:
            parsed: Any = json.loads(raw)
        except ValueError:
            parsed = raw.decode("utf-8", "replace")
        return Reply(response.status, parsed, {k.lower(): v for k, v in response.getheaders()})
    finally:
        conn.close()


def pd_event(event_type: str = "incident.triggered", *, incident: str = "PGR0VU2", title: str = "OOM on vllm-server",
             event_id: str = "01DEN1HNLBC1VITK192ETHS2CW", occurred_at: str = "2026-03-14T03:12:07.000Z") -> bytes:
    data = json.loads((DATA / "pagerduty-v3-incident-data.json").read_text(encoding="utf-8"))
    data.update(id=incident, title=title, status=event_type.split(".")[1],
                self=f"https://api.pagerduty.com/incidents/{incident}",
                html_url=f"https://llm-platform.pagerduty.com/incidents/{incident}")
    doc = {"event": {"id": event_id, "event_type": event_type, "resource_type": "incident",
                     "occurred_at": occurred_at, "agent": None, "client": None, "data": data}}
    return json.dumps(doc).encode()


def pd_headers(body: bytes, *, secrets_: tuple[bytes, ...] = (PD_SECRET,), webhook_id: str = "wh-1") -> dict[str, str]:
    return {"Content-Type": "application/json", "X-Webhook-Id": webhook_id,
            pagerduty.SIGNATURE_HEADER: ",".join(pagerduty.sign(body, s) for s in secrets_)}


def am_group(status: str = "firing", *, alertname: str = "VllmOomSurge", namespace: str = "llm",
             fingerprint: str = "483eb0cd5dcb2110", starts_at: str = "2026-03-14T03:12:07.042Z",
             labels: dict[str, str] | None = None) -> bytes:
    doc = json.loads((DATA / "alertmanager-v4-firing.json").read_text(encoding="utf-8"))
    alert = doc["alerts"][0]
    alert["labels"].update(alertname=alertname, namespace=namespace, **(labels or {}))
    alert.update(status=status, fingerprint=fingerprint, startsAt=starts_at)
    if status == "resolved":
        alert["endsAt"] = "2026-03-14T03:30:00Z"
    # Alertmanager groups by alertname and namespace here: the group's labels and key follow the alert's.
    doc.update(status=status, commonLabels=dict(alert["labels"]),
               groupLabels={"alertname": alertname, "namespace": namespace},
               groupKey=f'{{}}/{{severity="critical"}}:{{alertname={json.dumps(alertname)}, '
                        f'namespace={json.dumps(namespace)}}}')
    return json.dumps(doc).encode()


def am_headers(token: str = AM_TOKEN) -> dict[str, str]:
    return {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}


def journal(state: Path, incident: str):
    from runbook.record.journal import incident_dir, read_journal

    return read_journal(incident_dir(state, incident) / "journal.jsonl").events


ROOT = Path(__file__).resolve().parents[2]


def start_server(module: str, *args: str, port_file: Path) -> tuple[subprocess.Popen, str]:
    """`python -m module ARGS --port-file F` from the repository root, once it answers /healthz: (process, URL)."""
    port_file.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", module, *args, "--port-file", str(port_file)],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, "the server exited"
        assert time.monotonic() < deadline, "the server did not start"
        if port_file.exists() and port_file.read_text():
            url = f"http://127.0.0.1:{port_file.read_text()}"
            try:
                if request(url, "GET", "/healthz", timeout=1).status == 200:
                    return proc, url
            except OSError:
                pass
        time.sleep(0.05)


def serve_on_loopback(service: Any, port_file: Path) -> None:
    """Serve `service` with uvicorn on a free loopback port, written to `port_file` (the server scripts' main)."""
    import uvicorn

    from runbook.webhook.app import create_app

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port_file.write_text(str(sock.getsockname()[1]))
    uvicorn.Server(uvicorn.Config(create_app(service), log_level="warning", lifespan="on")).run(sockets=[sock])
