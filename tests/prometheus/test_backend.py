"""The Prometheus `Metrics` backend against a real server, and against servers that misbehave.

Silence is never health: every failure raises, within the configured time, with a message
that says what to do.
"""

from __future__ import annotations

import datetime as dt
import shutil
import ssl
import subprocess
import time

import pytest

from runbook.backends.prometheus.client import PrometheusMetrics, connect
from runbook.backends.prometheus.config import PrometheusSection
from runbook.config import EMPTY, load_config
from runbook.errors import BackendError, BackendUnavailable, InvalidInput
from runbook.signals.catalog import build_catalog
from tests.conftest import missing_integration
from tests.prometheus.data import SCENARIOS
from tests.prometheus.servers import Erring, Hanging

OOM, QUEUE, ZOMBIE, CUDA = (SCENARIOS[n] for n in ("oom-surge", "waiting-queue", "zombie-process",
                                                   "lingering-cuda-context"))
LLM = {"namespace": "llm"}


def metrics(url: str, env: dict[str, str] | None = None, **section) -> PrometheusMetrics:
    return PrometheusMetrics(url, build_catalog(), section=PrometheusSection(**section), env=env or {})


@pytest.fixture
def prom(prometheus):
    backend = metrics(prometheus.url)
    yield backend
    backend.close()


def test_a_signal_is_one_aggregated_sample_without_by(prom):
    [sample] = prom.query("waiting_requests", at=QUEUE.at, labels=LLM)
    # 26 + 27 + 27: the hung pod's series went stale, it is not counted.
    assert sample.value == 80 and sample.labels == {}


def test_by_groups_with_the_playbooks_label_names(prom):
    samples = prom.query("kv_cache_usage", at=OOM.at, labels=LLM, by=["pod"])
    assert {s.labels["pod"]: s.value for s in samples} == {"vllm-server-0": 0.97, "vllm-server-1": 0.96,
                                                           "vllm-server-2": 0.98}
    gpus = prom.query("gpu_memory_used_ratio", at=CUDA.at, labels={"node": "gpu-node-3"}, by=["node", "gpu"])
    assert {(s.labels["node"], s.labels["gpu"]): round(s.value, 3) for s in gpus} == {
        ("gpu-node-3", "0"): 0.84, ("gpu-node-3", "1"): 0.979}


def test_the_older_kv_cache_metric_name_still_answers(prom):
    # The waiting-queue cluster runs vLLM 0.8.5: only vllm:gpu_cache_usage_perc exists there.
    [sample] = prom.query("kv_cache_usage", at=QUEUE.at, labels=LLM)
    assert sample.value == pytest.approx(0.91)


def test_oom_failures_come_from_log_lines_and_are_zero_when_vllm_is_up_without_them(prom):
    [during] = prom.query("oom_failures_per_min", at=OOM.at, labels=LLM)
    [before] = prom.query("oom_failures_per_min", at=OOM.quiet_at, labels=LLM)
    assert during.value > 15 and before.value == 0
    reasons = {s.labels.get("reason"): s.value for s in
               prom.query("failed_requests_per_min", at=OOM.at, labels=LLM, by=["reason"])}
    assert set(reasons) == {"oom", "abort"} and reasons["oom"] == during.value


def test_range_queries_give_timed_points(prom):
    start = ZOMBIE.at - dt.timedelta(minutes=10)
    [series] = prom.query_range("http_503_per_min", start=start, end=ZOMBIE.at, step_seconds=60, labels=LLM)
    assert [t for t, _ in series.points] == [start + dt.timedelta(minutes=k) for k in range(11)]
    assert series.points[0][1] == 0 and series.points[-1][1] > 5


def test_no_data_is_an_empty_answer_not_an_error(prom):
    assert prom.query("waiting_requests", at=QUEUE.at, labels={"namespace": "nowhere"}) == []
    # A quantile of no requests is NaN: no value, rather than a number.
    assert prom.query("queue_time_p99_seconds", at=QUEUE.at, labels=LLM) == []  # a histogram this data lacks


def test_bad_promql_shows_the_servers_message_and_the_query(prom):
    with pytest.raises(InvalidInput) as caught:
        prom.query_promql("sum(rate(x[1m])", at=QUEUE.at)
    assert "parse error" in str(caught.value) and "query: sum(rate(x[1m])" in str(caught.value)


def test_unknown_signal_is_refused_before_any_request(prom):
    with pytest.raises(InvalidInput, match="did you mean `waiting_requests`"):
        prom.query("waiting_request", at=QUEUE.at)


def test_a_range_finer_than_prometheus_allows_is_refused_locally(prom):
    with pytest.raises(InvalidInput, match="use a larger step"):
        prom.query_range("waiting_requests", start=QUEUE.at - dt.timedelta(days=3), end=QUEUE.at, step_seconds=1)


def test_connection_refused_is_unavailable_quickly():
    with Hanging() as server:
        url = server.url
    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match="is unreachable: Connection refused"):
        metrics(url, retries=1).query("waiting_requests", at=QUEUE.at)
    assert time.monotonic() - started < 3


def test_a_server_that_never_answers_times_out_as_configured():
    with Hanging() as server:
        started = time.monotonic()
        with pytest.raises(BackendUnavailable, match=r"did not answer within 0.5s"):
            metrics(server.url, timeout=0.5).query("waiting_requests", at=QUEUE.at)
        assert time.monotonic() - started < 2.5


