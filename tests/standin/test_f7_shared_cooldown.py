"""Finding 7's shared record of applied changes meeting what a real apiserver cannot be made to give:
503s, a lost answer, an edit between read and write, no server. The rest is controlplane/test_locks_and_ledger.py."""

from __future__ import annotations

import datetime as dt
import json
import socket

import pytest
import yaml

from runbook.backends.base import World
from runbook.backends.kubernetes.ledger import AppliedLedger, record_name
from runbook.clock import FakeClock, utc
from runbook.engine.operator import AssumeYes
from runbook.engine.runner import Engine
from runbook.errors import BackendUnavailable
from runbook.record.journal import Application, History, JsonlJournal
from runbook.backends.kubernetes.leases import LeaseLocks
from runbook.backends.shared_state import history_for
from runbook.actions import load_builtin
from runbook.sim.fakes import FakeMetrics
from tests.conftest import assert_sequence
from tests.engine.helpers import playbook
from tests.safety import books
from tests.standin.conftest import connect_cluster

TARGET = "llm/statefulset/vllm-server"
T0 = utc(2026, 3, 14, 3, 12, 7)

COOLDOWN_ONLY = "{cooldown: 30m, min_ready: 0, confirm: false}"


def _engine(cluster, state, incident: str, at: dt.datetime) -> tuple[Engine, JsonlJournal]:
    world = World(metrics=FakeMetrics({"oom_failures_per_min": 4}), cluster=cluster)
    journal = JsonlJournal.for_incident(state, incident, "run-1")
    return Engine(registry=load_builtin(), world=world, clock=FakeClock(at), journal=journal,
                  operator=AssumeYes("alice"), locks=LeaseLocks(cluster), history=history_for(world, state)), journal


def _record(k8s) -> list[dict]:
    return json.loads(k8s.get("ConfigMap", "llm", record_name(TARGET))["data"]["applications"])


def test_f7_an_unreachable_record_refuses_rather_than_allows(k8s, kubeconfig, tmp_path):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    doc = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
    doc["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    kubeconfig.write_text(yaml.safe_dump(doc), encoding="utf-8")
    cluster = connect_cluster(kubeconfig, retries=1, max_retry_wait=1)
    try:
        history = history_for(World(cluster=cluster), tmp_path)
        with pytest.raises(BackendUnavailable, match="read the record of changes to llm/statefulset/vllm-server: "
                                                     "cannot reach the Kubernetes API"):
            history.applications(TARGET, since=T0 - dt.timedelta(hours=1))
    finally:
        cluster.close()


def test_f7_a_run_whose_record_cannot_be_read_is_refused_and_changes_nothing(k8s, cluster, tmp_path):
    k8s.inject(method="GET", path=r"/configmaps/", status=503, times=4)  # every attempt: 1 + 3 retries
    engine, journal = _engine(cluster, tmp_path, "inc-blind", T0)
    result = engine.run(playbook(books.scale_to(1), COOLDOWN_ONLY))
    events = journal.events()
    journal.close()

    assert result.outcome == "refused"
    refusal = next(e for e in events if e.type == "guard.refused")
    assert refusal.data["guard"] == "history"
    assert "read the record of changes to llm/statefulset/vllm-server" in refusal.data["reason"]
    assert_sequence(events, ["action.planned", "guard.refused", "run.finished"], forbidden=("action.applied",))
    assert k8s.get("StatefulSet", "llm", "vllm-server")["spec"]["replicas"] == 3


def test_f7_a_record_that_cannot_be_read_refuses_even_with_local_history(k8s, cluster, tmp_path):
    """A 503 is not "nothing applied": the count refuses, local journals or not. (A missing grant, the
    real RBAC's 403, is controlplane/test_locks_and_ledger.py's.)"""
    journal = JsonlJournal.for_incident(tmp_path, "inc-1", "run-1")
    journal.record("action.applied", at=T0, data={"action": "k8s.scale", "target": TARGET})
    journal.close()
    history = history_for(World(cluster=cluster), tmp_path)
    k8s.inject(method="GET", path=r"/configmaps/", status=503, times=4)  # every attempt: 1 + 3 retries
    with pytest.raises(BackendUnavailable, match="HTTP 503"):
        history.applications(TARGET, since=T0 - dt.timedelta(hours=1))


def test_f7_a_write_that_meets_another_write_is_retried_on_the_new_version(k8s, cluster):
    ledger = AppliedLedger(cluster)
    ledger.record(TARGET, Application("inc-1", "k8s.scale", T0))

    def another_replica_writes():
        def add(configmap):
            entries = json.loads(configmap["data"]["applications"])
            entries.append({"action": "k8s.kill_process", "at": "2026-03-14T03:12:08.000Z", "incident": "inc-2",
                            "holder": "replica-b"})
            configmap["data"]["applications"] = json.dumps(entries)
        k8s.edit("ConfigMap", "llm", record_name(TARGET), add)

    k8s.inject(method="PUT", path=r"/configmaps/", status=None, before=another_replica_writes)
    ledger.record(TARGET, Application("inc-3", "k8s.scale", T0 + dt.timedelta(seconds=2)))

    assert [e["incident"] for e in _record(k8s)] == ["inc-1", "inc-2", "inc-3"]
    codes = [(s.method, s.code) for s in k8s.seen if s.resource == "configmaps"][-4:]
    assert codes == [("GET", 200), ("PUT", 409), ("GET", 200), ("PUT", 200)]


def test_f7_a_lost_answer_to_a_write_records_the_application_once(k8s, cluster):
    ledger = AppliedLedger(cluster)
    k8s.inject(method="POST", path=r"/configmaps$", status=503, after=True)  # created, answer lost, retried: 409
    ledger.record(TARGET, Application("inc-1", "k8s.scale", T0))
    k8s.inject(method="PUT", path=r"/configmaps/", status=503, after=True)
    ledger.record(TARGET, Application("inc-2", "k8s.scale", T0 + dt.timedelta(seconds=1)))
    assert [e["incident"] for e in _record(k8s)] == ["inc-1", "inc-2"]


def test_f7_without_a_cluster_the_history_is_the_local_journals(tmp_path):
    history = history_for(World(), tmp_path)
    assert type(history) is History and not hasattr(history, "record_applied")
