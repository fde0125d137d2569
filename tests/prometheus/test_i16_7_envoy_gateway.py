"""Issue 16, item 7 (5xx by profile): vLLM behind Envoy Gateway. Envoy's cluster stats carry no
namespace of vLLM's, so profile `envoy-gateway` maps a playbook's `namespace` onto the route's
cluster name (`httproute/<namespace>/<route>/rule/<n>`, a `label_patterns` entry); the value is
checked and regex-escaped, and read back when a rule groups by namespace. A real Prometheus over a
backfilled series set answers the rendered queries (firing, quiet, another namespace's route apart)
and `promtool test rules` fires the exported 503 and timeout rules on their case only.
"""

from __future__ import annotations

import datetime as dt
import subprocess

import pytest
import yaml
from click.testing import CliRunner

from runbook.cli import main
from runbook.config import load_config
from runbook.errors import InvalidInput
from runbook.signals.catalog import build_catalog, bundled_profiles
from tests.prometheus.conftest import PrometheusServer, need_binary
from tests.prometheus.data import DAY, Line, Scenario, openmetrics

PROFILE = "envoy-gateway"
LLM = {"namespace": "llm"}
ROUTE = 'envoy_cluster_name=~"httproute/llm/.+",'


def catalog():
    return build_catalog(profile=PROFILE)


def test_the_profile_is_bundled_and_extends_vllm():
    assert PROFILE in bundled_profiles()
    signals = catalog().signals
    assert signals["http_503_per_min"].origin == f"profile {PROFILE}"
    assert signals["waiting_requests"].origin == "profile vllm"


def test_the_namespace_becomes_a_matcher_on_the_routes_cluster_name():
    assert catalog().render("http_503_per_min", LLM) == (
        f'sum(rate(envoy_cluster_upstream_rq{{{ROUTE}envoy_response_code="503"}}[1m]) * 60 '
        f"or 0 * rate(envoy_cluster_upstream_rq_xx{{{ROUTE[:-1]}}}[1m]))")
    assert catalog().render("timeout_failures_per_min", LLM) == (
        f"sum(rate(envoy_cluster_upstream_rq_timeout{{{ROUTE[:-1]}}}[1m]) * 60)")


def test_grouped_by_namespace_it_is_read_back_from_the_cluster_name():
    expr = catalog().render("timeout_failures_per_min", {}, ["namespace"])
    # Only Envoy Gateway's route clusters (a namespace in their name) are counted, each under its namespace.
    assert expr == ('sum by (namespace) (label_replace(rate(envoy_cluster_upstream_rq_timeout'
                    '{envoy_cluster_name=~"httproute/.+/.+"}[1m]) * 60, "namespace", "${runbook_value}", '
                    '"envoy_cluster_name", "httproute/(?P<runbook_value>.+?)/.+"))')


def test_a_value_is_checked_then_regex_escaped():
    expr = catalog().render("timeout_failures_per_min", {"namespace": "team.a+b"})
    assert 'envoy_cluster_name=~"httproute/team\\\\.a\\\\+b/.+"' in expr  # PromQL text: team\\.a\\+b
    with pytest.raises(InvalidInput, match="characters not allowed"):
        catalog().render("timeout_failures_per_min", {"namespace": 'llm"}) or vector(1'})
    with pytest.raises(InvalidInput, match="characters not allowed"):
        catalog().render("timeout_failures_per_min", {"namespace": "llm|.*"})


def test_the_source_query_uses_the_same_matcher():
    query = catalog().source_query("timeout_failures_per_min", LLM)
    assert query is not None and ROUTE[:-1] in query and 'namespace="llm"' not in query


def test_plain_envoy_maps_its_own_cluster_names_in_the_config_file(tmp_path):
    config = tmp_path / "runbook.yaml"
    config.write_text("signals:\n  profile: envoy-gateway\n  overrides:\n    timeout_failures_per_min:\n"
                      "      label_patterns: {namespace: {label: envoy_cluster_name, regex: 'vllm_{value}'}}\n")
    expr = build_catalog(load_config(str(config))).render("timeout_failures_per_min", LLM)
    assert expr == 'sum(rate(envoy_cluster_upstream_rq_timeout{envoy_cluster_name=~"vllm_llm"}[1m]) * 60)'


@pytest.mark.parametrize(("pattern", "message"), [
    ("{label: envoy_cluster_name, regex: 'httproute/.+'}", "must hold {value} exactly once"),
    ("{label: envoy_cluster_name, regex: '{value}/{value}'}", "must hold {value} exactly once"),
    ("{label: envoy_cluster_name, regex: 'httproute/({value}/.+'}", "is not a regular expression"),
    ("{label: 'envoy-cluster', regex: '{value}'}", "not a valid Prometheus label name"),
])
def test_a_bad_pattern_is_refused_where_it_is_written(tmp_path, pattern, message):
    config = tmp_path / "runbook.yaml"
    config.write_text("signals:\n  profile: envoy-gateway\n  overrides:\n    timeout_failures_per_min:\n"
                      f"      label_patterns: {{namespace: {pattern}}}\n")
    with pytest.raises(InvalidInput) as caught:
        build_catalog(load_config(str(config)))
    assert message in str(caught.value) and "runbook.yaml:" in str(caught.value)


