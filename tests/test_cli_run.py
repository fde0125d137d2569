"""`runbook run`: params from flags and alert labels, and clear errors for bad params and names."""

from __future__ import annotations

import json

from click.testing import CliRunner

from runbook.cli import main
from runbook.cli.run import alert_from_file, gather_params, resolve_playbook


def invoke(*args: str, input: str | None = None):
    return CliRunner().invoke(main, ["run", *args], input=input, catch_exceptions=False)


def test_alert_labels_fill_params_through_match_and_flags_win(tmp_path):
    # Without backends a run is refused before it starts (tests/cli/test_i15_6_world_check.py), so the
    # params are read here as `runbook run` gathers them.
    alert = {"version": "4", "status": "firing", "alerts": [
        {"status": "firing", "labels": {"alertname": "VllmOomSurge", "namespace": "serving"},
         "annotations": {}, "fingerprint": "abc"}]}
    path = tmp_path / "alert.json"
    path.write_text(json.dumps(alert))
    book = resolve_playbook("oom-surge")
    received = alert_from_file(str(path))
    values, sources = gather_params(book, received, ("scale_to=2", "namespace=batch"), None)
    assert received.name == "VllmOomSurge" and received.labels["namespace"] == "serving"
    assert values == {"namespace": "batch", "scale_to": "2"}
    assert sources == {"namespace": "--param namespace", "scale_to": "--param scale_to"}
    values, sources = gather_params(book, received, ("scale_to=2",), None)
    assert values["namespace"] == "serving" and sources["namespace"] == "alert label namespace"


def test_a_bad_param_or_unknown_playbook_is_a_clear_error(tmp_path):
    assert invoke("oom-surge", "-p", "novalue").exit_code == 2
    result = invoke("oom-surg")
    assert result.exit_code == 3 and "runbook list" in result.stderr
