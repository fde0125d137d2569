"""runbook's own records on the real apiserver, as the service account of deploy/rbac.yaml: the target
Leases (held, refused, renewed, taken over, raced for) and the ledger ConfigMap that every instance counts.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runbook.actions import load_builtin
from runbook.backends.base import World
from runbook.backends.kubernetes.leases import LeaseLocks, lease_name
from runbook.backends.kubernetes.ledger import AppliedLedger, record_name
from runbook.clock import FakeClock, utc
from runbook.engine.operator import AssumeYes
from runbook.engine.runner import Engine
from runbook.errors import BackendError, BackendUnavailable, Refused
from runbook.record.history import SharedHistory
from runbook.record.journal import Application, History, JsonlJournal
from runbook.backends.shared_state import history_for
from runbook.sim.fakes import FakeMetrics
from tests.conftest import assert_sequence
from tests.controlplane import objects
from tests.controlplane.identity import connect, runbook_kubeconfig, runbook_user
from tests.controlplane.plane import wait_for
from tests.controlplane.test_rbac import without
from tests.engine.helpers import playbook
from tests.safety import books

REPO = Path(__file__).resolve().parents[2]
T0 = utc(2026, 3, 14, 3, 12, 7)

# The guard that lets a scale through but for its cooldown: the shared record is what is judged.
COOLDOWN_ONLY = "{cooldown: 30m, min_ready: 0, confirm: false}"


def scale_playbook(namespace: str, replicas: int):
    return playbook(books.scale_to(replicas, namespace=namespace), COOLDOWN_ONLY)


def engine(cluster, state: Path, incident: str, at: dt.datetime) -> tuple[Engine, JsonlJournal]:
    world = World(metrics=FakeMetrics({"oom_failures_per_min": 4}), cluster=cluster)
    journal = JsonlJournal.for_incident(state, incident, "run-1")
    return Engine(registry=load_builtin(), world=world, clock=FakeClock(at), journal=journal,
                  operator=AssumeYes("alice"), locks=LeaseLocks(cluster), history=history_for(world, state)), journal


def stored_record(plane, namespace: str, target: str) -> list[dict]:
    return json.loads(plane.get("configmap", record_name(target), namespace=namespace)["data"]["applications"])


# -- the target Leases ---------------------------------------------------------------------------------


def test_the_target_lease_is_held_refused_to_another_and_read_by_kubectl(plane, namespace, cluster):
    target = f"{namespace}/statefulset/vllm-server"
    locks, other = LeaseLocks(cluster), LeaseLocks(cluster)
    with locks.hold(target, holder="alice incident inc-1"):
        lease = plane.get("lease", lease_name(target), namespace=namespace)
        assert lease["spec"]["holderIdentity"].startswith("alice incident inc-1 (")
        assert lease["metadata"]["annotations"]["runbook/target"] == target
        shown = plane.kubectl("get", "lease", lease_name(target), "-n", namespace, "-o",
                              "jsonpath={.spec.holderIdentity}").stdout
        assert shown == lease["spec"]["holderIdentity"]  # what the on-call sees names the holder
        with pytest.raises(Refused, match=rf"locked by alice incident inc-1 .*Lease {namespace}/runbook-") as refused:
            with other.hold(target, holder="bob incident inc-2"):
                pytest.fail("a second holder got the lock")
        assert refused.value.guard == "lock"
        with other.hold(f"{namespace}/deployment/api-gateway", holder="bob incident inc-2"):
            pass  # another target is another lock
    assert plane.get("lease", lease_name(target), namespace=namespace) is None
    with other.hold(target, holder="bob incident inc-2"):  # released: the next holder takes it
        assert plane.get("lease", lease_name(target), namespace=namespace)["spec"]["holderIdentity"].startswith(
            "bob incident inc-2 (")
    creates = [(e["objectRef"]["name"], e["responseStatus"]["code"])
               for e in plane.audited(namespace, verb="create", resource="leases", user=runbook_user(namespace))]
    assert creates == [(lease_name(target), 201), (lease_name(target), 409),
                       (lease_name(f"{namespace}/deployment/api-gateway"), 201), (lease_name(target), 201)]


def test_the_lease_is_renewed_while_held(plane, namespace, cluster):
    target = f"{namespace}/statefulset/vllm-server"

    def renew_time() -> dt.datetime:
        spec = plane.get("lease", lease_name(target), namespace=namespace)["spec"]
        return dt.datetime.fromisoformat(spec["renewTime"].replace("Z", "+00:00"))

    with LeaseLocks(cluster, duration_seconds=1, skew_seconds=0).hold(target, holder="alice"):
        first = renew_time()
        # Renewed past the first renewal's 1 s duration: only renewals keep it held now.
        wait_for("the Lease renewed after its first term ran out",
                 lambda: renew_time() > first + dt.timedelta(seconds=1), timeout=30)
        with pytest.raises(Refused, match="locked by alice"):
            with LeaseLocks(cluster, duration_seconds=1, skew_seconds=0).hold(target, holder="bob"):
                pass
    renewals = plane.audited(namespace, verb="update", resource="leases", user=runbook_user(namespace))
    assert renewals and {e["responseStatus"]["code"] for e in renewals} == {200}


def test_an_expired_lease_of_a_crashed_holder_is_taken_over(plane, namespace, cluster):
    target = f"{namespace}/statefulset/vllm-server"
    stale = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    plane.apply({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": lease_name(target), "namespace": namespace},
                 "spec": {"holderIdentity": "crashed-run", "leaseDurationSeconds": 60, "acquireTime": stale,
                          "renewTime": stale, "leaseTransitions": 2}})
    with LeaseLocks(cluster).hold(target, holder="alice"):
        spec = plane.get("lease", lease_name(target), namespace=namespace)["spec"]
        assert spec["holderIdentity"].startswith("alice (") and spec["leaseTransitions"] == 3
    taken = [(e["verb"], e["responseStatus"]["code"]) for e in plane.audit(namespace)
             if e["objectRef"].get("resource") == "leases" and e["user"]["username"] == runbook_user(namespace)]
    assert taken[:2] == [("create", 409), ("update", 200)]  # it exists, so it is replaced at the version read


def test_the_lock_namespace_can_be_set(plane, namespace, kubeconfig):
    cluster = connect(kubeconfig, lock_namespace=namespace)
    try:
        with LeaseLocks(cluster).hold("pods/vllm-server-0", holder="alice"):
            assert plane.get("lease", lease_name("pods/vllm-server-0"), namespace=namespace) is not None
    finally:
        cluster.close()


def test_a_lease_the_role_may_not_create_refuses_rather_than_acting_unlocked(plane, namespace, tmp_path):
    cluster = connect(runbook_kubeconfig(plane, namespace, tmp_path / "kubeconfig",
                                         change_rules=without("leases", "create")))
    target = f"{namespace}/statefulset/vllm-server"
    try:
        with pytest.raises(Refused, match="cannot take the Lease.*refusing to act without the lock") as refused:
            with LeaseLocks(cluster).hold(target, holder="alice"):
                pytest.fail("acted without the lock")
    finally:
        cluster.close()
    assert refused.value.guard == "lock"
    assert 'cannot create resource "leases"' in str(refused.value)
    creates = plane.audited(namespace, verb="create", resource="leases", user=runbook_user(namespace))
    assert [e["responseStatus"]["code"] for e in creates] == [403]
    assert plane.get("lease", lease_name(target), namespace=namespace) is None


RACER = textwrap.dedent("""
    import pathlib, sys, time
    sys.path.insert(0, {repo!r})
    from runbook.backends.kubernetes.connect import connect
    from runbook.config import Config
    from runbook.errors import Refused
    from runbook.backends.kubernetes.leases import LeaseLocks

    name, other = sys.argv[1], sys.argv[2]
    cluster = connect(Config(None, {{"kubernetes": {{}}}}), kubeconfig={kubeconfig!r}, context="runbook-test")
    # Both start racing together: each says it is ready and waits for the other.
    pathlib.Path({barrier!r}, name).touch()
    deadline = time.monotonic() + 30
    while not pathlib.Path({barrier!r}, other).exists() and time.monotonic() < deadline:
        time.sleep(0.001)
    try:
        with LeaseLocks(cluster).hold({target!r}, holder=name):
            print("acted", flush=True)
            # Held until the other racer has been refused (it says so in a file), however slow it is.
            deadline = time.monotonic() + 30
            while not pathlib.Path({barrier!r}, other + ".done").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
    except Refused as exc:
        print("refused:", exc.reason, flush=True)
    pathlib.Path({barrier!r}, name + ".done").touch()
    cluster.close()
