"""Issue 15, item 2: triage tells apart "Prometheus could not be read" (11), "a signal this
playbook needs has no source here" (12, naming the exporter that would provide it) and quiet —
and no signal turns "no source" into 0. The cluster here is a plain vLLM deployment: vLLM's own
metrics, no DCGM exporter, no ingress-nginx, no kube-state-metrics, no log pipeline.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest
from click.testing import CliRunner

from runbook.backends.prometheus.client import PrometheusMetrics
from runbook.cli import main
from runbook.signals.catalog import build_catalog
from tests.prometheus.data import SCENARIOS, STOCK_VLLM

QUIET = STOCK_VLLM.at - dt.timedelta(minutes=30)


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def triage_json(url: str, at: dt.datetime, *args: str) -> tuple[int, dict]:
    result = invoke("triage", "--prometheus-url", url, "--output", "json", "--at", at.isoformat(), *args)
    return result.exit_code, json.loads(result.stdout)


def test_a_quiet_plain_vllm_is_no_source_never_blind_never_quiet(prometheus):
    code, doc = triage_json(prometheus.url, QUIET)
    assert code == 12
    assert doc["unknown"] == [] and doc["firing"] == []
    missing = {f["playbook"]: f for f in doc["no_source"]}
    assert set(missing) == {"oom-surge", "lingering-cuda-context"}
    assert missing["oom-surge"]["signal"] == "oom_failures_per_min"
    assert "vllm_log_errors_total" in missing["oom-surge"]["missing_sources"]
    assert "DCGM_FI_DEV_FB_USED" in missing["lingering-cuda-context"]["missing_sources"]
    # 503s are read from vLLM's own HTTP metrics where no gateway metric exists: 0, and truly so.
    quiet = {q["playbook"]: q for q in doc["quiet"]}
    assert set(quiet) == {"waiting-queue", "zombie-process", "disconnect-storm", "prompt-truncation", "latency-creep"}
    assert quiet["zombie-process"]["value"] == 0


def test_the_first_line_says_which_exporter_is_missing(prometheus):
    result = invoke("triage", "--prometheus-url", prometheus.url, "--at", QUIET.isoformat())
    assert result.exit_code == 12
    first = result.stdout.splitlines()[0]
    assert first.startswith("Not all clear: 2 playbooks need a signal with no source here")
    assert "Nothing fires" not in result.stdout and "Could not see" not in result.stdout
    assert ("oom-surge: oom_failures_per_min has no source here: no series of vllm_log_errors_total "
            "(from a log pipeline") in result.stdout
    assert "NVIDIA DCGM exporter" in result.stdout and "runbook signals --check" in result.stdout


def test_vllms_own_5xx_fire_the_zombie_playbook_without_a_gateway(prometheus):
    code, doc = triage_json(prometheus.url, STOCK_VLLM.at)
    assert code == 10
    assert [f["playbook"] for f in doc["firing"]] == ["zombie-process"]
    assert doc["firing"][0]["value"] == pytest.approx(12)


def test_signals_check_lists_what_has_no_source_and_exits_12(prometheus):
    result = invoke("signals", "--check", "--prometheus-url", prometheus.url, "-n", "llm",
                    "--at", QUIET.isoformat(), "--output", "json")
    assert result.exit_code == 12
    rows = {r["name"]: r for r in json.loads(result.stdout)["signals"]}
    assert rows["oom_failures_per_min"]["check"]["status"] == "no source"  # never "ok" with a made-up 0
    assert "vllm_log_errors_total" in rows["oom_failures_per_min"]["check"]["missing_sources"]
    assert rows["gpu_memory_used_ratio"]["check"]["status"] == "no source"
    assert rows["http_503_per_min"]["check"] == {"status": "ok", "series": 1, "value": 0.0}
    assert rows["waiting_requests"]["check"]["status"] == "ok"
    text = invoke("signals", "--check", "--prometheus-url", prometheus.url, "--at", QUIET.isoformat())
    assert "no source" in text.stdout and "DCGM_FI_DEV_FB_USED (from the NVIDIA DCGM exporter)" in text.stdout


@pytest.mark.parametrize("profile", ["vllm", "article"])
def test_no_signal_reads_a_value_where_none_of_its_sources_exists(prometheus, profile):
    """Silence is never health: a signal that answers at all has one of its declared sources there."""
    from runbook.triage.rules import with_params

    catalog = with_params(build_catalog(profile=profile), {"max_num_seqs": 256})  # never guessed: given
    metrics = PrometheusMetrics(prometheus.url, catalog)
    try:
        for at in (QUIET, SCENARIOS["oom-surge"].quiet_at, SCENARIOS["lingering-cuda-context"].at):
            for name in catalog.names():
                answered = metrics.query(name, at=at)
                present = metrics.query_promql(catalog.source_query(name, {}), at=at)
                assert not answered or present, f"{profile}/{name} at {at} reads {answered} with no source"
    finally:
        metrics.close()


def test_every_signal_declares_sources_that_its_expression_reads():
    for profile in ("vllm", "article"):
        catalog = build_catalog(profile=profile)
        for name in catalog.names():
            signal = catalog.get(name)
            assert signal.sources, f"{profile}/{name} names no source"
            assert all(metric in signal.expr for metric in signal.sources)
