"""`--coordination kubernetes` where the real apiserver cannot be made to fail on demand: the Lease API
down (503, nothing kept) through the fault-injecting stand-in, and the CLI's refusal without a cluster.
The claims and locks on real Leases are in tests/controlplane/test_coordination.py."""

from __future__ import annotations

import gc

import pytest
from click.testing import CliRunner

from runbook.cli.serve import serve
from runbook.backends.kubernetes.claims import KubernetesCoordination
from runbook.webhook.settings import Policy, WebhookConfig
from tests.standin.conftest import connect_cluster
from tests.webhook.helpers import am_group, am_headers, request, serve as serving

CONFIG = WebhookConfig(workers=1, policy=Policy(unattended={"test-oom": ["scale-down"]}))


@pytest.fixture
def shared(kubeconfig):
    cluster = connect_cluster(kubeconfig, retries=1, max_retry_wait=2)
    yield KubernetesCoordination(cluster, namespace="llm", identity="replica-a")
    cluster.close()
    gc.collect()


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


def test_the_cli_refuses_kubernetes_coordination_without_a_cluster(monkeypatch, tmp_path):
    monkeypatch.setenv("RUNBOOK_ALERTMANAGER_TOKEN", "am-token-0123456789abcdef")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    (tmp_path / "empty.yaml").write_text("{}\n")
    result = CliRunner().invoke(serve, ["--coordination", "kubernetes", "--config", str(tmp_path / "empty.yaml")])
    assert result.exit_code == 2, result.output
    assert "--coordination kubernetes needs a cluster" in result.output
