"""Issue 31, item 2: `runbook drill --from INCIDENT` records a real incident's journal as a scenario that
`runbook drill` replays. Journals written by real runs (the drills' own engine and journal) are recorded,
replayed, and must tell the same story with the same outcome; a changed playbook tried on the recording
meets what the incident met; what the journal lacks is said in the file. The same for an incident on the
real control plane: tests/controlplane/test_playbooks.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from runbook.cli import main
from runbook.drill.record import record, record_file, scenario_name
from runbook.drill.run import run_drill
from runbook.engine.operator import AssumeYes
from runbook.errors import InvalidInput
from runbook.record.journal import read_journal
from runbook.sim.scenario import load_scenario

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"


def story(events) -> list[tuple[str, str | None]]:
    return [(e.type, e.step) for e in events]


def summaries(events) -> list[tuple[str | None, str]]:
    return [(e.step, e.data.get("summary", "")) for e in events if e.type == "step.finished"]


def drilled(name: str, state: Path):
    """A drill run as `runbook drill NAME --yes` runs it: (its result, its journal's events)."""
    result = run_drill(name, state=state, operator=AssumeYes("test", rehearsal=True))
    return result, read_journal(result.journal).events


# The bundled drills whose journal holds all a replay asks (the others' recordings say what they lack: below).
REPLAYED = ["oom-surge", "oom-surge-capacity-returns-ooms", "zombie-process", "waiting-queue",
            "waiting-queue-all-unready", "disconnect-storm", "latency-creep", "latency-creep-water-line"]


@pytest.mark.parametrize("name", REPLAYED)
def test_a_recorded_drill_replays_its_own_story(name, tmp_path):
    first, events = drilled(name, tmp_path / "state")
    written, scenario = record_file(first.journal, tmp_path / "recorded.yaml")
    assert scenario.name == scenario_name(first.run.incident) and scenario.expect == first.run.outcome
    again, replayed = drilled(str(written), tmp_path / "state")
    assert again.run.outcome == first.run.outcome == load_scenario(name).expect
    assert story(replayed) == story(events)
    assert summaries(replayed) == summaries(events)  # the same readings, answers and log counts


@pytest.mark.parametrize(("name", "lacks"), [
    ("lingering-cuda-context", "the GPU nodes' processes: node.gpu_holders journals its findings"),
    ("oom-surge-at-floor", "the command lines of the processes step kill-server signalled"),
    ("prompt-truncation", "the prompts in the logs: the journal keeps their lengths only"),
    ("canary-rollback", "(a Deployment's pods are named anew)"),
])
def test_a_recording_says_what_a_replay_cannot_have(name, lacks, tmp_path):
    first, _ = drilled(name, tmp_path / "state")
    written, scenario = record_file(first.journal, tmp_path / "recorded.yaml")
    assert any(lacks in item for item in scenario.recorded.missing), scenario.recorded.missing
    assert "#   - " in written.read_text() and lacks in written.read_text()


def test_the_recording_says_what_the_journal_lacks_and_assumes(tmp_path):
    first, _ = drilled("oom-surge", tmp_path / "state")
    written, scenario = record_file(first.journal, tmp_path / "recorded.yaml")
    assert scenario.recorded.incident == first.run.incident
    assert any("vllm-server-2's last container ended (Error)" in m for m in scenario.recorded.missing)
    assert any("pods selected by app=vllm-server" in a and "--max-model-len=7372" in a
               for a in scenario.recorded.assumed)
    text = written.read_text()
    assert text.startswith("# Recorded by `runbook drill --from ")
    assert "# Not in the journal:\n#   - when vllm-server-2's last container ended" in text
    # What followed the lowered limit is its reaction: it follows only when a replay lowers it as far.
    reaction = next(r for r in scenario.reactions if r.on.arg_changed is not None)
    assert (reaction.on.arg_changed.flag, reaction.on.arg_changed.at_most) == ("--max-model-len", 6635.0)
    assert scenario.params == {}  # each param was the bundled playbook's default: left to the playbook


def test_a_milder_change_tried_on_the_recording_does_not_stop_what_the_real_change_stopped(tmp_path):
    first, _ = drilled("oom-surge", tmp_path / "state")
    written, _ = record_file(first.journal, tmp_path / "recorded.yaml")
    milder = tmp_path / "oom-surge.yaml"
    milder.write_text((PLAYBOOKS / "oom-surge.yaml").read_text().replace("max_model_len_factor: 0.9\n",
                                                                         "max_model_len_factor: 0.97\n"))
    tried = run_drill(str(written), state=tmp_path / "state", operator=AssumeYes("test", rehearsal=True),
                      playbook_file=milder)
    applied = [a for a in tried.run.actions if a.action == "k8s.set_arg"]
    assert [(a.before, a.after, a.rolled_back) for a in applied] == [
        ({"--max-model-len": "7372"}, {"--max-model-len": "7151"}, True)]
    assert tried.run.outcome == "rolled_back"
    assert "oom_failures_per_min < 1 did not hold" in tried.run.reason


def test_secrets_stay_redacted(tmp_path):
    first, events = drilled("zombie-process", tmp_path / "state")
    leaked = next(e for e in events if e.type == "evidence" and e.data.get("kind") == "command")
    leaked.data["stdout"] = "HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789\n" + leaked.data["stdout"]
    document = record(events, first.run.incident)
    text = json.dumps(document)
    assert "hf_abcdefghijklmnopqrstuvwxyz0123456789" not in text and "HF_TOKEN=" in text


def test_a_journal_without_a_run_is_refused(tmp_path):
    first, events = drilled("oom-surge", tmp_path / "state")
    with pytest.raises(InvalidInput, match="holds no run"):
        record([e for e in events if e.type == "alert.received"], first.run.incident)


def test_runbook_drill_from_an_incident_records_then_replays(tmp_path, monkeypatch):
    state = tmp_path / "state"
    monkeypatch.setenv("RUNBOOK_STATE_DIR", str(state))
    runner = CliRunner()
    done = runner.invoke(main, ["drill", "zombie-process", "--yes", "--output", "json"], catch_exceptions=False)
    incident = json.loads(done.stdout)["incident_id"]
    recorded = runner.invoke(main, ["drill", "--from", incident, "--yes", "--output", "json"], catch_exceptions=False)
    assert recorded.exit_code == 0, recorded.output
    replay = json.loads(recorded.stdout)
    assert (replay["scenario"], replay["outcome"], replay["as_expected"]) == (scenario_name(incident), "resolved", True)
    written = state / "incidents" / incident / "scenario.yaml"
    assert yaml.safe_load(written.read_text())["recorded"]["incident"] == incident
    assert f"recorded {incident} as {written}" in recorded.stderr
    only = runner.invoke(main, ["drill", "--from", incident, "-f", str(tmp_path / "z.yaml"), "--record-only"])
    assert only.exit_code == 0 and (tmp_path / "z.yaml").is_file() and only.stdout == ""


@pytest.mark.parametrize(("args", "says"), [
    (["--from", "no-such-incident"], "no incident 'no-such-incident'"),
    (["oom-surge", "--from", "x"], "give a SCENARIO or --from INCIDENT, not both"),
    (["oom-surge", "--record-only"], "--file and --record-only go with --from INCIDENT"),
])
def test_bad_asks_are_refused_saying_how(args, says, tmp_path, monkeypatch):
    monkeypatch.setenv("RUNBOOK_STATE_DIR", str(tmp_path / "state"))
    done = CliRunner().invoke(main, ["drill", *args])
    assert done.exit_code != 0 and says in done.output
    assert "Traceback" not in done.output


def test_an_invalid_playbook_file_is_refused_before_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNBOOK_STATE_DIR", str(tmp_path / "state"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: oom-surge\nsteps: []\n")
    done = CliRunner().invoke(main, ["drill", "oom-surge", "--yes", "--playbook", str(bad)])
    assert done.exit_code == 3 and "the playbook is invalid" in done.output
    assert not (tmp_path / "state" / "incidents").exists() or not any((tmp_path / "state" / "incidents").iterdir())