""")


def test_two_processes_racing_for_one_target_exactly_one_acts(plane, namespace, kubeconfig, tmp_path):
    target = f"{namespace}/statefulset/vllm-server"
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    script = tmp_path / "racer.py"
    script.write_text(RACER.format(repo=str(REPO), kubeconfig=str(kubeconfig), barrier=str(barrier), target=target))
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    racers = [subprocess.Popen([sys.executable, str(script), name, other], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
              for name, other in (("run-a", "run-b"), ("run-b", "run-a"))]
    outputs = []
    for racer in racers:
        out, err = racer.communicate(timeout=90)
        assert racer.returncode == 0, err
        outputs.append(out.strip())
    assert sorted(o.split(":")[0] for o in outputs) == ["acted", "refused"], outputs
    winner = "run-a" if outputs[0] == "acted" else "run-b"
    assert f"locked by {winner} (" in next(o for o in outputs if o.startswith("refused"))
    creates = plane.audited(namespace, verb="create", resource="leases", user=runbook_user(namespace))
    assert sorted(e["responseStatus"]["code"] for e in creates) == [201, 409]
    assert plane.get("lease", lease_name(target), namespace=namespace) is None  # the winner released it


# -- the ledger of applied changes ---------------------------------------------------------------------


def test_the_ledger_of_applied_changes_is_a_configmap_kubectl_reads(plane, namespace, cluster):
    target = f"{namespace}/statefulset/vllm-server"
    at = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    ledger = AppliedLedger(cluster, holder="runbook-test")
    ledger.record(target, Application(at=at, action="k8s.scale", incident="inc-20260314-031207-oom-surge"))
    ledger.record(target, Application(at=at, action="k8s.scale", incident="inc-20260314-031207-oom-surge"))  # the same application twice: recorded once
    seen = ledger.applications(target, since=at - dt.timedelta(minutes=1))
    assert [(a.action, a.incident) for a in seen] == [("k8s.scale", "inc-20260314-031207-oom-surge")]

    # A person lists runbook's records by its label, as `kubectl get` prints them: the record and its two keys.
    rows = [line.split() for line in plane.kubectl(
        "get", "configmaps", "-n", namespace, "-l", "app.kubernetes.io/managed-by=runbook").stdout.splitlines()]
    assert rows[0] == ["NAME", "DATA", "AGE"] and [r[:2] for r in rows[1:]] == [[record_name(target), "2"]]
    shown = json.loads(plane.kubectl("get", "configmap", record_name(target), "-n", namespace, "-o", "json").stdout)
    assert sorted(shown["data"]) == ["applications", "trimmed"]
    assert [(e["action"], e["incident"], e["holder"]) for e in json.loads(shown["data"]["applications"])] == \
        [("k8s.scale", "inc-20260314-031207-oom-surge", "runbook-test")]
    writes = [(e["verb"], e["responseStatus"]["code"]) for e in plane.audit(namespace)
              if e["objectRef"].get("resource") == "configmaps" and e["user"]["username"] == runbook_user(namespace)]
    assert writes == [("create", 201)]  # the second record of the same application wrote nothing


def test_f7_cooldown_holds_across_state_directories(plane, namespace, cluster, tmp_path):
    target = f"{namespace}/statefulset/vllm-server"
    plane.apply(objects.vllm_statefulset(namespace, replicas=3))
    laptop, journal = engine(cluster, tmp_path / "laptop-state", "inc-laptop", T0)
    first = laptop.run(scale_playbook(namespace, 1))
    journal.close()
    assert first.outcome == "mitigated", first.reason  # 3 → 1, and this playbook leaves it there
    assert [(e["action"], e["at"], e["incident"]) for e in stored_record(plane, namespace, target)] == \
        [("k8s.scale", "2026-03-14T03:12:07.000Z", "inc-laptop")]

    # Another machine, 9 s later, with a state directory of its own: the record in the cluster counts.
    server, journal = engine(cluster, tmp_path / "server-state", "inc-server", T0 + dt.timedelta(seconds=9))
    second = server.run(scale_playbook(namespace, 2))
    events = journal.events()
    journal.close()

    assert second.outcome == "refused"
    refusal = next(e for e in events if e.type == "guard.refused")
    assert refusal.data["guard"] == "cooldown" and refusal.data["target"] == target
    assert "9s ago" in refusal.data["reason"]
    assert_sequence(events, ["run.started", "action.planned", "guard.refused", "run.finished"],
                    forbidden=("action.applied",))
    assert plane.get("statefulset", "vllm-server", namespace=namespace)["spec"]["replicas"] == 1
    assert [e["incident"] for e in stored_record(plane, namespace, target)] == ["inc-laptop"]
    scales = plane.audited(namespace, verb="patch", resource="statefulsets/scale", user=runbook_user(namespace))
    # The first run's server-side dry run, then its scale; the refused run sent none. The StatefulSet was
    # just made, so its controller's status writes may answer a patch 409: the client sends it again.
    answers = [("dryRun=All" in e["requestURI"], e["responseStatus"]["code"]) for e in scales]
    assert [a for a in answers if a[1] < 300] == [(True, 200), (False, 200)], answers
    assert {code for _, code in answers if code >= 300} <= {409}, answers


def test_f7_the_second_instance_counts_the_first_ones_record(plane, namespace, cluster, tmp_path):
    """Below the engine: what one instance records, another instance's history returns."""
    target = f"{namespace}/statefulset/vllm-server"
    laptop = history_for(World(cluster=cluster), tmp_path / "laptop")
    server = history_for(World(cluster=cluster), tmp_path / "server")
    assert isinstance(laptop, SharedHistory) and isinstance(server, SharedHistory)
    laptop.record_applied(target, "k8s.kill_process", T0, "inc-laptop")

    assert server.applications(target, since=T0 - dt.timedelta(minutes=30), action="k8s.kill_process") == [T0]
    assert server.records(target, since=T0 - dt.timedelta(hours=1)) == [Application("inc-laptop", "k8s.kill_process", T0)]
    assert server.applications(target, since=T0 - dt.timedelta(hours=1), action="k8s.scale") == []
    assert server.applications(f"{namespace}/deployment/api-gateway", since=T0 - dt.timedelta(hours=1)) == []
    configmap = plane.get("configmap", record_name(target), namespace=namespace)
    assert configmap["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "runbook"
    assert configmap["metadata"]["annotations"]["runbook/target"] == target
    assert stored_record(plane, namespace, target)[0]["holder"] == f"{socket.gethostname()} pid {os.getpid()}"


def test_f7_a_record_that_cannot_be_written_is_a_note_and_the_run_goes_on(plane, namespace, tmp_path):
    target = f"{namespace}/statefulset/vllm-server"
    plane.apply(objects.vllm_statefulset(namespace, replicas=3))
    cluster = connect(runbook_kubeconfig(plane, namespace, tmp_path / "kubeconfig",
                                         change_rules=without("configmaps", "create")))
    try:
        runner, journal = engine(cluster, tmp_path / "state", "inc-unshared", T0)
        result = runner.run(scale_playbook(namespace, 1))
        events = journal.events()
        journal.close()
    finally:
        cluster.close()

    assert result.outcome == "mitigated", result.reason  # 3 → 1, and this playbook leaves it there
    assert_sequence(events, ["action.applied", "note", "escalated", "run.finished"])
    note = next(e for e in events if e.type == "note")
    assert f"could not record the change to {target}" in note.data["message"]
    assert plane.get("configmap", record_name(target), namespace=namespace) is None
    assert plane.get("statefulset", "vllm-server", namespace=namespace)["spec"]["replicas"] == 1
    creates = plane.audited(namespace, verb="create", resource="configmaps", user=runbook_user(namespace))
    assert [e["responseStatus"]["code"] for e in creates] == [403]
    # This machine's own journal still counts it.
    assert History(tmp_path / "state").applications(target, since=T0) == [T0]


def test_f7_a_record_the_role_may_not_read_refuses_even_with_local_history(plane, namespace, tmp_path):
    """A missing grant is not "nothing applied": the count refuses, local journals or not."""
    target = f"{namespace}/statefulset/vllm-server"
    journal = JsonlJournal.for_incident(tmp_path, "inc-1", "run-1")
    journal.record("action.applied", at=T0, data={"action": "k8s.scale", "target": target})
    journal.close()
    cluster = connect(runbook_kubeconfig(plane, namespace, tmp_path / "kubeconfig",
                                         change_rules=without("configmaps", "get")))
    try:
        history = history_for(World(cluster=cluster), tmp_path)
        with pytest.raises(BackendUnavailable, match='forbidden.*cannot get resource "configmaps".*deploy/rbac.yaml'):
            history.applications(target, since=T0 - dt.timedelta(hours=1))
    finally:
        cluster.close()


def test_f7_a_malformed_record_is_an_error_naming_it(plane, namespace, cluster, tmp_path):
    target = f"{namespace}/statefulset/vllm-server"
    plane.apply({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": record_name(target), "namespace": namespace,
                              "annotations": {"runbook/target": target}},
                 "data": {"applications": "[{\"action\": \"k8s.scale\"}]"}})
    history = history_for(World(cluster=cluster), tmp_path)
    with pytest.raises(BackendError, match=rf"ConfigMap {namespace}/{record_name(target)}\) cannot be read .*delete it"):
        history.applications(target, since=T0 - dt.timedelta(hours=1))
    with pytest.raises(BackendError, match="cannot be read"):
        history.record_applied(target, "k8s.scale", T0, "inc-1")
    assert plane.audited(namespace, verb="update", resource="configmaps", user=runbook_user(namespace)) == []


