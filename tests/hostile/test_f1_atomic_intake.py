"""Finding 1 of issue 13: a multi-alert delivery is accepted whole or not at all, and a group larger
than the run queue is accepted and run in order, never refused forever.

Payloads are built here from the published Alertmanager v4 webhook format; a journal error is
planted as a regular file where one incident's journal directory must go, so nothing is mocked.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import pytest

from runbook.record.journal import incident_dir, read_journal
from runbook.model import events as ev
from runbook.webhook.intake import incident_id
from runbook.webhook.settings import WebhookConfig
from tests.webhook.helpers import AM_TOKEN, playbook, request, serve

# One diagnostic step: 300 runs take seconds, and every run still starts from the store.
TINY_PLAYBOOK = """
name: test-oom
title: OOM surge on vLLM pods
match: {alerts: [VllmOomSurge], labels: {namespace: namespace}}
detect: {signal: oom_failures_per_min, above: 0}
params: {namespace: llm, workload: statefulset/vllm-server}
steps:
  - id: oom
    uses: prom.query
    with: {signal: oom_failures_per_min}
"""
STARTS_AT = "2026-03-14T03:12:07.042Z"


def fingerprint(index: int) -> str:
    return f"{index + 1:016x}"


def am_alert(index: int, *, labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """One firing alert as Alertmanager v4 sends it (a firing alert's endsAt is Go's zero time)."""
    return {"status": "firing",
            "labels": {"alertname": "VllmOomSurge", "namespace": "llm", "pod": f"vllm-server-{index}",
                       **(labels or {})},
            "annotations": {"summary": f"OOM kills on vllm-server-{index}", **(annotations or {})},
            "startsAt": STARTS_AT, "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus.example:9090/graph?g0.expr=vllm_oom_total",
            "fingerprint": fingerprint(index)}


def am_group(alerts: list[dict[str, Any]]) -> bytes:
    doc = {"version": "4", "groupKey": '{}:{alertname="VllmOomSurge"}', "truncatedAlerts": 0, "status": "firing",
           "receiver": "runbook", "groupLabels": {"alertname": "VllmOomSurge"},
           "commonLabels": {"alertname": "VllmOomSurge", "namespace": "llm"}, "commonAnnotations": {},
           "externalURL": "http://alertmanager.example:9093", "alerts": alerts}
    return json.dumps(doc).encode()


def am_headers() -> dict[str, str]:
    return {"Content-Type": "application/json", "Authorization": f"Bearer {AM_TOKEN}"}


def expected_incident(index: int) -> str:
    """The incident id the webhook gives alert `index` (deterministic, so a retry finds it again)."""
    starts = dt.datetime(2026, 3, 14, 3, 12, 7, 42000, tzinfo=dt.timezone.utc)
    return incident_id(starts, "test-oom", f"am|{fingerprint(index)}|{starts.isoformat()}")


def journal_dirs(state: Path) -> set[str]:
    root = state / "incidents"
    return {p.name for p in root.iterdir() if not p.name.startswith(".")} if root.is_dir() else set()


def alerts_received(state: Path, incident: str) -> int:
    path = incident_dir(state, incident) / "journal.jsonl"
    return sum(1 for e in read_journal(path).events if e.type == ev.ALERT_RECEIVED)


def runs_started(state: Path, incident: str) -> int:
    path = incident_dir(state, incident) / "journal.jsonl"
    return sum(1 for e in read_journal(path).events if e.type == ev.RUN_STARTED)


def store_ids(service) -> set[str]:
    return {row.id for row in service.store.incidents()}


def run_everything(srv) -> None:
    """Let the workers drain the store: what did not fit the queue is offered again by the sweeper."""
    for _ in range(20):
        srv.wait_idle(60)
        if not srv.service.store.incidents("pending", "approved", "interrupted"):
            return
        srv.service.sweep()
    raise AssertionError("incidents still wait after 20 sweeps")


@pytest.fixture
def state(tmp_path):
    return tmp_path / "state"


def test_f1_a_group_of_300_with_a_queue_of_256_is_accepted_whole_and_run_in_order(state):
    config = WebhookConfig(workers=1, queue_size=256)
    with serve(state, config=config, playbooks=[playbook(TINY_PLAYBOOK)]) as srv:
        order: list[str] = []
        run = srv.service.worker.handle
        srv.service.worker.handle = lambda incident: (order.append(incident), run(incident))
        reply = request(srv.url, "POST", "/webhooks/alertmanager", am_group([am_alert(i) for i in range(300)]),
                        am_headers(), timeout=60)
        assert reply.status == 202, reply.body
        assert reply.body["accepted"] == 300
        assert [a["verdict"] for a in reply.body["alerts"]] == ["queued"] * 300
        incidents = [a["incident"] for a in reply.body["alerts"]]
        assert incidents == [expected_incident(i) for i in range(300)]
        assert store_ids(srv.service) == set(incidents) == journal_dirs(state)
        assert all(alerts_received(state, i) == 1 for i in incidents)  # on disk before the 2xx

        run_everything(srv)
        assert order == incidents  # in the order Alertmanager sent them, each once
        assert all(runs_started(state, i) == 1 for i in incidents)

        again = request(srv.url, "POST", "/webhooks/alertmanager", am_group([am_alert(i) for i in range(300)]),
                        am_headers(), timeout=60)
        assert again.status == 200 and again.body["duplicate"] is True
        assert all(alerts_received(state, i) == 1 for i in incidents)


def test_f1_back_pressure_depends_on_the_backlog_before_the_delivery_never_on_its_size(state):
    config = WebhookConfig(workers=1, queue_size=2)
    with serve(state, config=config, playbooks=[playbook(TINY_PLAYBOOK)]) as srv:
        srv.service.worker.stop(5)  # nobody takes work off the queue
        big = request(srv.url, "POST", "/webhooks/alertmanager", am_group([am_alert(i) for i in range(5)]),
                      am_headers())
        assert big.status == 202 and big.body["accepted"] == 5  # larger than the queue, accepted whole
        more = request(srv.url, "POST", "/webhooks/alertmanager", am_group([am_alert(9)]), am_headers())
        assert more.status == 503 and more.headers["retry-after"]  # five wait in the store already
        assert journal_dirs(state) == store_ids(srv.service) == {expected_incident(i) for i in range(5)}


def test_f1_a_journal_error_at_alert_200_leaves_no_phantom_and_a_retry_accepts_all(state):
    blocked = expected_incident(199)
    (state / "incidents").mkdir(parents=True, mode=0o700)
    (state / "incidents" / blocked).write_text("not a directory: this journal cannot be written\n")
    os.chmod(state / "incidents" / blocked, 0o600)
    body = am_group([am_alert(i) for i in range(300)])
    config = WebhookConfig(workers=1, queue_size=256)
    with serve(state, config=config, playbooks=[playbook(TINY_PLAYBOOK)]) as srv:
        first = request(srv.url, "POST", "/webhooks/alertmanager", body, am_headers(), timeout=60)
        assert first.status == 503, first.body
        srv.wait_idle(60)
        # Whatever was written belongs to an incident the store holds: no phantom incident.
        assert journal_dirs(state) - {blocked} <= store_ids(srv.service)
        for incident in journal_dirs(state) - {blocked}:
            assert alerts_received(state, incident) == 1
        # An incident whose alert is not journaled never starts a run.
        row = srv.service.store.incident(blocked)
        assert row is None or row.state == "pending"
        assert srv.service.store.claim(blocked, "test", 0.0) is None

        still = request(srv.url, "POST", "/webhooks/alertmanager", body, am_headers(), timeout=60)
        assert still.status == 503, still.body  # not a success while a line is owed

        (state / "incidents" / blocked).unlink()
        retry = request(srv.url, "POST", "/webhooks/alertmanager", body, am_headers(), timeout=60)
        assert retry.status in (200, 202), retry.body
        assert [a["incident"] for a in retry.body["alerts"]] == [expected_incident(i) for i in range(300)]
        incidents = {expected_incident(i) for i in range(300)}
        assert store_ids(srv.service) == incidents == journal_dirs(state)
        assert all(alerts_received(state, i) == 1 for i in incidents)

        run_everything(srv)
        assert all(runs_started(state, i) == 1 for i in incidents)
