"""`runbook triage` against a real Prometheus: each SOP scenario names its playbook, a quiet
time names none, and a Prometheus that fails in any way gives exit code 11 with a clear
message, in bounded time, never "all clear".
"""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from runbook.backends.base import World
from runbook.backends.prometheus.client import PrometheusMetrics
from runbook.cli import main
from runbook.signals.catalog import build_catalog
from runbook.sim.fakes import FakeCluster
from tests.engine.helpers import cluster
from tests.prometheus.data import SCENARIOS
from tests.prometheus.servers import CountingProxy, Erring, Hanging, StoppingProxy
from runbook.files.discovery import bundled_dir

# The SOP's four first playbooks, named: tests of how triage fails count them (the bundle grows).
SOP_FOUR = [str(bundled_dir() / f"{name}.yaml") for name in ("lingering-cuda-context", "oom-surge", "waiting-queue",
                                                                 "zombie-process")]


def triage(url: str, *args: str):
    return CliRunner().invoke(main, ["triage", "--prometheus-url", url, *args], catch_exceptions=False)


def triage_json(url: str, *args: str) -> tuple[int, dict]:
    result = triage(url, "--output", "json", *args)
    return result.exit_code, json.loads(result.stdout)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_incident_names_its_playbook(prometheus, name):
    scenario = SCENARIOS[name]
    code, doc = triage_json(prometheus.url, "--at", scenario.at.isoformat())
    assert code == 10
    assert doc["top"] == name
    assert {f["playbook"] for f in doc["firing"]} == scenario.firing
    assert doc["unknown"] == []
    top = doc["firing"][0]
    assert set(top) >= {"playbook", "signal", "value", "since"}
    assert top["value"] > 0 and top["since"] < doc["at"]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_same_time_the_day_before_is_quiet(prometheus, name):
    code, doc = triage_json(prometheus.url, "--at", SCENARIOS[name].quiet_at.isoformat())
    assert (code, doc["firing"], doc["unknown"], doc["top"]) == (0, [], [], None)
    assert {q["playbook"] for q in doc["quiet"]} == {"lingering-cuda-context", "oom-surge", "waiting-queue",
                                                     "zombie-process", "disconnect-storm", "prompt-truncation",
                                                     "latency-creep"}
    # No canary serves and no Compose host is scraped in this cluster: those playbooks do not apply.
    assert {a["playbook"] for a in doc["not_applicable"]} == {"canary-rollback", "oom-surge-compose",
                                                              "zombie-process-compose"}


def test_a_quiet_triage_asks_only_instant_queries_and_a_holding_detect_its_range(prometheus):
    # Quiet: each detect's value now and an hour ago; no 241-point range query.
    scenario = SCENARIOS["oom-surge"]
    with CountingProxy(prometheus.url) as quiet:
        code, doc = triage_json(quiet.url, "--at", scenario.quiet_at.isoformat())
    assert code == 0 and doc["firing"] == []
    assert quiet.asked("query_range") == 0 and quiet.asked("query") > 0
    # During the incident: the range query for the detects that hold now (to trace since when), and
    # the SOP's step-one views of the one that fires.
    with CountingProxy(prometheus.url) as firing:
        code, doc = triage_json(firing.url, "--at", scenario.at.isoformat())
    assert code == 10 and firing.asked("query_range") >= len(doc["firing"]) + len(doc.get("pending", [])) >= 1


@pytest.mark.parametrize("when", ["quiet_at", "at"])
def test_instant_first_finds_what_the_range_for_every_detect_found(prometheus, monkeypatch, when):
    from runbook.triage import evaluate as evaluation

    at = getattr(SCENARIOS["oom-surge"], when).isoformat()
    code, instant_first = triage_json(prometheus.url, "--at", at)
    monkeypatch.setattr(evaluation, "INSTANT_FIRST", False)
    assert triage_json(prometheus.url, "--at", at) == (code, instant_first)


def test_a_queue_and_its_503s_rank_the_queue_first_because_it_began_first(prometheus):
    code, doc = triage_json(prometheus.url, "--at", SCENARIOS["waiting-queue"].at.isoformat())
    queue, errors = doc["firing"]
    assert (queue["playbook"], errors["playbook"]) == ("waiting-queue", "zombie-process")
    assert queue["since"] < errors["since"]
    assert queue["value"] == 80 and queue["held_seconds"] >= queue["for_seconds"]


def test_a_condition_not_held_for_its_window_yet_is_pending_not_firing(prometheus):
    # 503s passed 5 a minute at 09:38:00; one minute is needed.
    at = SCENARIOS["waiting-queue"].at.replace(minute=38, second=30)
    code, doc = triage_json(prometheus.url, "--at", at.isoformat())
    pending = {q["playbook"]: q for q in doc["quiet"] if q["state"] == "pending"}
    assert "zombie-process" in pending and pending["zombie-process"]["held_seconds"] < 60
    assert "zombie-process" not in {f["playbook"] for f in doc["firing"]}