def test_f7_the_record_is_trimmed(plane, namespace, cluster):
    target = f"{namespace}/statefulset/vllm-server"
    ledger = AppliedLedger(cluster, retention=dt.timedelta(hours=1), max_entries=5)
    times = [T0 + dt.timedelta(minutes=10 * i) for i in range(8)]
    for i, at in enumerate(times):
        ledger.record(target, Application(f"inc-{i}", "k8s.scale" if i % 2 else "k8s.set_arg", at))

    assert [e["incident"] for e in stored_record(plane, namespace, target)] == ["inc-3", "inc-4", "inc-5", "inc-6", "inc-7"]
    stored = plane.get("configmap", record_name(target), namespace=namespace)
    assert json.loads(stored["data"]["trimmed"]) == \
        {"*": "2026-03-14T03:32:07.000Z", "k8s.scale": "2026-03-14T03:22:07.000Z",
         "k8s.set_arg": "2026-03-14T03:32:07.000Z"}
    assert [a.at for a in ledger.applications(target, since=times[6])] == times[6:]
    assert [a.at for a in ledger.applications(target, since=times[2] + dt.timedelta(seconds=1),
                                              action="k8s.scale")] == [times[3], times[5], times[7]]
    # A window reaching back over what was dropped cannot be counted: an error, not a short count.
    with pytest.raises(BackendError, match=r"keeps 1 h and at most 5 applications; it dropped one applied at "
                                           r"2026-03-14T03:32:07.000Z, inside the window"):
        ledger.applications(target, since=times[2])

    # Older than the retention before the newest: dropped whatever the count.
    ledger.record(target, Application("inc-late", "k8s.scale", times[-1] + dt.timedelta(minutes=55)))
    assert [e["incident"] for e in stored_record(plane, namespace, target)] == ["inc-7", "inc-late"]


