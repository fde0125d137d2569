"""Finding 7: cooldowns and budgets hold across state directories, machines and replicas.

With a cluster, each applied remediation goes into a ConfigMap per target that every runbook
instance reads; a record that cannot be read refuses, and the record stays bounded.
"""

from __future__ import annotations

import datetime as dt
import json
import socket
import subprocess

import pytest
import yaml

from runbook.backends.base import World
from runbook.backends.kubernetes.ledger import AppliedLedger, record_name
from runbook.clock import FakeClock, utc
from runbook.engine.operator import AssumeYes
from runbook.engine.runner import Engine
from runbook.errors import BackendError, BackendUnavailable
from runbook.history import SharedHistory
from runbook.journal import Application, History, JsonlJournal
from runbook.backends.kubernetes.leases import LeaseLocks
from runbook.shared_state import history_for
from runbook.actions import load_builtin
from runbook.testing import FakeMetrics
from tests.conftest import assert_sequence
from tests.engine.helpers import playbook
from tests.kubernetes.apiserver.server import ADMIN_TOKEN
from tests.kubernetes.conftest import connect_cluster

TARGET = "llm/statefulset/vllm-server"
T0 = utc(2026, 3, 14, 3, 12, 7)

SCALE = """
name: test-oom
title: test playbook
detect: {signal: oom_failures_per_min, above: 0}
params: {namespace: llm, workload: statefulset/vllm-server}
steps:
  - id: scale-down
    uses: k8s.scale
    with: {target: "{{ params.workload }}", replicas: REPLICAS}
    guard: {cooldown: 30m, min_ready: 0, confirm: false}
"""


def _engine(cluster, state, incident: str, at: dt.datetime) -> tuple[Engine, JsonlJournal]:
    world = World(metrics=FakeMetrics({"oom_failures_per_min": 4}), cluster=cluster)
    journal = JsonlJournal.for_incident(state, incident, "run-1")
    return Engine(registry=load_builtin(), world=world, clock=FakeClock(at), journal=journal,
                  operator=AssumeYes("alice"), locks=LeaseLocks(cluster), history=history_for(world, state)), journal


def _record(k8s) -> list[dict]:
    return json.loads(k8s.get("ConfigMap", "llm", record_name(TARGET))["data"]["applications"])


def test_f7_cooldown_holds_across_state_directories(k8s, cluster, tmp_path):
    laptop, journal = _engine(cluster, tmp_path / "laptop-state", "inc-laptop", T0)
    first = laptop.run(playbook(SCALE.replace("REPLICAS", "1")))
    journal.close()
    assert first.outcome == "resolved", first.reason
    assert [(e["action"], e["at"], e["incident"]) for e in _record(k8s)] == \
        [("k8s.scale", "2026-03-14T03:12:07.000Z", "inc-laptop")]

    # Another machine, 9 s later, with a state directory of its own: the record in the cluster counts.
    server, journal = _engine(cluster, tmp_path / "server-state", "inc-server", T0 + dt.timedelta(seconds=9))
    second = server.run(playbook(SCALE.replace("REPLICAS", "2")))
    events = journal.events()
    journal.close()

    assert second.outcome == "refused"
    refusal = next(e for e in events if e.type == "guard.refused")
    assert refusal.data["guard"] == "cooldown" and refusal.data["target"] == TARGET
    assert "9s ago" in refusal.data["reason"]
    assert_sequence(events, ["run.started", "action.planned", "guard.refused", "run.finished"],
                    forbidden=("action.applied",))
    assert k8s.get("StatefulSet", "llm", "vllm-server")["spec"]["replicas"] == 1
    assert [e["incident"] for e in _record(k8s)] == ["inc-laptop"]