def test_the_sop_step_one_views(prometheus):
    code, doc = triage_json(prometheus.url, "--at", SCENARIOS["oom-surge"].at.isoformat())
    views = doc["views"]
    assert views["labels"] == {"namespace": "llm"}
    assert views["trends"]["oom-surge"]["shape"] == "sudden"
    assert views["trends"]["oom-surge"]["yesterday"] == 0
    assert views["latency"]["verdict"].startswith("prefill latency up")
    assert set(views["kv_cache"]["pods"]) == {"vllm-server-0", "vllm-server-1", "vllm-server-2"}
    assert views["kv_cache"]["verdict"].startswith("every pod hot")
    assert views["failures"]["by_reason"]["oom"]["now"] > 15


def test_text_output_names_the_top_match_and_how_to_run_it(prometheus):
    result = triage(prometheus.url, "--at", SCENARIOS["zombie-process"].at.isoformat())
    assert result.exit_code == 10
    assert "Top match: zombie-process" in result.stdout and "runbook triage --run" in result.stdout
    assert "SOP step 1" in result.stdout


def test_the_article_profile_reads_the_articles_metric_names(prometheus, tmp_path):
    config = tmp_path / "runbook.yaml"
    config.write_text("signals: {profile: article}\n")
    code, doc = triage_json(prometheus.url, "--config", str(config), "--namespace", "team-a",
                            "--at", SCENARIOS["oom-surge"].at.isoformat())
    assert doc["profile"] == "article" and doc["top"] == "oom-surge"
    assert doc["firing"][0]["labels"] == {"namespace": "team-a"}


def test_prometheus_stopped_mid_triage_leaves_the_rest_unknown(prometheus):
    # The first playbook in name order (lingering-cuda-context) is asked alone, then the rest at
    # once: Prometheus stops right after the first playbook's answers (its value now, then an hour
    # ago where it is quiet, or since when where it holds: two queries either way).
    with StoppingProxy(prometheus.url, answers=2) as proxy:
        started = time.monotonic()
        code, doc = triage_json(proxy.url, *SOP_FOUR, "--at", SCENARIOS["oom-surge"].at.isoformat())
        elapsed = time.monotonic() - started
    seen = {f["playbook"] for f in doc["firing"] + doc["quiet"] + doc.get("pending", [])}
    assert seen == {"lingering-cuda-context"}  # what it saw still counts
    assert code == (10 if doc["firing"] else 11)
    unknown = {u["playbook"]: u["reason"] for u in doc["unknown"]}
    assert set(unknown) == {"oom-surge", "waiting-queue", "zombie-process"}
    assert all("unreachable" in r for r in unknown.values())
    assert doc["views"] is None
    assert elapsed < 10


def test_prometheus_stopped_at_a_quiet_time_is_exit_11_never_all_clear(prometheus):
    with StoppingProxy(prometheus.url, answers=1) as proxy:
        result = triage(proxy.url, "--at", SCENARIOS["oom-surge"].quiet_at.isoformat())
    assert result.exit_code == 11
    assert "Could not see" in result.stdout and "Nothing fires" not in result.stdout


def test_a_500_gives_exit_11_and_the_servers_message():
    with Erring(500, "out of memory while evaluating") as server:
        code, doc = triage_json(server.url, *SOP_FOUR, "--at", "2026-03-14T03:12:07Z")
        assert len(server.requests) == 1  # one failure is enough to stop asking
    assert code == 11 and doc["firing"] == []
    assert len(doc["unknown"]) == 4
    assert all("HTTP 500" in u["reason"] and "out of memory while evaluating" in u["reason"] for u in doc["unknown"])


def test_a_server_that_never_answers_gives_exit_11_within_the_timeout(tmp_path):
    config = tmp_path / "runbook.yaml"
    config.write_text("prometheus: {timeout: 1s, retries: 0}\n")
    with Hanging() as server:
        started = time.monotonic()
        result = triage(server.url, "--config", str(config), "--at", "2026-03-14T03:12:07Z")
        elapsed = time.monotonic() - started
    assert result.exit_code == 11
    assert "did not answer within 1s" in result.stdout
    assert elapsed < 4  # one timeout, not one per playbook


def test_unreachable_prometheus_gives_exit_11_quickly():
    with Hanging() as server:
        url = server.url  # closed on leaving: nothing listens there any more
    started = time.monotonic()
    code, doc = triage_json(url, "--at", "2026-03-14T03:12:07Z")
    assert code == 11 and "Connection refused" in doc["unknown"][0]["reason"]
    assert time.monotonic() - started < 5


def test_a_malformed_query_is_unknown_with_the_servers_message(prometheus, tmp_path):
    config = tmp_path / "runbook.yaml"
    config.write_text("signals:\n  overrides:\n    waiting_requests: 'sum(vllm:num_requests_waiting{{labels}}'\n")
    code, doc = triage_json(prometheus.url, *SOP_FOUR, "--config", str(config), "--at",
                            SCENARIOS["oom-surge"].quiet_at.isoformat())
    assert code == 11
    [bad] = doc["unknown"]
    assert bad["playbook"] == "waiting-queue" and "parse error" in bad["reason"]
    assert {q["playbook"] for q in doc["quiet"]} == {"lingering-cuda-context", "oom-surge", "zombie-process"}