def test_f7_local_and_shared_copies_of_one_application_count_once(namespace, cluster, tmp_path):
    target = f"{namespace}/statefulset/vllm-server"
    journal = JsonlJournal.for_incident(tmp_path, "inc-1", "run-1")
    journal.record("action.applied", at=T0 + dt.timedelta(microseconds=700),
                   data={"action": "k8s.scale", "target": target})
    journal.close()
    history = history_for(World(cluster=cluster), tmp_path)
    history.record_applied(target, "k8s.scale", T0 + dt.timedelta(microseconds=700), "inc-1")
    history.record_applied(target, "k8s.kill_process", T0 + dt.timedelta(seconds=5), "inc-2")  # another machine's

    assert History(tmp_path).applications(target, since=T0) == [T0]
    assert history.applications(target, since=T0) == [T0, T0 + dt.timedelta(seconds=5)]
    assert [a.incident for a in history.records(target, since=T0)] == ["inc-1", "inc-2"]


def test_f7_drills_are_never_recorded_nor_counted(plane, namespace, cluster, tmp_path):
    target = f"{namespace}/statefulset/vllm-server"
    history = history_for(World(cluster=cluster), tmp_path)
    history.record_applied(target, "k8s.scale", T0, "drill-20260314-031207-oom-surge-ab12")
    assert plane.get("configmap", record_name(target), namespace=namespace) is None
    assert plane.audited(namespace, verb="create", resource="configmaps", user=runbook_user(namespace)) == []
    plane.apply({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": record_name(target), "namespace": namespace,
                              "annotations": {"runbook/target": target}},
                 "data": {"applications": json.dumps([{"action": "k8s.scale", "at": "2026-03-14T03:12:07.000Z",
                                                       "incident": "drill-x", "holder": "old"}])}})
    assert history.applications(target, since=T0 - dt.timedelta(hours=1)) == []


