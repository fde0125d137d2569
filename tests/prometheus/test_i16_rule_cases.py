"""Issue 16, items 1 and 7: a `promtool test rules` case for every rule `runbook rules` exports.

For each profile, every exported rule (the playbooks' and the alert table's) must be held quiet and
seen firing on the same series by some case: the profile's own test files, or the table of cases
keyed by alert name (rules/cases.yaml, where a new rule gets its entry). All of a profile's cases
pass in one promtool run. A case written for one profile also runs in another for the rules exported
there exactly the same (same expression, hold time, labels and annotations: the same alerts).
"""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from runbook.cli import main
from tests.prometheus.conftest import need_binary

RULE_TESTS = Path(__file__).parent / "rules"
TABLE = RULE_TESTS / "cases.yaml"
PROFILES = ("vllm", "article")
FILES = {"vllm": ("vllm-profile.test.yaml", "sop-alerts.test.yaml"),
         "article": ("article-profile.test.yaml", "article-sop-alerts.test.yaml")}
EXPORT_ARGS = ("-p", "max_num_seqs=256")  # the running-batch line is exported only with it (never guessed)

Case = tuple[frozenset[str], dict]  # (the profiles it is written for, one entry of promtool's `tests:`)


def export(folder: Path, profile: str) -> dict[str, dict]:
    """The rules `runbook rules --profile PROFILE` writes to FOLDER/runbook-rules.yaml, by alert name."""
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "runbook-rules.yaml"
    result = CliRunner().invoke(main, ["rules", "--profile", profile, "-f", str(out), *EXPORT_ARGS],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return {r["alert"]: r for g in yaml.safe_load(out.read_text())["groups"] for r in g["rules"]}


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, dict[str, dict]]:
    base = tmp_path_factory.mktemp("rules")
    return {profile: export(base / profile, profile) for profile in PROFILES}


def table_cases(text: str) -> list[Case]:
    cases = []
    for alert, entries in (yaml.safe_load(text) or {}).items():
        for entry in entries:
            case = copy.deepcopy(entry)
            profiles = frozenset(case.pop("profiles", PROFILES))
            for check in case["alert_rule_test"]:
                check.setdefault("alertname", alert)
            cases.append((profiles, case))
    return cases


def file_cases() -> list[Case]:
    return [(frozenset({profile}), case) for profile, names in FILES.items() for name in names
            for case in yaml.safe_load((RULE_TESTS / name).read_text())["tests"]]


def all_cases() -> list[Case]:
    return file_cases() + table_cases(TABLE.read_text())


def cases_for(profile: str, cases: Iterable[Case], exported: Mapping[str, Mapping[str, dict]]) -> list[dict]:
    """The cases that run for `profile`: its own, and another profile's checks of a rule exported the same."""
    def same(alert: str, other: str) -> bool:
        mine, theirs = exported[profile].get(alert), exported.get(other, {}).get(alert)
        return mine is not None and mine == theirs

    out = []
    for profiles, case in cases:
        if profile in profiles:
            out.append(case)
            continue
        borrowed = [c for c in case["alert_rule_test"] if any(same(c["alertname"], p) for p in profiles)]
        if borrowed:
            out.append({**case, "alert_rule_test": borrowed})
    return out


def uncovered(alerts: Iterable[str], cases: Iterable[dict]) -> list[str]:
    """The alerts no case holds both quiet and firing (on its one set of series)."""
    covered: set[str] = set()
    for case in cases:
        checks = case["alert_rule_test"]
        covered |= ({c["alertname"] for c in checks if c.get("exp_alerts")}
                    & {c["alertname"] for c in checks if not c.get("exp_alerts")})
    return sorted(set(alerts) - covered)


@pytest.mark.parametrize("profile", PROFILES)
def test_every_exported_rule_has_a_quiet_and_a_firing_case(exported, profile):
    missing = uncovered(exported[profile], cases_for(profile, all_cases(), exported))
    assert missing == [], (f"profile {profile}: no case holds {', '.join(missing)} quiet and then firing; "
                           f"add one under its alert name in tests/prometheus/rules/{TABLE.name}")


@pytest.mark.parametrize("profile", PROFILES)
def test_every_case_of_the_profile_passes_in_one_promtool_run(tmp_path, exported, profile):
    rules = export(tmp_path, profile)
    cases = copy.deepcopy(cases_for(profile, all_cases(), exported))
    for case in cases:
        for check in case["alert_rule_test"]:
            for alert in check.get("exp_alerts") or []:
                alert["exp_annotations"] = rules[check["alertname"]]["annotations"]
    target = tmp_path / f"{profile}.test.yaml"
    target.write_text(yaml.safe_dump({"rule_files": ["runbook-rules.yaml"], "evaluation_interval": "15s",
                                      "tests": cases}, sort_keys=False))
    result = subprocess.run([need_binary("promtool"), "test", "rules", str(target)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "SUCCESS" in result.stdout


def test_every_table_entry_checks_a_rule_exported_where_it_runs(exported):
    for profiles, case in table_cases(TABLE.read_text()):
        unknown = sorted(profiles - set(PROFILES))
        assert not unknown, f"{TABLE.name}: profiles {unknown} are not covered by this test ({', '.join(PROFILES)})"
        for check in case["alert_rule_test"]:
            for profile in profiles:
                assert check["alertname"] in exported[profile], (
                    f"{TABLE.name}: {check['alertname']} is not a rule `runbook rules --profile {profile}` exports")


def test_a_rule_seen_only_quiet_or_only_firing_is_not_covered():
    text = """
Both: [{interval: 15s, input_series: [], alert_rule_test: [{eval_time: 1m, exp_alerts: []},
                                                            {eval_time: 2m, exp_alerts: [{exp_labels: {}}]}]}]
QuietOnly: [{interval: 15s, input_series: [], alert_rule_test: [{eval_time: 1m, exp_alerts: []}]}]
Apart:
  - {interval: 15s, input_series: [], alert_rule_test: [{eval_time: 1m, exp_alerts: []}]}
  - {interval: 15s, input_series: [], alert_rule_test: [{eval_time: 2m, exp_alerts: [{exp_labels: {}}]}]}
"""
    cases = [case for _, case in table_cases(text)]
    assert uncovered(["Both", "QuietOnly", "Apart", "Absent"], cases) == ["Absent", "Apart", "QuietOnly"]


def test_a_case_runs_in_another_profile_only_for_the_rules_exported_the_same():
    rule = {"alert": "A", "expr": "x > 1"}
    exported = {"vllm": {"A": rule, "B": {"alert": "B", "expr": "y > 1"}},
                "article": {"A": dict(rule), "B": {"alert": "B", "expr": "z > 1"}}}
    case = {"interval": "15s", "input_series": [],
            "alert_rule_test": [{"eval_time": "1m", "alertname": "A", "exp_alerts": []},
                                {"eval_time": "1m", "alertname": "B", "exp_alerts": []}]}
    [borrowed] = cases_for("article", [(frozenset({"vllm"}), case)], exported)
    assert [c["alertname"] for c in borrowed["alert_rule_test"]] == ["A"]
