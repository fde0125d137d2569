"""Every bundled playbook against its scenario, end to end, read back from the journal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from runbook.cli import main
from runbook.record.journal import read_journal
from runbook.model import events as ev
from tests.conftest import assert_sequence

RESOLVED = ["oom-surge", "waiting-queue", "zombie-process", "lingering-cuda-context"]
REFUSED = {"waiting-queue-all-unready": "min_ready", "oom-surge-metrics-down": "recheck"}


def drill(*args: str):
    return CliRunner().invoke(main, ["drill", *args], catch_exceptions=False)


def journal_of(document: dict) -> list[ev.Event]:
    read = read_journal(Path(document["journal"]))
    assert read.warnings == []
    return read.events


@pytest.mark.parametrize("scenario", RESOLVED)
def test_a_drill_resolves_its_incident(scenario):
    result = drill(scenario, "--yes", "--output", "json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["outcome"] == "resolved" and document["as_expected"], document["reason"]
    events = journal_of(document)
    assert_sequence(events, [ev.ALERT_RECEIVED, ev.RUN_STARTED, ev.EVIDENCE, ev.ACTION_PLANNED, ev.ACTION_CONFIRMED,
                             ev.ACTION_APPLIED, ev.VERIFY_PASSED, ev.RUN_FINISHED],
                    forbidden=(ev.GUARD_REFUSED, ev.ROLLBACK_APPLIED, ev.ESCALATED))
    for applied in (e for e in events if e.type == ev.ACTION_APPLIED):
        assert applied.data["before"] and applied.data["after"] and applied.data["by"]
    assert Path(document["rca"]).is_file()
    assert document["actions"] and all(a["applied"] for a in document["actions"])


def test_the_oom_drill_scales_down_lowers_max_model_len_and_brings_the_replicas_back():
    document = json.loads(drill("oom-surge", "--yes", "--output", "json").stdout)
    changes = [(a["action"], json.dumps(a["before"]), json.dumps(a["after"])) for a in document["actions"]]
    assert changes == [("k8s.scale", '{"replicas": 3}', '{"replicas": 1}'),
                       ("k8s.set_arg", '{"--max-model-len": "7372"}', '{"--max-model-len": "6635"}'),
                       ("k8s.restore_scale", '{"replicas": 1}', '{"replicas": 3}')]
    assert document["outcome"] == "resolved"
    events = journal_of(document)
    applied = [e for e in events if e.type == ev.ACTION_APPLIED]
    verified = next(e for e in events if e.type == ev.VERIFY_PASSED)
    # The fix is verified first; only then does the capacity come back, a replica at a time.
    assert applied[1].seq < verified.seq < applied[2].seq and applied[2].step == "restore-capacity"
    restored = applied[2].data["result"]
    assert (restored["replicas"], restored["restored"], restored["stopped"]) == (3, True, None)
    assert [step["replicas"] for step in restored["steps"]] == [2, 3] and all(s["kept"] for s in restored["steps"])
    rca = Path(document["rca"]).read_text()
    assert "7372" in rca and "6635" in rca


def test_when_the_ooms_return_with_the_capacity_the_run_ends_mitigated_at_the_last_good_size():
    result = drill("oom-surge-capacity-returns-ooms", "--yes", "--output", "json")
    assert result.exit_code == 5, result.output
    document = json.loads(result.stdout)
    assert document["outcome"] == "mitigated" and document["as_expected"]
    events = journal_of(document)
    restored = next(e for e in events if e.type == ev.ACTION_APPLIED and e.step == "restore-capacity").data["result"]
    assert restored["replicas"] == 2 and not restored["restored"]
    assert [(s["replicas"], s["kept"]) for s in restored["steps"]] == [(2, True), (3, False)]
    escalated = [e for e in events if e.type == ev.ESCALATED]
    assert [c["now"] for c in escalated[-1].data["capacity"]] == [2]
    assert "kubectl -n llm scale statefulset/vllm-server --replicas=3" in document["reason"]
    assert "serves 2 of its 3 replicas" in document["reason"] and "at 3 replicas" in document["reason"]


@pytest.mark.parametrize("scenario", RESOLVED)
def test_a_dry_run_drill_applies_nothing(scenario):
    result = drill(scenario, "--dry-run", "--output", "json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["outcome"] == "dry_run"
    assert_sequence(journal_of(document), [ev.ACTION_PLANNED, ev.RUN_FINISHED],
                    forbidden=(ev.ACTION_APPLIED, ev.ACTION_CONFIRMED))
    assert document["actions"] and not any(a["applied"] for a in document["actions"])


@pytest.mark.parametrize("scenario", RESOLVED)
def test_without_yes_and_without_a_terminal_a_drill_refuses(scenario):
    result = drill(scenario, "--output", "json")
    assert result.exit_code == 4, result.output
    document = json.loads(result.stdout)
    assert document["outcome"] == "refused" and document["refused"]["guard"] == "confirm"
    assert_sequence(journal_of(document), [ev.ACTION_PLANNED, ev.GUARD_REFUSED, ev.RUN_FINISHED],
                    forbidden=(ev.ACTION_APPLIED,))


@pytest.mark.parametrize(("scenario", "guard"), sorted(REFUSED.items()))
def test_an_adversarial_drill_ends_refused_naming_the_guard(scenario, guard):
    result = drill(scenario, "--yes", "--output", "json")
    assert result.exit_code == 4, result.output
    document = json.loads(result.stdout)
    assert document["outcome"] == "refused" and document["as_expected"]
    assert document["refused"]["guard"] == guard and document["refused"]["reason"]
    events = journal_of(document)
    assert_sequence(events, [ev.ACTION_PLANNED, ev.GUARD_REFUSED, ev.RUN_FINISHED], forbidden=(ev.ACTION_APPLIED,))


def test_the_kill_switch_refuses_a_drill(monkeypatch):
    monkeypatch.setenv("RUNBOOK_KILL_SWITCH", "1")
    document = json.loads(drill("oom-surge", "--yes", "--output", "json").stdout)
    assert document["outcome"] == "refused" and document["refused"]["guard"] == "kill_switch"


def test_list_names_every_scenario():
    plain = drill("--list")
    assert plain.exit_code == 0
    assert set(plain.stdout.split()) >= set(RESOLVED) | set(REFUSED)
    listed = {s["name"]: s for s in json.loads(drill("--list", "--output", "json").stdout)}
    assert listed["oom-surge"] == {"name": "oom-surge", "playbook": "oom-surge", "expect": "resolved"}
    assert all(listed[name]["expect"] == "refused" for name in REFUSED)


def test_text_output_shows_progress_and_paths():
    result = drill("oom-surge", "--yes")
    assert result.exit_code == 0
    assert "scale statefulset/vllm-server 3 → 1" in result.stdout
    assert "journal:" in result.stdout and "report:" in result.stdout


def test_an_unknown_scenario_is_a_clear_error():
    result = drill("oom-surg")
    assert result.exit_code == 3 and "oom-surge" in result.stderr


def test_incidents_lists_the_drill_and_rca_renders_it():
    document = json.loads(drill("waiting-queue", "--yes", "--output", "json").stdout)
    runner = CliRunner()
    listed = json.loads(runner.invoke(main, ["incidents", "--output", "json"]).stdout)
    assert any(i["id"] == document["incident_id"] and i["outcome"] == "resolved" for i in listed)
    report = runner.invoke(main, ["rca", document["incident_id"], "-f", "-"])
    assert report.exit_code == 0 and "## Timeline" in report.stdout