def test_a_label_both_renamed_and_patterned_is_refused(tmp_path):
    config = tmp_path / "runbook.yaml"
    config.write_text("signals:\n  profile: envoy-gateway\n  overrides:\n    timeout_failures_per_min:\n"
                      "      labels: {namespace: exported_namespace}\n")
    with pytest.raises(InvalidInput, match="both `labels` and `label_patterns` map namespace"):
        build_catalog(load_config(str(config)))


def test_runbook_signals_names_the_profile():
    result = CliRunner().invoke(main, ["signals", "--profile", PROFILE, "--output", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    import json

    rows = {r["name"]: r for r in json.loads(result.stdout)["signals"]}
    assert rows["http_503_per_min"]["label_patterns"] == {
        "namespace": {"label": "envoy_cluster_name", "regex": "httproute/{value}/.+"}}


# -- against a real Prometheus -----------------------------------------------------------------

AT = dt.datetime(2026, 4, 2, 10, 30, tzinfo=dt.timezone.utc)


def _envoy(pod: str, cluster: str) -> dict[str, str]:
    # What a PodMonitor scraping Envoy Gateway's proxies adds: the proxy pod's own namespace and pod.
    return {"namespace": "envoy-gateway-system", "pod": pod, "job": "envoy-gateway-system/envoy-proxy",
            "envoy_cluster_name": cluster}


def _route(cluster: str, ok_per_min: float, errors_503: list, timeouts: list) -> list[Line]:
    lines = []
    for pod in ("envoy-default-eg-e41e7b31-7b9f8d-x2k4p", "envoy-default-eg-e41e7b31-7b9f8d-q8w2n"):
        labels = _envoy(pod, cluster)
        lines += [Line("envoy_cluster_upstream_rq_xx", {**labels, "envoy_response_code_class": "2"}, "counter",
                       [(-2 * DAY, ok_per_min)], start=5.1e5),
                  Line("envoy_cluster_upstream_rq", {**labels, "envoy_response_code": "200"}, "counter",
                       [(-2 * DAY, ok_per_min)], start=5.1e5),
                  Line("envoy_cluster_upstream_rq_timeout", labels, "counter", timeouts, start=2)]
        if errors_503:  # Envoy creates upstream_rq_503 with the first 503 it counts
            lines += [Line("envoy_cluster_upstream_rq_xx", {**labels, "envoy_response_code_class": "5"}, "counter",
                           errors_503, start=0),
                      Line("envoy_cluster_upstream_rq", {**labels, "envoy_response_code": "503"}, "counter",
                           errors_503, start=0)]
    return lines


def _scenario() -> Scenario:
    # llm's route: each of the two proxies answers 503 four times a minute and times out 3 times a minute
    # from 6 minutes before AT; yesterday it was quiet. team-b's route times out all the time; an
    # ext-auth cluster (not a route) fails too.
    lines = _route("httproute/llm/vllm/rule/0", 300, [(-360, 4)], [(-2 * DAY, 0), (-360, 3)])
    lines += _route("httproute/team-b/vllm/rule/0", 120, [], [(-2 * DAY, 9)])
    lines += [Line("envoy_cluster_upstream_rq_timeout", _envoy("envoy-default-eg-e41e7b31-7b9f8d-x2k4p",
                                                               "securitypolicy/llm/ext-auth/0"), "counter",
                   [(-2 * DAY, 30)])]
    return Scenario("envoy-gateway", AT, frozenset({"zombie-process"}), (), tuple(lines))


@pytest.fixture(scope="module")
def envoy_prometheus(tmp_path_factory):
    promtool, prometheus = need_binary("promtool"), need_binary("prometheus")
    work = tmp_path_factory.mktemp("envoy-tsdb")
    (work / "envoy.om").write_text(openmetrics([_scenario()]))
    done = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(work / "envoy.om"),
                           str(work / "data")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    server = PrometheusServer(prometheus, work / "data", work)
    yield server
    server.stop()


@pytest.fixture
def prom(envoy_prometheus):
    from runbook.backends.prometheus.client import PrometheusMetrics
    from runbook.backends.prometheus.config import PrometheusSection

    backend = PrometheusMetrics(envoy_prometheus.url, catalog(), section=PrometheusSection(), env={})
    yield backend
    backend.close()


def test_the_routes_503s_and_timeouts_read_per_namespace(prom):
    [firing] = prom.query("http_503_per_min", at=AT, labels=LLM)
    assert firing.value == pytest.approx(8)  # 4 a minute from each of the two proxies
    [quiet] = prom.query("http_503_per_min", at=AT - dt.timedelta(days=1), labels=LLM)
    assert quiet.value == 0  # a reading, not nothing: the route serves without 503s
    [timeouts] = prom.query("timeout_failures_per_min", at=AT, labels=LLM)
    assert timeouts.value == pytest.approx(6)
    [yesterday] = prom.query("timeout_failures_per_min", at=AT - dt.timedelta(days=1), labels=LLM)
    assert yesterday.value == 0


def test_grouped_by_namespace_each_route_counts_under_its_own(prom):
    by_namespace = {s.labels.get("namespace"): s.value for s in
                    prom.query("timeout_failures_per_min", at=AT, by=["namespace"])}
    # team-b's 18 a minute stay team-b's; the ext-auth cluster, in no route, is not counted at all.
    assert by_namespace == {"llm": pytest.approx(6), "team-b": pytest.approx(18)}
    errors = {s.labels.get("namespace"): s.value for s in prom.query("http_503_per_min", at=AT, by=["namespace"])}
    assert errors == {"llm": pytest.approx(8), "team-b": 0}


def test_the_source_is_found_for_the_namespace(prom):
    from runbook.triage.sources import missing_sources

    assert missing_sources(prom, "http_503_per_min", LLM, AT) == {}
    missing = missing_sources(prom, "http_503_per_min", {"namespace": "nowhere"}, AT)
    assert missing and "envoy_cluster_upstream_rq_xx" in missing


def test_the_exported_rules_fire_on_the_envoy_series_only(tmp_path):
    out = tmp_path / "runbook-rules.yaml"
    result = CliRunner().invoke(main, ["rules", "--profile", PROFILE, "-f", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rules = {r["alert"]: r for g in yaml.safe_load(out.read_text())["groups"] for r in g["rules"]}
    route = 'envoy_cluster_name="httproute/llm/vllm/rule/0",namespace="envoy-gateway-system",pod="envoy-0"'
    other = 'envoy_cluster_name="httproute/team-b/vllm/rule/0",namespace="envoy-gateway-system",pod="envoy-0"'
    test = {"rule_files": [out.name], "evaluation_interval": "15s", "tests": [{
        "interval": "15s",
        "input_series": [
            {"series": f'envoy_cluster_upstream_rq_xx{{{route},envoy_response_code_class="2"}}', "values": "0+80x80"},
            {"series": f'envoy_cluster_upstream_rq{{{route},envoy_response_code="503"}}', "values": "_x20 0+2x60"},
            {"series": f'envoy_cluster_upstream_rq_timeout{{{route}}}', "values": "0x20 0+3x60"},
            {"series": f'envoy_cluster_upstream_rq_xx{{{other},envoy_response_code_class="2"}}', "values": "0+80x80"},
            {"series": f'envoy_cluster_upstream_rq_timeout{{{other}}}', "values": "0x80"}],
        "alert_rule_test": [
            *({"eval_time": "4m", "alertname": name, "exp_alerts": []}
              for name in ("VllmHigh503Rate", "VllmRequestTimeouts")),
            {"eval_time": "12m", "alertname": "VllmHigh503Rate", "exp_alerts": [{
                "exp_labels": {"namespace": "llm", "severity": "critical", "priority": "P1",
                               "runbook_playbook": "zombie-process"},
                "exp_annotations": rules["VllmHigh503Rate"]["annotations"]}]},
            {"eval_time": "12m", "alertname": "VllmRequestTimeouts", "exp_alerts": [{
                "exp_labels": {"namespace": "llm", "severity": "warning", "priority": "P2",
                               "runbook_playbook": "waiting-queue"},
                "exp_annotations": rules["VllmRequestTimeouts"]["annotations"]}]}]}]}
    (tmp_path / "envoy.test.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    done = subprocess.run([need_binary("promtool"), "test", "rules", str(tmp_path / "envoy.test.yaml")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, rules["VllmHigh503Rate"]["expr"] + "\n" + done.stdout + done.stderr



def _triage(url: str, at: dt.datetime) -> tuple[int, dict]:
    import json

    result = CliRunner().invoke(main, ["triage", "--profile", PROFILE, "--prometheus-url", url, "--output", "json",
                                       "--at", at.isoformat()], catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout)


def test_triage_finds_the_zombie_process_from_envoys_503s(envoy_prometheus):
    code, doc = _triage(envoy_prometheus.url, AT)
    assert code == 10
    [zombie] = [f for f in doc["firing"] if f["playbook"] == "zombie-process"]
    assert zombie["signal"] == "http_503_per_min" and zombie["value"] == pytest.approx(8)
    _, yesterday = _triage(envoy_prometheus.url, AT - dt.timedelta(days=1))
    [quiet] = [f for f in yesterday["quiet"] if f["playbook"] == "zombie-process"]
    assert quiet["value"] == 0


def test_an_unknown_profile_names_the_bundled_ones():
    result = CliRunner().invoke(main, ["signals", "--profile", "envoy"])
    assert result.exit_code == 3 and "envoy-gateway" in result.output