def test_f7_the_second_instance_counts_the_first_ones_record(k8s, cluster, tmp_path):
    """Below the engine: what one instance records, another instance's history returns."""
    laptop = history_for(World(cluster=cluster), tmp_path / "laptop")
    server = history_for(World(cluster=cluster), tmp_path / "server")
    assert isinstance(laptop, SharedHistory) and isinstance(server, SharedHistory)
    laptop.record_applied(TARGET, "k8s.kill_process", T0, "inc-laptop")

    assert server.applications(TARGET, since=T0 - dt.timedelta(minutes=30), action="k8s.kill_process") == [T0]
    assert server.records(TARGET, since=T0 - dt.timedelta(hours=1)) == [Application("inc-laptop", "k8s.kill_process", T0)]
    assert server.applications(TARGET, since=T0 - dt.timedelta(hours=1), action="k8s.scale") == []
    assert server.applications("llm/deployment/api-gateway", since=T0 - dt.timedelta(hours=1)) == []
    configmap = k8s.get("ConfigMap", "llm", record_name(TARGET))
    assert configmap["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "runbook"
    assert configmap["metadata"]["annotations"]["runbook/target"] == TARGET
    assert _record(k8s)[0]["holder"] == f"{socket.gethostname()} pid " + _record(k8s)[0]["holder"].rsplit(" ", 1)[1]


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
    result = engine.run(playbook(SCALE.replace("REPLICAS", "1")))
    events = journal.events()
    journal.close()

    assert result.outcome == "refused"
    refusal = next(e for e in events if e.type == "guard.refused")
    assert refusal.data["guard"] == "history"
    assert "read the record of changes to llm/statefulset/vllm-server" in refusal.data["reason"]
    assert_sequence(events, ["action.planned", "guard.refused", "run.finished"], forbidden=("action.applied",))
    assert k8s.get("StatefulSet", "llm", "vllm-server")["spec"]["replicas"] == 3


def test_f7_a_record_that_cannot_be_written_is_a_note_and_the_run_goes_on(k8s, cluster, tmp_path):
    k8s.inject(method="POST", path=r"/configmaps$", status=403)
    engine, journal = _engine(cluster, tmp_path, "inc-unshared", T0)
    result = engine.run(playbook(SCALE.replace("REPLICAS", "1")))
    events = journal.events()
    journal.close()

    assert result.outcome == "resolved", result.reason
    assert_sequence(events, ["action.applied", "note", "run.finished"])
    note = next(e for e in events if e.type == "note")
    assert "could not record the change to llm/statefulset/vllm-server" in note.data["message"]
    assert k8s.find("ConfigMap", "llm", record_name(TARGET)) is None
    # This machine's own journal still counts it.
    assert History(tmp_path).applications(TARGET, since=T0) == [T0]


def test_f7_a_record_that_cannot_be_read_refuses_even_with_local_history(k8s, cluster, tmp_path):
    """A 503 or a missing grant is not "nothing applied": the count refuses, local journals or not."""
    history = history_for(World(cluster=cluster), tmp_path)
    k8s.inject(method="GET", path=r"/configmaps/", status=503, times=4)  # every attempt: 1 + 3 retries
    with pytest.raises(BackendUnavailable, match="HTTP 503"):
        history.applications(TARGET, since=T0 - dt.timedelta(hours=1))
    k8s.inject(method="GET", path=r"/configmaps/", status=403)
    with pytest.raises(BackendUnavailable, match="forbidden.*deploy/rbac.yaml"):
        history.applications(TARGET, since=T0 - dt.timedelta(hours=1))


def test_f7_a_malformed_record_is_an_error_naming_it(k8s, cluster, tmp_path):
    k8s.apply({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": record_name(TARGET), "namespace": "llm", "annotations": {"runbook/target": TARGET}},
               "data": {"applications": "[{\"action\": \"k8s.scale\"}]"}})
    history = history_for(World(cluster=cluster), tmp_path)
    with pytest.raises(BackendError, match=rf"ConfigMap llm/{record_name(TARGET)}\) cannot be read .*delete it"):
        history.applications(TARGET, since=T0 - dt.timedelta(hours=1))
    with pytest.raises(BackendError, match="cannot be read"):
        history.record_applied(TARGET, "k8s.scale", T0, "inc-1")


def test_f7_the_record_is_trimmed(k8s, cluster):
    ledger = AppliedLedger(cluster, retention=dt.timedelta(hours=1), max_entries=5)
    times = [T0 + dt.timedelta(minutes=10 * i) for i in range(8)]
    for i, at in enumerate(times):
        ledger.record(TARGET, Application(f"inc-{i}", "k8s.scale" if i % 2 else "k8s.set_arg", at))

    kept = _record(k8s)
    assert [e["incident"] for e in kept] == ["inc-3", "inc-4", "inc-5", "inc-6", "inc-7"]  # at most 5
    assert json.loads(k8s.get("ConfigMap", "llm", record_name(TARGET))["data"]["trimmed"]) == \
        {"*": "2026-03-14T03:32:07.000Z", "k8s.scale": "2026-03-14T03:22:07.000Z",
         "k8s.set_arg": "2026-03-14T03:32:07.000Z"}
    assert [a.at for a in ledger.applications(TARGET, since=times[6])] == times[6:]
    assert [a.at for a in ledger.applications(TARGET, since=times[2] + dt.timedelta(seconds=1),
                                              action="k8s.scale")] == [times[3], times[5], times[7]]
    # A window reaching back over what was dropped cannot be counted: an error, not a short count.
    with pytest.raises(BackendError, match=r"keeps 1 h and at most 5 applications; it dropped one applied at "
                                           r"2026-03-14T03:32:07.000Z, inside the window"):
        ledger.applications(TARGET, since=times[2])

    # Older than the retention before the newest: dropped whatever the count.
    ledger.record(TARGET, Application("inc-late", "k8s.scale", times[-1] + dt.timedelta(minutes=55)))
    assert [e["incident"] for e in _record(k8s)] == ["inc-7", "inc-late"]


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


def test_f7_local_and_shared_copies_of_one_application_count_once(k8s, cluster, tmp_path):
    journal = JsonlJournal.for_incident(tmp_path, "inc-1", "run-1")
    journal.record("action.applied", at=T0 + dt.timedelta(microseconds=700),
                   data={"action": "k8s.scale", "target": TARGET})
    journal.close()
    history = history_for(World(cluster=cluster), tmp_path)
    history.record_applied(TARGET, "k8s.scale", T0 + dt.timedelta(microseconds=700), "inc-1")
    history.record_applied(TARGET, "k8s.kill_process", T0 + dt.timedelta(seconds=5), "inc-2")  # another machine's

    assert History(tmp_path).applications(TARGET, since=T0) == [T0]
    assert history.applications(TARGET, since=T0) == [T0, T0 + dt.timedelta(seconds=5)]
    assert [a.incident for a in history.records(TARGET, since=T0)] == ["inc-1", "inc-2"]


def test_f7_drills_are_never_recorded_nor_counted(k8s, cluster, tmp_path):
    history = history_for(World(cluster=cluster), tmp_path)
    history.record_applied(TARGET, "k8s.scale", T0, "drill-20260314-031207-oom-surge-ab12")
    assert k8s.find("ConfigMap", "llm", record_name(TARGET)) is None
    k8s.apply({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": record_name(TARGET), "namespace": "llm", "annotations": {"runbook/target": TARGET}},
               "data": {"applications": json.dumps([{"action": "k8s.scale", "at": "2026-03-14T03:12:07.000Z",
                                                     "incident": "drill-x", "holder": "old"}])}})
    assert history.applications(TARGET, since=T0 - dt.timedelta(hours=1)) == []


def test_f7_without_a_cluster_the_history_is_the_local_journals(tmp_path):
    history = history_for(World(), tmp_path)
    assert type(history) is History and not hasattr(history, "record_applied")


def test_f7_the_record_lives_beside_the_lock(k8s, cluster, kubeconfig, tmp_path):
    node_target = "node/gpu-node-1/pids"
    history = history_for(World(cluster=cluster), tmp_path)
    # As the Lease: in the namespace the change is made in (a node's serving pods), else refused.
    history.record_applied(node_target, "node.kill_pids", T0, "inc-1", namespace="llm")
    assert history.applications(node_target, since=T0, namespace="llm") == [T0]
    assert k8s.find("ConfigMap", "llm", record_name(node_target)) is not None
    with pytest.raises(BackendError, match="cannot tell which namespace holds the record of changes to "
                                           "node/gpu-node-1/pids; set kubernetes.lock_namespace"):
        history.applications(node_target, since=T0)

    pinned = connect_cluster(kubeconfig, lock_namespace="llm")
    try:
        shared = history_for(World(cluster=pinned), tmp_path)
        assert shared.applications(node_target, since=T0) == [T0]  # kubernetes.lock_namespace wins
        with pytest.raises(BackendUnavailable, match="forbidden"):
            history.applications("serving/statefulset/vllm-server", since=T0)  # RBAC: the Role is in llm only
        assert shared.applications("serving/statefulset/vllm-server", since=T0) == []
    finally:
        pinned.close()


def test_f7_an_operator_reads_the_record_with_kubectl(k8s, cluster, kubectl, tmp_path):
    AppliedLedger(cluster).record(TARGET, Application("inc-1", "k8s.scale", T0))
    admin = k8s.kubeconfig(tmp_path / "admin-kubeconfig", token=ADMIN_TOKEN)  # a person's, not runbook's

    def run(*args: str) -> str:
        done = subprocess.run([kubectl, "--kubeconfig", str(admin), "--context", "runbook-test", "-n", "llm",
                               "--request-timeout=20s", *args], capture_output=True, text=True, timeout=60,
                              env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
        assert done.returncode == 0, done.stderr
        return done.stdout

    rows = [line.split() for line in run("get", "configmaps", "-l", "app.kubernetes.io/managed-by=runbook")
            .splitlines()]
    assert rows[0] == ["NAME", "DATA", "AGE"] and [r[:2] for r in rows[1:]] == [[record_name(TARGET), "2"]]
    shown = json.loads(run("get", "configmap", record_name(TARGET), "-o", "json"))
    assert json.loads(shown["data"]["applications"])[0]["incident"] == "inc-1"