def test_a_500_is_unavailable_with_the_servers_message():
    with Erring(500, "query processing would load too many samples into memory") as server:
        with pytest.raises(BackendUnavailable, match=r"could not answer \(HTTP 500\): query processing would load"):
            metrics(server.url).query("waiting_requests", at=QUEUE.at)
        assert len(server.requests) == 1  # not retried: Prometheus said what went wrong


def test_a_gateway_error_is_retried_a_bounded_number_of_times():
    with Erring(502, body=b"<html><body><h1>502 Bad Gateway</h1></body></html>", content_type="text/html") as server:
        with pytest.raises(BackendUnavailable, match="HTTP 502"):
            metrics(server.url, retries=2).query("waiting_requests", at=QUEUE.at)
        assert len(server.requests) == 3


@pytest.mark.parametrize(("status", "expected"), [(401, "refused access"), (403, "refused access"),
                                                  (404, "without /api/v1"), (422, "could not run signal")])
def test_client_errors_say_what_to_fix(status, expected):
    with Erring(status, "nope") as server:
        with pytest.raises(BackendError, match=expected) as caught:
            metrics(server.url).query("waiting_requests", at=QUEUE.at)
        assert not isinstance(caught.value, BackendUnavailable)


def test_an_answer_that_is_not_the_api_is_an_error():
    with Erring(200, body=b"<html>login</html>", content_type="text/html") as server:
        with pytest.raises(BackendError, match="not the Prometheus API"):
            metrics(server.url).query("waiting_requests", at=QUEUE.at)


def test_bearer_token_from_a_file_and_from_the_environment(tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    with Erring(401, "unauthorized") as server:
        with pytest.raises(BackendError):
            metrics(server.url, bearer_token_file=str(token)).query("waiting_requests", at=QUEUE.at)
        with pytest.raises(BackendError):
            metrics(server.url, env={"RUNBOOK_PROMETHEUS_TOKEN": "from-env"}).query("waiting_requests", at=QUEUE.at)
        with pytest.raises(BackendError):
            metrics(server.url, env={"PW": "pw1"}, basic_auth={"username": "oncall", "password_env": "PW"}).query(
                "waiting_requests", at=QUEUE.at)
    sent = [r["headers"].get("Authorization") for r in server.requests]
    assert sent == ["Bearer s3cret-token", "Bearer from-env", "Basic b25jYWxsOnB3MQ=="]


def test_a_missing_secret_fails_at_connect_with_the_variable_named():
    with pytest.raises(InvalidInput, match=r"\$PROM_TOKEN, which is not set"):
        metrics("http://127.0.0.1:1", bearer_token_env="PROM_TOKEN")


def test_connect_needs_a_url_from_the_flag_or_the_config(tmp_path, prometheus):
    assert connect(EMPTY, url=None, env={}) is None
    path = tmp_path / "runbook.yaml"
    path.write_text(f"prometheus:\n  url: {prometheus.url}/\n  timeout: 5s\nsignals: {{profile: article}}\n")
    backend = connect(load_config(path), url=None, env={})
    assert backend is not None and backend.url == prometheus.url and backend.section.timeout == 5
    assert backend.catalog.profile == "article"
    assert connect(load_config(path), url="http://127.0.0.1:9", env={}).url == "http://127.0.0.1:9"
    with pytest.raises(InvalidInput, match="not a Prometheus base URL"):
        connect(EMPTY, url="prometheus:9090", env={})


def test_config_section_problems_are_located(tmp_path):
    path = tmp_path / "runbook.yaml"
    path.write_text("prometheus:\n  url: http://p:9090\n  headers: {Authorization: Bearer x}\n  timout: 3s\n")
    with pytest.raises(InvalidInput) as caught:
        connect(load_config(path), url=None, env={})
    text = str(caught.value)
    assert "runbook.yaml:3:" in text and "no Authorization header here" in text
    assert "runbook.yaml:4:3  prometheus.timout" in text


@pytest.fixture
def certificate(tmp_path):
    """A throwaway self-signed certificate for 127.0.0.1 (openssl's CLI, when there is one)."""
    if shutil.which("openssl") is None:
        missing_integration("`openssl` is not installed: no certificate for the TLS test")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return cert, context


def test_tls_needs_the_servers_ca_and_says_so(certificate):
    cert, context = certificate
    with Erring(401, "who are you", tls=context) as server:
        with pytest.raises(BackendUnavailable, match="TLS failed .*set prometheus.tls.ca_file"):
            metrics(server.url).query("waiting_requests", at=QUEUE.at)
        with pytest.raises(BackendError, match="refused access"):  # the handshake passed: HTTP spoke
            metrics(server.url, tls={"ca_file": str(cert)}).query("waiting_requests", at=QUEUE.at)


def test_a_range_answers_points_parse_once_per_time_and_leave_nan_out():
    from runbook.backends.prometheus.client import range_points

    when: dict = {}
    first = range_points([[1780000000, "1.5"], [1780000015.5, "NaN"], [1780000030, "+Inf"]], when)
    second = range_points([[1780000000, "2"], [1780000030, "-3e2"]], when)
    assert first == ((dt.datetime(2026, 5, 28, 20, 26, 40, tzinfo=dt.timezone.utc), 1.5),
                     (dt.datetime(2026, 5, 28, 20, 27, 10, tzinfo=dt.timezone.utc), float("inf")))
    assert [v for _, v in second] == [2.0, -300.0]
    assert second[0][0] is first[0][0] and len(when) == 2  # the NaN's time was never converted
    with pytest.raises(ValueError):
        range_points([[1780000000, "many"]], {})
