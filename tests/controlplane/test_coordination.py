"""`--coordination kubernetes` in one process on the real apiserver's Leases, as runbook's service account:
claims in flight elsewhere (503), committed or opened elsewhere, abandoned (taken over), a held incident lock."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from runbook.backends.kubernetes.claims import COMMITTED, KubernetesCoordination, claim_name
from runbook.backends.kubernetes.leases import LeaseLocks
from runbook.model import events as ev
from runbook.webhook import alertmanager
from runbook.webhook.intake import incident_id
from runbook.webhook.settings import Policy, WebhookConfig
from tests.controlplane import identity
from tests.webhook.helpers import am_group, am_headers, journal, request, serve as serving

# The runs themselves scale the helpers' in-memory cluster: only the coordination is judged here.
CONFIG = WebhookConfig(workers=1, policy=Policy(unattended={"test-oom": ["scale-down"]}))


@pytest.fixture
def kubeconfig(plane, namespace, tmp_path):
    return identity.runbook_kubeconfig(plane, namespace, tmp_path / "kubeconfig")


@pytest.fixture
def shared(kubeconfig, namespace):
    cluster = identity.connect(kubeconfig, retries=1, max_retry_wait=2)
    yield KubernetesCoordination(cluster, namespace=namespace, identity="replica-a")
    cluster.close()


def _stamp(seconds_ago: float) -> str:
    return (dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _claim(plane, namespace: str, key: str, *, holder: str, state: str, seconds_ago: float = 0,
           incident: str = "") -> None:
    """A claim as another replica leaves it, written by an administrator."""
    plane.apply({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": claim_name(key), "namespace": namespace,
                              "annotations": {"runbook/key": key, "runbook/state": state, "runbook/incident": incident}},
                 "spec": {"holderIdentity": holder, "leaseDurationSeconds": 60, "renewTime": _stamp(seconds_ago)}})


def _leases(plane, namespace: str) -> list[dict]:
    return json.loads(plane.kubectl("get", "leases", "-n", namespace, "-o", "json").stdout)["items"]


def _event_key(body: bytes) -> str:
    return alertmanager.parse(body).inbound[0].event_key


def test_a_claim_in_flight_elsewhere_is_503_and_an_abandoned_one_is_taken_over(plane, namespace, shared, tmp_path):
    body = am_group()
    key = _event_key(body)
    _claim(plane, namespace, key, holder="replica-b", state="claimed")
    with serving(tmp_path / "state", config=CONFIG, coordination=shared) as srv:
        reply = request(srv.url, "POST", "/webhooks/alertmanager", body, am_headers())
        assert reply.status == 503 and reply.headers["retry-after"] == "5", reply.body
        assert "another replica" in reply.body["error"]
        assert not (tmp_path / "state" / "incidents").exists() or not any((tmp_path / "state" / "incidents").iterdir())

        # replica-b stopped renewing it five minutes ago: abandoned.
        plane.kubectl("patch", "lease", claim_name(key), "-n", namespace, "--type=merge", "-p",
                      json.dumps({"spec": {"renewTime": _stamp(300)}}))
        reply = request(srv.url, "POST", "/webhooks/alertmanager", body, am_headers())
        assert reply.status == 202, reply.body
        incident = reply.body["alerts"][0]["incident"]
        srv.wait_idle()
        lease = plane.get("lease", claim_name(key), namespace=namespace)
        assert lease["spec"]["holderIdentity"] == "replica-a" and lease["spec"]["leaseTransitions"] == 1
        assert lease["metadata"]["annotations"]["runbook/state"] == COMMITTED
        assert lease["metadata"]["annotations"]["runbook/incident"] == incident
        assert [e.type for e in journal(tmp_path / "state", incident)].count(ev.ACTION_APPLIED) == 1
        # The run held the incident's Lease and gave it back: created, then deleted, by runbook.
        incident_leases = [(e["verb"], e["responseStatus"]["code"]) for e in plane.audit(namespace)
                           if e["objectRef"].get("resource") == "leases"
                           and (e["objectRef"].get("name") or "").startswith("runbook-incident-")]
        assert [verb for verb, _ in incident_leases if verb in ("create", "delete")] == ["create", "delete"]
        assert not [x for x in _leases(plane, namespace) if x["metadata"]["name"].startswith("runbook-incident-")]


def test_a_delivery_committed_by_another_replica_is_a_duplicate_here(plane, namespace, shared, tmp_path):
    body = am_group()
    _claim(plane, namespace, _event_key(body), holder="replica-b", state=COMMITTED, incident="inc-elsewhere")
    with serving(tmp_path / "state", config=CONFIG, coordination=shared) as srv:
        for _ in range(2):  # the second answer comes from the local store
            reply = request(srv.url, "POST", "/webhooks/alertmanager", body, am_headers())
            assert reply.status == 200 and reply.body["alerts"] == [{"verdict": "duplicate", "incident": "inc-elsewhere"}]
        srv.wait_idle()
        assert srv.service.store.incidents() == []


def test_an_incident_opened_by_another_replica_is_recorded_here_not_run(plane, namespace, shared, tmp_path):
    # Another event of this incident reached replica-b first, which opened it (its event key differs).
    second = am_group()
    inbound = alertmanager.parse(second).inbound[0]
    _claim(plane, namespace, f"incident|{inbound.incident_key}", holder="replica-b", state=COMMITTED)
    with serving(tmp_path / "state", config=CONFIG, coordination=shared) as srv:
        reply = request(srv.url, "POST", "/webhooks/alertmanager", second, am_headers())
        assert reply.status == 202 and reply.body["alerts"][0]["verdict"] == "elsewhere", reply.body
        srv.wait_idle()
        incident = reply.body["alerts"][0]["incident"]
        assert srv.service.store.incident(incident).state == "elsewhere"
        assert not any(e.type == ev.RUN_STARTED for e in journal(tmp_path / "state", incident))


def test_a_run_waits_while_another_replica_holds_the_incident_lock(namespace, shared, kubeconfig, tmp_path):
    body = am_group()
    other = identity.connect(kubeconfig)  # replica-b's own connection, as the same service account
    try:
        with serving(tmp_path / "state", config=CONFIG, coordination=shared) as srv:
            locks = LeaseLocks(other, namespace=namespace)
            inbound = alertmanager.parse(body).inbound[0]
            expected = incident_id(inbound.occurred_at, "test-oom", inbound.incident_key)
            with locks.hold(f"incident/{expected}", holder="replica-b"):
                reply = request(srv.url, "POST", "/webhooks/alertmanager", body, am_headers())
                assert reply.status == 202
                incident = reply.body["alerts"][0]["incident"]
                assert incident == expected
                srv.wait_idle()
                assert srv.service.store.incident(incident).state == "pending"
                assert not any(e.type == ev.RUN_STARTED for e in journal(tmp_path / "state", incident))
            srv.service.sweep()  # the sweeper offers it again once the lock is free
            srv.wait_idle()
            assert srv.service.store.incident(incident).state == "done"
    finally:
        other.close()
