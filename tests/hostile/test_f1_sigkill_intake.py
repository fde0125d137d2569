"""Finding 1 of issue 13: SIGKILL `runbook serve` while it answers a 300-alert group, restart it,
resend: every alert is journaled exactly once and no journal is left without its incident.

The server runs in a process of its own (this module, run with `-m`), on fakes and a fake clock;
the test kills it as soon as the first journals of the burst appear on disk.
"""

from __future__ import annotations

import argparse
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

from runbook.record.journal import incident_dir, read_journal
from runbook.model import events as ev
from tests.hostile.test_f1_atomic_intake import (TINY_PLAYBOOK, am_alert, am_group, am_headers, expected_incident,
                                                 journal_dirs)
from tests.webhook.helpers import request, serve_on_loopback, start_server

ALERTS = 300


def start(tmp_path: Path, name: str) -> tuple[subprocess.Popen, str]:
    return start_server("tests.hostile.test_f1_sigkill_intake", "--state", str(tmp_path / "state"),
                        port_file=tmp_path / f"port-{name}")


def journals_on_disk(state: Path) -> int:
    root = state / "incidents"
    return sum(1 for _ in root.glob("*/journal.jsonl")) if root.is_dir() else 0


def events(state: Path, incident: str) -> list[ev.Event]:
    path = incident_dir(state, incident) / "journal.jsonl"
    return read_journal(path).events if path.exists() else []


def test_f1_sigkill_mid_burst_then_a_resend_journals_every_alert_exactly_once(tmp_path):
    state = tmp_path / "state"
    body = am_group([am_alert(i) for i in range(ALERTS)])
    proc, url = start(tmp_path, "first")
    answered: list[object] = []

    def deliver() -> None:
        try:
            answered.append(request(url, "POST", "/webhooks/alertmanager", body, am_headers(), timeout=60))
        except OSError as exc:  # the server was killed under it
            answered.append(exc)

    sender = threading.Thread(target=deliver, daemon=True)
    try:
        sender.start()
        deadline = time.monotonic() + 30
        while journals_on_disk(state) < 5 and sender.is_alive():
            assert time.monotonic() < deadline, "no journal appeared"
            time.sleep(0.001)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    sender.join(timeout=60)
    assert answered and isinstance(answered[0], OSError), f"the burst was answered before the kill: {answered}"
    assert 0 < journals_on_disk(state) < ALERTS  # killed mid-burst

    proc, url = start(tmp_path, "second")
    try:
        reply = request(url, "POST", "/webhooks/alertmanager", body, am_headers(), timeout=60)
        assert reply.status in (200, 202), reply.body
        incidents = [expected_incident(i) for i in range(ALERTS)]
        assert [a["incident"] for a in reply.body["alerts"]] == incidents
        deadline = time.monotonic() + 120
        while not all(any(e.type == ev.RUN_FINISHED for e in events(state, i)) for i in incidents):
            assert time.monotonic() < deadline, "the runs did not all finish"
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)

    for incident in incidents:
        received = [e for e in events(state, incident) if e.type == ev.ALERT_RECEIVED]
        assert len(received) == 1, (incident, received)
        assert sum(1 for e in events(state, incident) if e.type == ev.RUN_STARTED) == 1
    with sqlite3.connect(state / "webhook" / "state.sqlite3") as db:
        stored = {row[0] for row in db.execute("SELECT id FROM incidents")}
    assert stored == set(incidents) == journal_dirs(state)  # no phantom incident


def main() -> None:
    from runbook.backends.base import World
    from runbook.clock import FakeClock
    from runbook.sim.fakes import FakeMetrics
    from runbook.webhook.service import Service
    from runbook.webhook.settings import WebhookConfig
    from tests.engine.helpers import cluster as fake_cluster
    from tests.webhook.helpers import playbook, secrets

    parser = argparse.ArgumentParser()
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--port-file", type=Path, required=True)
    args = parser.parse_args()
    world = World(metrics=FakeMetrics({"oom_failures_per_min": lambda at: 4.0}), cluster=fake_cluster())
    config = WebhookConfig(workers=1, queue_size=256, sweep_interval=0.5)  # the sweeper offers what the queue left
    service = Service(config=config, secrets=secrets(), state=args.state, world=world,
                      playbooks=[playbook(TINY_PLAYBOOK)], clock=FakeClock(), env={}, sweeper=True)
    serve_on_loopback(service, args.port_file)


if __name__ == "__main__":
    main()
