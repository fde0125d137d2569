"""Finding 8: runbook acts only in allowed namespaces (`kubernetes.namespaces`, else the playbook's own)."""

from __future__ import annotations

import json

import pytest

from runbook.backends.base import World
from runbook.clock import FakeClock
from runbook.config import Config
from runbook.engine.namespaces import allowed_namespaces, check_namespace
from runbook.errors import Refused
from runbook.record.journal import read_journal
from runbook.model import events as ev
from runbook.sim.fakes import ContainerSpec, FakeCluster, FakeMetrics, FakeWorkload
from runbook.webhook import alertmanager
from runbook.webhook.routing import Router
from runbook.webhook.service import Service
from runbook.webhook.settings import WebhookConfig
from tests.safety.closed_backends import closed_backends
from tests.webhook.helpers import am_group, playbook, secrets


def test_f8_a_kube_system_label_exits_4_naming_it_before_any_backend(tmp_path, monkeypatch):
    backends = closed_backends(tmp_path, monkeypatch)
    result = backends.invoke("run", "oom-surge", "--alert", str(backends.alert({"namespace": "kube-system"})))
    assert result.exit_code == 4, result.output
    assert "'kube-system' (from alert label namespace)" in result.stderr
    assert "kubernetes.namespaces" in result.stderr
    assert backends.built == [] and backends.incidents(tmp_path / "state") == []


@pytest.mark.parametrize("flags, source", [(("-p", "namespace=kube-system"), "--param namespace"),
                                           (("--namespace", "kube-system"), "--namespace")])
def test_f8_a_namespace_flag_outside_the_list_exits_4(flags, source, tmp_path, monkeypatch):
    backends = closed_backends(tmp_path, monkeypatch)
    result = backends.invoke("run", "oom-surge", *flags)
    assert result.exit_code == 4 and f"(from {source})" in result.stderr
    assert backends.built == []


def test_f8_the_configured_list_replaces_the_playbooks_namespace(tmp_path, monkeypatch):
    backends = closed_backends(tmp_path, monkeypatch)
    default = backends.invoke("run", "oom-surge", "--dry-run", namespaces=["serving"])
    assert default.exit_code == 4 and "'llm' (from the playbook's default namespace param)" in default.stderr
    allowed = backends.invoke("run", "oom-surge", "--dry-run", "--alert", str(backends.alert({"namespace": "serving"})),
                              namespaces=["serving"])
    assert allowed.exit_code != 4, allowed.output  # past the check: the closed backends fail the run instead
    assert backends.built == ["real_world"]


def test_f8_triage_run_checks_the_namespace_before_the_run(tmp_path, monkeypatch):
    backends = closed_backends(tmp_path, monkeypatch)
    result = backends.invoke("triage", "--run", "--playbook", "oom-surge", "--namespace", "kube-system")
    assert result.exit_code == 4 and "(from --namespace)" in result.stderr
    assert backends.built == [] and backends.incidents(tmp_path / "state") == []


def test_f8_the_allow_list_defaults_to_the_playbooks_namespace():
    assert allowed_namespaces({"namespace": "llm"}, None) == {"llm"}
    assert allowed_namespaces({"namespace": "llm"}, ["a", "b"]) == {"a", "b"}
    assert allowed_namespaces({}, None) == frozenset()
    with pytest.raises(Refused, match="'kube-system' \\(from step scale\\).*allowed: llm.*kubernetes.namespaces"):
        check_namespace("kube-system", frozenset({"llm"}), source="step scale")
    check_namespace("llm", frozenset({"llm"}), source="step scale")


def test_f8_the_config_reads_the_list_apart_from_the_backend_section():
    config = Config(None, {"kubernetes": {"namespaces": ["llm", "serving"], "context": "prod"}})
    assert config.namespaces() == ("llm", "serving") and config.section("kubernetes") == {"context": "prod"}
    alone = Config(None, {"kubernetes": {"namespaces": ["llm"]}})
    assert "kubernetes" not in alone.sections  # a list of namespaces alone does not ask for a cluster


def test_f8_the_config_refuses_a_bad_list(tmp_path):
    from runbook.config import load_config
    from runbook.errors import InvalidInput

    path = tmp_path / "runbook.yaml"
    path.write_text("kubernetes:\n  namespaces: [llm, Kube_System]\n")
    with pytest.raises(InvalidInput, match="runbook.yaml:2:.*kubernetes.namespaces"):
        load_config(path)


def test_f8_the_webhook_router_refuses_a_namespace_outside_the_list():
    kube_system = alertmanager.parse(am_group(namespace="kube-system")).inbound[0]
    route = Router([playbook()]).route(kube_system)
    assert route.params == {} and "'kube-system' (from alert label namespace)" in route.refused
    serving = alertmanager.parse(am_group(namespace="serving")).inbound[0]
    assert Router([playbook()], allowed_namespaces=["llm", "serving"]).route(serving).params["namespace"] == "serving"


def _service(tmp_path, namespaces):
    workload = FakeWorkload("statefulset", "vllm-server", "serving", 3, {"app": "vllm-server"},
                            [ContainerSpec("vllm", ("python3",), ("--max-model-len", "8192"))], [True] * 3)
    cluster = FakeCluster([workload])
    world = World(metrics=FakeMetrics({"oom_failures_per_min": lambda at: 4.0}), cluster=cluster)
    return Service(config=WebhookConfig(workers=1), secrets=secrets(), state=tmp_path / "state", world=world,
                   playbooks=[playbook()], clock=FakeClock(), env={}, sweeper=False, namespaces=namespaces)


def test_f8_the_webhook_journals_the_refusal_and_runs_nothing(tmp_path):
    service = _service(tmp_path, None)
    try:
        ack = service.accept(alertmanager.parse(am_group(namespace="kube-system")))
    finally:
        service.store.close()
    assert ack.queued == ()
    incident = json.dumps(ack.body)
    assert "refused" in incident
    journals = list((tmp_path / "state" / "incidents").glob("*/journal.jsonl"))
    events = [e for path in journals for e in read_journal(path).events]
    assert [e.type for e in events] == [ev.ALERT_RECEIVED, ev.NOTE]
    assert "kube-system" in events[1].data["message"] and "kubernetes.namespaces" in events[1].data["message"]


def test_f8_the_webhook_gives_the_engine_the_configured_list(tmp_path):
    service = _service(tmp_path, ["serving"])
    try:
        service.start()
        ack = service.accept(alertmanager.parse(am_group(namespace="serving")))
        assert len(ack.queued) == 1
        assert service.worker.wait_idle(30)
    finally:
        service.stop()
        service.store.close()
    events = read_journal(next((tmp_path / "state" / "incidents").glob("*/journal.jsonl"))).events
    refusals = [e for e in events if e.type == ev.GUARD_REFUSED]
    assert all(e.data.get("guard") != "namespace" for e in refusals), refusals
    assert any(e.type == ev.ACTION_PLANNED and "serving" in json.dumps(e.data) for e in events)
