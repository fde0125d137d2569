"""Finding 6: alert labels and `-p` values are data, screened by one rule before any backend is built."""

from __future__ import annotations

import pytest

from runbook.text import intake_values
from runbook.errors import InvalidInput
from runbook.webhook import alertmanager
from runbook.webhook.routing import Router
from tests.safety.closed_backends import closed_backends
from tests.webhook.helpers import am_group, playbook

HOSTILE = ["{{ 7*7 }}", "; rm -rf /", "{% for i in range(10) %}x{% endfor %}", "llm\n", "$(id)", "a" * 64, ""]


@pytest.mark.parametrize("value", HOSTILE)
def test_f6_a_hostile_alert_label_exits_3_naming_it_before_any_backend(value, tmp_path, monkeypatch):
    backends = closed_backends(tmp_path, monkeypatch)
    result = backends.invoke("run", "oom-surge", "--alert", str(backends.alert({"namespace": value})))
    assert result.exit_code == 3, result.output
    assert "alert label namespace=" in result.stderr and "param namespace" in result.stderr
    assert backends.built == [] and backends.incidents(tmp_path / "state") == []


def test_f6_the_refusal_shows_the_value_escaped(tmp_path, monkeypatch):
    backends = closed_backends(tmp_path, monkeypatch)
    result = backends.invoke("run", "oom-surge", "--alert", str(backends.alert({"namespace": "llm\n\x1b[31m"})))
    assert result.exit_code == 3
    assert "'llm\\n\\x1b[31m'" in result.stderr and "\x1b" not in result.stderr


@pytest.mark.parametrize("pair", ["workload={{ 7*7 }}", "container=vllm; rm -rf /", "selector=", "observe=5m 5m"])
def test_f6_a_hostile_param_flag_exits_3_naming_it_before_any_backend(pair, tmp_path, monkeypatch):
    backends = closed_backends(tmp_path, monkeypatch)
    result = backends.invoke("run", "oom-surge", "-p", pair)
    assert result.exit_code == 3, result.output
    assert f"--param {pair.partition('=')[0]}=" in result.stderr
    assert backends.built == [] and backends.incidents(tmp_path / "state") == []


def test_f6_a_hostile_namespace_flag_exits_3(tmp_path, monkeypatch):
    backends = closed_backends(tmp_path, monkeypatch)
    result = backends.invoke("run", "oom-surge", "--namespace", "{{ 7*7 }}")
    assert result.exit_code == 3 and "--namespace" in result.stderr
    assert backends.built == []


@pytest.mark.parametrize("value", ["statefulset/vllm-server", "app=vllm-server,tier=gpu", "/health", "0.9", "5m",
                                   "gpu-node-2", "-1"])
def test_f6_param_flags_take_names_paths_and_selectors(value):
    assert intake_values.screen_param("x", value) == value


def test_f6_labels_take_only_label_values():
    assert intake_values.params_from_labels({"namespace": "namespace"}, {"namespace": "llm", "pod": "{{ x }}"}) == \
        ({"namespace": "llm"}, {"namespace": "alert label namespace"})
    with pytest.raises(InvalidInput, match="alert label namespace="):
        intake_values.params_from_labels({"namespace": "namespace"}, {"namespace": "statefulset/x"})


@pytest.mark.parametrize("value", HOSTILE)
def test_f6_the_webhook_refuses_with_the_same_screen(value):
    inbound = alertmanager.parse(am_group(namespace=value)).inbound[0]
    route = Router([playbook()]).route(inbound)
    with pytest.raises(InvalidInput) as raised:
        intake_values.params_from_labels(playbook().match.labels, inbound.alert.labels)
    assert route.refused == str(raised.value) and route.params == {}
