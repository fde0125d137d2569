"""Issue 16, item 1: `runbook triage` evaluates the SOP's warning lines (the alert table) beside the
playbooks: a warning fires per pod, names the playbook that handles it, and is never run; one without
a source here is listed, not read as quiet; a row that needs --max-num-seqs waits until it is given.
"""

from __future__ import annotations

import datetime as dt
import json

from click.testing import CliRunner

from runbook.cli import main
from runbook.signals.alert_table import load_alert_table
from tests.prometheus.data import SCENARIOS


def triage(url: str, *args: str):
    return CliRunner().invoke(main, ["triage", "--prometheus-url", url, *args], catch_exceptions=False)


def triage_json(url: str, *args: str) -> tuple[int, dict]:
    result = triage(url, "--output", "json", *args)
    return result.exit_code, json.loads(result.stdout)


def warnings(doc: dict) -> dict[str, dict]:
    return {w["alert"]: w for w in doc["warnings"]}


def test_every_row_is_evaluated_and_a_hot_pod_fires_its_warning(prometheus):
    code, doc = triage_json(prometheus.url, "--at", SCENARIOS["oom-surge"].at.isoformat())
    assert code == 10 and doc["top"] == "oom-surge"
    found = warnings(doc)
    assert set(found) == {row.alert for row in load_alert_table()}
    kv = found["VllmKvCacheHigh"]
    assert kv["state"] == "firing" and kv["playbook"] == "oom-surge" and kv["condition"] == "kv_cache_usage > 0.85"
    assert kv["labels"] == {"namespace": "llm", "pod": "vllm-server-2"} and kv["value"] > 0.85
    assert found["VllmWaitingQueueWarning"]["state"] == "firing"
    # A warning is an alert line, never a playbook's detect: it stays out of what --run chooses from.
    assert all("alert" not in f for f in doc["firing"])
    assert "VllmKvCacheHigh (warning for oom-surge)" in doc["headline"]


def test_the_day_before_every_warning_is_quiet_or_says_why_not(prometheus):
    code, doc = triage_json(prometheus.url, "--at", SCENARIOS["oom-surge"].quiet_at.isoformat())
    found = warnings(doc)
    assert found["VllmKvCacheHigh"]["state"] == "quiet"
    assert found["VllmWaitingQueueWarning"]["state"] == "quiet"
    # No scrape target named like vLLM here: no source, and who would provide it; never quiet.
    down = found["VllmReplicaDown"]
    assert down["state"] == "no_source" and down["missing_sources"] == {"up": "Prometheus itself, one series per scrape target"}
    assert "VllmReplicaDown" not in doc["headline"]  # no playbook's need: listed, not counted in the exit code
    assert code != 10


def test_max_num_seqs_waits_until_it_is_given(prometheus, tmp_path):
    at = SCENARIOS["oom-surge"].at.isoformat()
    _, doc = triage_json(prometheus.url, "--at", at)
    batch = warnings(doc)["VllmRunningBatchFull"]
    assert batch["state"] == "skipped" and "needs max_num_seqs" in batch["reason"]
    config = tmp_path / "runbook.yaml"
    config.write_text("signals: {params: {max_num_seqs: 24}}\n")
    _, doc = triage_json(prometheus.url, "--config", str(config), "--at", at)
    batch = warnings(doc)["VllmRunningBatchFull"]
    assert batch["state"] in ("firing", "pending", "quiet") and batch["condition"] == "running_batch_ratio > 0.95"


def test_the_namespace_scopes_the_warnings(prometheus):
    _, doc = triage_json(prometheus.url, "--namespace", "team-b", "--at", SCENARIOS["oom-surge"].at.isoformat())
    kv = warnings(doc)["VllmKvCacheHigh"]
    assert kv["state"] != "firing" and kv["labels"].get("namespace") == "team-b"


def test_text_output_lists_the_warning_lines(prometheus):
    result = triage(prometheus.url, "--at", SCENARIOS["oom-surge"].at.isoformat())
    assert "Warning lines" in result.stdout
    line = next(x for x in result.stdout.splitlines() if "VllmKvCacheHigh" in x and "firing" in x)
    assert "pod=vllm-server-2" in line and "→ oom-surge" in line


def test_an_unreachable_prometheus_leaves_every_warning_unknown():
    code, doc = triage_json("http://127.0.0.1:9", "--at", dt.datetime(2026, 3, 14, tzinfo=dt.timezone.utc).isoformat())
    assert code == 11
    assert {w["state"] for w in doc["warnings"]} == {"unknown"}
