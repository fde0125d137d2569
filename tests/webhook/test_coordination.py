"""`--coordination kubernetes` in one process, against the test API server: claims in flight
elsewhere (503), committed elsewhere (duplicate), abandoned (taken over), the API down (503, nothing
kept), the incident lock held by another replica (the run waits), and the CLI's refusals."""

from __future__ import annotations

import datetime as dt
import gc

import pytest
from click.testing import CliRunner

from runbook.cli.serve import serve
from runbook.backends.kubernetes.leases import LeaseLocks
from runbook.model import events as ev
from runbook.webhook import alertmanager
from runbook.backends.kubernetes.claims import COMMITTED, KubernetesCoordination, claim_name
from runbook.webhook.intake import incident_id
from runbook.webhook.settings import Policy, WebhookConfig
from tests.kubernetes.conftest import connect_cluster
from tests.webhook.helpers import am_group, am_headers, journal, request, serve as serving

CONFIG = WebhookConfig(workers=1, policy=Policy(unattended={"test-oom": ["scale-down"]}))


@pytest.fixture
def shared(kubeconfig):
    cluster = connect_cluster(kubeconfig, retries=1, max_retry_wait=2)
    yield KubernetesCoordination(cluster, namespace="llm", identity="replica-a")
    cluster.close()
    gc.collect()


def _stamp(seconds_ago: float) -> str:
    return (dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _claim(k8s, key: str, *, holder: str, state: str, seconds_ago: float = 0, incident: str = "") -> None:
    k8s.apply({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": claim_name(key), "namespace": "llm",
                            "annotations": {"runbook/key": key, "runbook/state": state, "runbook/incident": incident}},
               "spec": {"holderIdentity": holder, "leaseDurationSeconds": 60, "renewTime": _stamp(seconds_ago)}})


def _event_key(body: bytes) -> str:
    return alertmanager.parse(body).inbound[0].event_key


def test_a_claim_in_flight_elsewhere_is_503_and_an_abandoned_one_is_taken_over(k8s, shared, tmp_path):
    body = am_group()
    key = _event_key(body)
    _claim(k8s, key, holder="replica-b", state="claimed")
    with serving(tmp_path / "state", config=CONFIG, coordination=shared) as srv:
        reply = request(srv.url, "POST", "/webhooks/alertmanager", body, am_headers())
        assert reply.status == 503 and reply.headers["retry-after"] == "5", reply.body
        assert "another replica" in reply.body["error"]
        assert not (tmp_path / "state" / "incidents").exists() or not any((tmp_path / "state" / "incidents").iterdir())

        k8s.edit("Lease", "llm", claim_name(key), lambda lease: lease["spec"].update(renewTime=_stamp(300)))
        reply = request(srv.url, "POST", "/webhooks/alertmanager", body, am_headers())
        assert reply.status == 202, reply.body
        incident = reply.body["alerts"][0]["incident"]
        srv.wait_idle()
        lease = k8s.get("Lease", "llm", claim_name(key))
        assert lease["spec"]["holderIdentity"] == "replica-a" and lease["spec"]["leaseTransitions"] == 1
        assert lease["metadata"]["annotations"]["runbook/state"] == COMMITTED
        assert lease["metadata"]["annotations"]["runbook/incident"] == incident
        assert [e.type for e in journal(tmp_path / "state", incident)].count(ev.ACTION_APPLIED) == 1
        # The run held the incident's Lease and gave it back.
        assert not [lease for lease in k8s.objects("Lease") if lease["metadata"]["name"].startswith("runbook-incident-")]


def test_a_delivery_committed_by_another_replica_is_a_duplicate_here(k8s, shared, tmp_path):
    body = am_group()
    _claim(k8s, _event_key(body), holder="replica-b", state=COMMITTED, incident="inc-elsewhere")
    with serving(tmp_path / "state", config=CONFIG, coordination=shared) as srv:
        for _ in range(2):  # the second answer comes from the local store
            reply = request(srv.url, "POST", "/webhooks/alertmanager", body, am_headers())
            assert reply.status == 200 and reply.body["alerts"] == [{"verdict": "duplicate", "incident": "inc-elsewhere"}]
        srv.wait_idle()
        assert srv.service.store.incidents() == []


def test_an_incident_opened_by_another_replica_is_recorded_here_not_run(k8s, shared, tmp_path):
    # Another event of this incident reached replica-b first, which opened it (its event key differs).
    second = am_group()
    inbound = alertmanager.parse(second).inbound[0]
    _claim(k8s, f"incident|{inbound.incident_key}", holder="replica-b", state=COMMITTED)
    with serving(tmp_path / "state", config=CONFIG, coordination=shared) as srv:
        reply = request(srv.url, "POST", "/webhooks/alertmanager", second, am_headers())
        assert reply.status == 202 and reply.body["alerts"][0]["verdict"] == "elsewhere", reply.body
        srv.wait_idle()
        incident = reply.body["alerts"][0]["incident"]
        assert srv.service.store.incident(incident).state == "elsewhere"
        assert not any(e.type == ev.RUN_STARTED for e in journal(tmp_path / "state", incident))


def test_when_the_api_is_down_the_sender_retries_and_nothing_is_kept(k8s, shared, tmp_path):
    body = am_group()
    k8s.inject(method="POST", path=r"/leases$", status=503, times=2)  # the first try and its retry
    with serving(tmp_path / "state", config=CONFIG, coordination=shared) as srv:
        reply = request(srv.url, "POST", "/webhooks/alertmanager", body, am_headers())
        assert reply.status == 503 and "shared dedupe state" in reply.body["error"], reply.body
        assert srv.service.store.seen_count() == 0
        # A lost answer to the commit: the claims are released, so the retry starts clean.
        k8s.inject(method="PUT", path=r"/leases/", status=500, times=2)
        reply = request(srv.url, "POST", "/webhooks/alertmanager", body, am_headers())
        assert reply.status == 503 and srv.service.store.seen_count() == 0
        assert not [lease for lease in k8s.objects("Lease") if lease["metadata"]["name"].startswith("runbook-seen-")]
        reply = request(srv.url, "POST", "/webhooks/alertmanager", body, am_headers())
        assert reply.status == 202, reply.body
        srv.wait_idle()


def test_a_run_waits_while_another_replica_holds_the_incident_lock(k8s, shared, kubeconfig, tmp_path):
    body = am_group()
    other = connect_cluster(kubeconfig)
    try:
        with serving(tmp_path / "state", config=CONFIG, coordination=shared) as srv:
            locks = LeaseLocks(other, namespace="llm")
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


def test_the_cli_refuses_kubernetes_coordination_without_a_cluster(monkeypatch, tmp_path):
    monkeypatch.setenv("RUNBOOK_ALERTMANAGER_TOKEN", "am-token-0123456789abcdef")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    (tmp_path / "empty.yaml").write_text("{}\n")
    result = CliRunner().invoke(serve, ["--coordination", "kubernetes", "--config", str(tmp_path / "empty.yaml")])
    assert result.exit_code == 2, result.output
    assert "--coordination kubernetes needs a cluster" in result.output
