"""Issue 15, item 7 for `runbook rules`: `-o/--output` is the format (yaml or json), as in kubectl;
`-f/--out-file` the destination. `runbook rules -o json` never writes YAML to a file named `json`.
"""

from __future__ import annotations

import json

import yaml
from click.testing import CliRunner

from runbook.cli import main


def rules(*args: str):
    return CliRunner().invoke(main, ["rules", *args], catch_exceptions=False)


def test_item7_dash_o_json_is_the_format_on_stdout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = rules("-o", "json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["groups"][0]["name"] == "runbook-playbooks"
    assert not (tmp_path / "json").exists()


def test_item7_dash_f_is_the_destination(tmp_path):
    target = tmp_path / "runbook-rules.yaml"
    result = rules("-f", str(target))
    assert result.exit_code == 0, result.output
    count = sum(len(g["rules"]) for g in yaml.safe_load(target.read_text())["groups"])
    assert result.stdout == "" and f"wrote {count} rule(s) to {target}" in result.stderr
    from runbook.files.discovery import bundled_dir

    detected = [f for f in bundled_dir().glob("*.yaml") if "\ndetect:" in f.read_text()]
    assert len(yaml.safe_load(target.read_text())["groups"][0]["rules"]) == len(detected)  # one per playbook's detect
    as_json = tmp_path / "rules.json"
    assert rules("--output", "json", "--out-file", str(as_json)).exit_code == 0
    assert json.loads(as_json.read_text()) == yaml.safe_load(target.read_text())


def test_item7_a_file_given_to_o_says_where_it_belongs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = rules("-o", "runbook-rules.yaml")
    assert result.exit_code == 2 and result.stdout == ""
    assert ("'runbook-rules.yaml' is not a format: -o is the rules' format (yaml or json), as in kubectl; "
            "give the destination with -f/--out-file runbook-rules.yaml") in result.stderr
    assert not (tmp_path / "runbook-rules.yaml").exists()
