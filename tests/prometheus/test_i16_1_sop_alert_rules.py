"""Issue 16, item 1: every row of the SOP's signal table is an exported rule. The warning rows no
playbook detects come from the bundled alert table, each naming its playbook in `runbook_url`;
`promtool check rules` accepts them and `promtool test rules` fires each on its case only.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from runbook.cli import main
from runbook.errors import InvalidInput
from runbook.signals.alert_table import AlertTable, load_alert_table
from runbook.signals.catalog import build_catalog, bundled_profiles
from tests.prometheus.conftest import need_binary

RULE_TESTS = Path(__file__).parent / "rules"
# The SOP's table (SOP.md, section 2), row by row: the alert that exports it and its condition.
SOP_ROWS = {
    "waiting queue > 10 for 1 min": ("VllmWaitingQueueWarning", "> 10", "1m"),
    "KV cache usage > 0.85 for 30 s": ("VllmKvCacheHigh", "> 0.85", "30s"),
    "decode rate drops > 30% vs the previous window": ("VllmDecodeThroughputDrop", "< 0.7", "1m"),
    "OOM failures > 0 for 10 s": ("VllmOomSurge", "> 0", "10s"),
    "timeouts > 5 per minute": ("VllmRequestTimeouts", "> 5", "1m"),
    "cache hit rate < 0.9 for 2 min": ("VllmCacheHitRateLow", "< 0.9", "2m"),
    "running > 95% of --max-num-seqs": ("VllmRunningBatchFull", "> 0.95", "1m"),
}


def export(tmp_path: Path, *args: str) -> tuple[Path, str]:
    out = tmp_path / "runbook-rules.yaml"
    result = CliRunner().invoke(main, ["rules", "-f", str(out), *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out, result.stderr


def all_rules(path: Path) -> dict[str, dict]:
    return {r["alert"]: r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]}


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([need_binary("promtool"), *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("profile", bundled_profiles())
def test_every_row_of_the_sop_table_is_a_rule(tmp_path, profile):
    rules = all_rules(export(tmp_path, "--profile", profile, "-p", "max_num_seqs=256")[0])
    for row, (alert, bound, held) in SOP_ROWS.items():
        assert alert in rules, row
        assert rules[alert]["expr"].endswith(f" {bound}"), row
        assert rules[alert]["for"] == held, row


def test_every_rule_names_its_playbook_in_runbook_url(tmp_path):
    rules = all_rules(export(tmp_path, "-p", "max_num_seqs=256")[0])
    for rule in rules.values():
        assert rule["annotations"]["runbook_url"] == f"playbooks/{rule['labels']['runbook_playbook']}.yaml"
    custom = all_rules(export(tmp_path, "--runbook-url", "https://git.example.com/ops/{playbook}.yaml")[0])
    assert custom["VllmKvCacheHigh"]["annotations"]["runbook_url"] == "https://git.example.com/ops/oom-surge.yaml"
    result = CliRunner().invoke(main, ["rules", "--runbook-url", "https://wiki.example.com/runbooks"])
    assert result.exit_code == 3 and "put {playbook} where its name goes" in result.output


def test_the_warning_rows_are_their_own_group_and_start_no_playbook(tmp_path):
    from runbook.cli.catalog import load_all

    doc = yaml.safe_load(export(tmp_path, "-p", "max_num_seqs=256")[0].read_text())
    assert [g["name"] for g in doc["groups"]] == ["runbook-playbooks", "runbook-alerts"]
    started = {a for r in load_all(()) if r.playbook for a in r.playbook.match.alerts}
    handlers = {r.playbook.name for r in load_all(()) if r.playbook}
    for rule in doc["groups"][1]["rules"]:
        assert rule["alert"] not in started  # an alert, never a remediation on its own
        assert rule["labels"]["runbook_playbook"] in handlers


def test_max_num_seqs_is_never_guessed(tmp_path):
    path, notes = export(tmp_path)
    assert "VllmRunningBatchFull" not in all_rules(path)
    assert "VllmRunningBatchFull: needs max_num_seqs, no rule; give it with -p max_num_seqs=N" in notes
    config = tmp_path / "runbook.yaml"
    config.write_text("signals: {params: {max_num_seqs: 128}}\n")
    rule = all_rules(export(tmp_path, "--config", str(config))[0])["VllmRunningBatchFull"]
    assert rule["expr"] == "max by (namespace, pod) (vllm:num_requests_running / 128) > 0.95"
    bad = CliRunner().invoke(main, ["rules", "-p", "max_num_seqs=lots"])
    assert bad.exit_code == 3 and "-p max_num_seqs=lots: expected a number" in bad.output


@pytest.mark.parametrize("profile", bundled_profiles())
def test_exported_rules_pass_promtool_check(tmp_path, profile):
    path, _ = export(tmp_path, "--profile", profile, "-p", "max_num_seqs=256")
    checked = promtool("check", "rules", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(all_rules(path))} rules found" in checked.stdout


def _with_annotations(test_file: Path, rules_file: Path) -> str:
    rules = all_rules(rules_file)
    doc = yaml.safe_load(test_file.read_text())
    for case in doc["tests"]:
        for check in case.get("alert_rule_test", []):
            for alert in check.get("exp_alerts") or []:
                alert["exp_annotations"] = rules[check["alertname"]]["annotations"]
    return yaml.safe_dump(doc, sort_keys=False)


@pytest.mark.parametrize(("test_file", "profile"), [("sop-alerts.test.yaml", "vllm"),
                                                    ("article-sop-alerts.test.yaml", "article")])
def test_promtool_unit_tests_fire_each_warning_on_its_case_only(tmp_path, test_file, profile):
    rules_file, _ = export(tmp_path, "--profile", profile, "-p", "max_num_seqs=256")
    target = tmp_path / test_file
    target.write_text(_with_annotations(RULE_TESTS / test_file, rules_file))
    result = promtool("test", "rules", str(target))
    assert result.returncode == 0, result.stdout + result.stderr
    covered = {c["alertname"] for case in yaml.safe_load((RULE_TESTS / test_file).read_text())["tests"]
               for c in case["alert_rule_test"] if c.get("exp_alerts")}
    if profile == "vllm":  # a firing case for every row of the table
        assert covered == {row.alert for row in load_alert_table()}


def test_a_broken_table_is_refused_with_where_and_how(tmp_path):
    bad = tmp_path / "alerts.yaml"
    bad.write_text("alerts:\n  - alert: lower\n    signal: waiting_requests\n    above: 1\n"
                   "    playbook: waiting-queue\n    summary: s\n"
                   "  - alert: BothBounds\n    signal: waiting_requests\n    above: 1\n    below: 2\n"
                   "    playbook: waiting-queue\n    summary: s\n")
    with pytest.raises(InvalidInput) as caught:
        load_alert_table(bad)
    text = str(caught.value)
    assert "alerts.yaml:2:12  alerts[0].alert" in text and "alerts.yaml:7:" in text and "CamelCase" in text and "exactly one of `above` or `below`" in text


def test_every_row_reads_a_signal_each_profile_has():
    rows = load_alert_table()
    AlertTable(alerts=rows)  # names unique
    for profile in bundled_profiles():
        catalog = build_catalog(profile=profile)
        assert all(row.signal_in(catalog) for row in rows), profile
    article = build_catalog(profile="article")
    hit = next(r for r in rows if r.alert == "VllmCacheHitRateLow")
    assert hit.signal_in(article) == "gpu_cache_hit_rate" and hit.signal_in(build_catalog()) == "prefix_cache_hit_rate"