def test_f7_the_record_lives_beside_the_lock(plane, namespace, cluster, kubeconfig, tmp_path):
    node_target = "node/gpu-node-1/pids"
    elsewhere = "serving/statefulset/vllm-server"  # a namespace the Role does not reach
    history = history_for(World(cluster=cluster), tmp_path)
    # As the Lease: in the namespace the change is made in (a node's serving pods), else refused.
    history.record_applied(node_target, "node.kill_pids", T0, "inc-1", namespace=namespace)
    assert history.applications(node_target, since=T0, namespace=namespace) == [T0]
    assert plane.get("configmap", record_name(node_target), namespace=namespace) is not None
    with pytest.raises(BackendError, match="cannot tell which namespace holds the record of changes to "
                                           "node/gpu-node-1/pids; set kubernetes.lock_namespace"):
        history.applications(node_target, since=T0)

    pinned = connect(kubeconfig, lock_namespace=namespace)
    try:
        shared = history_for(World(cluster=pinned), tmp_path)
        assert shared.applications(node_target, since=T0) == [T0]  # kubernetes.lock_namespace wins
        with pytest.raises(BackendUnavailable, match=r'forbidden.*cannot get resource "configmaps".*namespace "serving"'):
            history.applications(elsewhere, since=T0)  # the real RBAC: the Role is in the test namespace only
        assert shared.applications(elsewhere, since=T0) == []
    finally:
        pinned.close()
