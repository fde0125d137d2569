"""latency-creep's rule (issue 16, item 2): `runbook rules` exports VllmLatencyCreep with its
runbook_url, in every bundled profile; `promtool test rules` fires it on a P99 twice the one six
hours before and keeps it quiet on a steady P99 and on a server with no P99 six hours back.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from runbook.cli import main
from runbook.signals.catalog import bundled_profiles
from tests.prometheus.conftest import need_binary

RULE_TESTS = Path(__file__).parent / "rules"


def export(tmp_path: Path, *args: str) -> dict[str, dict]:
    out = tmp_path / "runbook-rules.yaml"
    result = CliRunner().invoke(main, ["rules", "-f", str(out), *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return {r["alert"]: r for g in yaml.safe_load(out.read_text())["groups"] for r in g["rules"]}


@pytest.mark.parametrize("profile", bundled_profiles())
def test_the_rule_is_the_p99_now_over_six_hours_ago_above_1_5_for_15m(tmp_path, profile):
    rule = export(tmp_path, "--profile", profile)["VllmLatencyCreep"]
    assert rule["for"] == "15m" and rule["expr"].endswith(" > 1.5")
    assert "offset 6h" in rule["expr"] and "vllm:e2e_request_latency_seconds_bucket" in rule["expr"]
    assert rule["labels"] == {"severity": "warning", "priority": "P2", "runbook_playbook": "latency-creep"}
    assert rule["annotations"]["runbook_url"] == "playbooks/latency-creep.yaml"
    assert rule["annotations"]["runbook"] == "runbook run latency-creep"


def test_the_creep_window_is_a_param(tmp_path):
    config = tmp_path / "runbook.yaml"
    config.write_text("signals: {params: {creep_window: 3h}}\n")
    rule = export(tmp_path, "--config", str(config))["VllmLatencyCreep"]
    assert "offset 3h" in rule["expr"] and "offset 6h" not in rule["expr"]


def test_promtool_fires_on_a_creep_and_stays_quiet_otherwise(tmp_path):
    rules = export(tmp_path)
    doc = yaml.safe_load((RULE_TESTS / "latency-creep.test.yaml").read_text())
    for case in doc["tests"]:
        for check in case["alert_rule_test"]:
            for alert in check.get("exp_alerts") or []:
                alert["exp_annotations"] = rules[check["alertname"]]["annotations"]
    target = tmp_path / "latency-creep.test.yaml"
    target.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = subprocess.run([need_binary("promtool"), "test", "rules", str(target)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
