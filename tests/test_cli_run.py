"""`runbook run`: params from flags and alert labels, and clear failures without backends."""

from __future__ import annotations

import json

from click.testing import CliRunner

from runbook.cli import main
from runbook.journal import read_journal
from runbook.model import events as ev


def invoke(*args: str, input: str | None = None):
    return CliRunner().invoke(main, ["run", *args], input=input, catch_exceptions=False)


def test_without_backends_the_run_fails_saying_what_to_configure():
    result = invoke("oom-surge", "--dry-run", "--output", "json")
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["outcome"] == "failed"
    assert "configure a Kubernetes context" in document["reason"]
    events = read_journal(document["journal"]).events
    assert not any(e.type == ev.ACTION_APPLIED for e in events)


def test_alert_labels_fill_params_through_match_and_flags_win(tmp_path):
    alert = {"version": "4", "status": "firing", "alerts": [
        {"status": "firing", "labels": {"alertname": "VllmOomSurge", "namespace": "serving"},
         "annotations": {}, "fingerprint": "abc"}]}
    path = tmp_path / "alert.json"
    path.write_text(json.dumps(alert))
    config = tmp_path / "runbook.yaml"  # `serving` is not the playbook's namespace: it must be allowed
    config.write_text("kubernetes: {namespaces: [serving]}\n")
    result = invoke("oom-surge", "--dry-run", "--alert", str(path), "-p", "scale_to=2", "--output", "json",
                    "--config", str(config))
    events = read_journal(json.loads(result.stdout)["journal"]).events
    started = next(e for e in events if e.type == ev.RUN_STARTED)
    assert started.data["params"]["namespace"] == "serving" and started.data["params"]["scale_to"] == "2"
    received = next(e for e in events if e.type == ev.ALERT_RECEIVED)
    assert received.data["name"] == "VllmOomSurge"


def test_a_bad_param_or_unknown_playbook_is_a_clear_error(tmp_path):
    assert invoke("oom-surge", "-p", "novalue").exit_code == 2
    result = invoke("oom-surg")
    assert result.exit_code == 3 and "runbook list" in result.stderr
