"""Issue 15, item 7: `-o/--output` is the format in every command, as in kubectl; `-f/--out-file` the destination."""

from __future__ import annotations

import json

import click
import pytest

from runbook.cli import COMMANDS, main
from tests.cli.helpers import runbook

# `runbook rules` takes its destination the same way in the change that owns it (issue 15, item 7's rules part).
ELSEWHERE = {"rules"}


@pytest.fixture(scope="module")
def incident(tmp_path_factory):
    state = tmp_path_factory.mktemp("state")
    state.chmod(0o700)
    done = runbook("drill", "waiting-queue", "--yes", "-o", "json", env={"RUNBOOK_STATE_DIR": str(state)})
    assert done.exit_code == 0, done.stderr
    return state, json.loads(done.stdout)["incident_id"]


@pytest.mark.parametrize("name", sorted(set(COMMANDS) - ELSEWHERE))
def test_item7_dash_o_is_a_format_in_every_command(name):
    command = main.get_command(click.Context(main), name)
    options = [p for p in command.params if "-o" in getattr(p, "opts", [])]
    for option in options:
        assert "--output" in option.opts, f"runbook {name}: -o is not --output"
        assert isinstance(option.type, click.Choice), f"runbook {name}: -o takes {option.type.name}, not a format"
    destinations = [p for p in command.params if "--out-file" in getattr(p, "opts", [])]
    assert all("-f" in p.opts for p in destinations)


def test_item7_rca_takes_the_format_with_o_and_the_file_with_f(incident, tmp_path):
    state, incident_id = incident
    env = {"RUNBOOK_STATE_DIR": str(state)}
    shown = runbook("rca", incident_id, "-o", "html", "-f", "-", env=env)
    assert shown.exit_code == 0, shown.stderr
    assert shown.stdout.lower().startswith("<!doctype html>") and shown.stderr == ""
    target = tmp_path / "report.md"
    written = runbook("rca", incident_id, "--output", "md", "--out-file", str(target), env=env)
    assert written.exit_code == 0, written.stderr
    assert written.stdout == f"{target}\n"
    assert target.read_text(encoding="utf-8").startswith("# RCA: ")


def test_item7_a_destination_given_to_o_says_where_it_belongs(incident, tmp_path):
    state, incident_id = incident
    for value in ("-", str(tmp_path / "report.md")):
        result = runbook("rca", incident_id, "-o", value, env={"RUNBOOK_STATE_DIR": str(state)})
        assert result.exit_code == 2
        assert result.stdout == ""
        assert result.stderr.endswith(
            f"Error: Invalid value for '--output' / '-o': {value!r} is not a format: -o is the report's format "
            f"(md or html), as in kubectl; give the destination with -f/--out-file {value}\n")
    assert not (tmp_path / "report.md").exists()