def test_no_prometheus_configured_is_a_usage_error(monkeypatch):
    monkeypatch.delenv("RUNBOOK_PROMETHEUS_URL", raising=False)
    result = CliRunner().invoke(main, ["triage"])
    assert result.exit_code == 2 and "--prometheus-url" in result.output


def test_at_accepts_iso_unix_seconds_and_how_long_ago():
    import datetime as dt

    from runbook.cli.triage import parse_at

    now = dt.datetime(2026, 3, 14, 3, 12, 7, 500, tzinfo=dt.timezone.utc)
    assert parse_at("2026-03-14T03:12:07Z") == now.replace(microsecond=0)
    assert parse_at("2026-03-14 05:12:07+02:00") == now.replace(microsecond=0)
    assert parse_at("1773457927") == now.replace(microsecond=0)
    assert parse_at("15m", now) == parse_at("15m ago", now) == parse_at("-15m", now) == now.replace(
        microsecond=0) - dt.timedelta(minutes=15)
    assert parse_at(None, now) == now.replace(microsecond=0)
    with pytest.raises(Exception, match="is not a time"):
        parse_at("yesterday-ish")


def test_run_with_at_is_refused():
    result = CliRunner().invoke(main, ["triage", "--prometheus-url", "http://127.0.0.1:9", "--run", "--at", "1h"])
    assert result.exit_code == 2 and "--run acts now" in result.output


def test_run_runs_the_chosen_playbook_guarded_and_journaled(prometheus, monkeypatch, tmp_path):
    """`--run` goes through `runbook.cli.running`; the cluster is a fake, Prometheus is real."""
    fake: FakeCluster = cluster(replicas=3)
    built: list[World] = []

    def world(config, connection, env=None):
        built.append(World(metrics=PrometheusMetrics(connection.prometheus_url, build_catalog(config)), cluster=fake))
        return built[-1]

    monkeypatch.setattr("runbook.cli.connect.real_world", world)
    result = triage(prometheus.url, "--run", "--playbook", "waiting-queue", "--dry-run", "--output", "json")
    doc = json.loads(result.stdout)
    run = doc["run"]
    assert run["playbook"] == "waiting-queue"
    assert (tmp_path / "state").exists() and run["journal"].startswith(str(tmp_path / "state"))
    assert [s["id"] for s in run["steps"]][:2] == ["waiting-by-pod", "queue-trend"]
    assert fake.mutations == []  # a dry run applies nothing
    assert result.exit_code == {"resolved": 0, "dry_run": 0}.get(run["outcome"], result.exit_code)
    # Now is not in the scenario data: no series at all, so no signal has a source; said beside the run.
    assert doc["triage"]["exit_code"] == 12


def test_run_without_anything_firing_runs_nothing(prometheus, monkeypatch):
    monkeypatch.setattr("runbook.cli.connect.real_world", lambda *a, **k: pytest.fail("nothing should be built"))
    result = triage(prometheus.url, "--run", "--output", "json")
    doc = json.loads(result.stdout)
    assert doc["run"] is None and result.exit_code == doc["triage"]["exit_code"]


def test_signals_lists_the_catalog_and_checks_it(prometheus):
    listing = CliRunner().invoke(main, ["signals", "--output", "json"])
    assert listing.exit_code == 0
    doc = json.loads(listing.stdout)
    rows = {r["name"]: r for r in doc["signals"]}
    # Shown as triage asks it: with the playbook's detect labels; other signals unscoped.
    assert rows["waiting_requests"]["promql"] == 'sum(vllm:num_requests_waiting{namespace="llm"})'
    assert rows["running_requests"]["promql"] == "sum(vllm:num_requests_running)"
    assert rows["waiting_requests"]["detected_by"] == ["waiting-queue"]
    checked = CliRunner().invoke(main, ["signals", "--check", "--prometheus-url", prometheus.url, "-n", "llm",
                                        "--at", SCENARIOS["oom-surge"].at.isoformat(), "--output", "json"])
    rows = {r["name"]: r for r in json.loads(checked.stdout)["signals"]}
    assert rows["waiting_requests"]["check"] == {"status": "ok", "series": 1, "value": 41.0}
    assert rows["prefix_cache_hit_rate"]["check"]["status"] == "no source"  # this cluster exports none
    # A detected signal is asked as its playbook asks it: GPU memory held idle on every node, not by namespace.
    assert rows["gpu_memory_idle_held_ratio"]["labels_asked"] == {}
    assert rows["gpu_memory_idle_held_ratio"]["check"]["status"] == "ok"
    assert checked.exit_code == 0
    text = CliRunner().invoke(main, ["signals", "--check", "--prometheus-url", "http://127.0.0.1:9"])
    assert text.exit_code == 11 and "unreachable" in text.stdout
