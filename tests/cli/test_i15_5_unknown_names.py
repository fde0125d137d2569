"""Issue 15, item 5: a misspelled param, playbook or scenario is an error with "did you mean", never ignored."""

from __future__ import annotations

import os

from tests.cli.helpers import runbook


def _incidents(state) -> list[str]:
    folder = state / "incidents"
    return sorted(os.listdir(folder)) if folder.is_dir() else []


def test_item5_an_unknown_param_is_refused_before_anything_else(tmp_path):
    # A config file that does not exist would be the next error: the param is checked before it.
    result = runbook("run", "oom-surge", "-p", "nmespace=prod", "--dry-run", "--config", str(tmp_path / "none.yaml"))
    assert result.exit_code == 3
    assert result.stdout == ""
    assert result.stderr == ("Error: playbook oom-surge has no param nmespace (from --param nmespace); "
                             "did you mean `namespace`?\n")
    assert _incidents(tmp_path / "state") == []


def test_item5_every_unknown_param_is_named_at_once(tmp_path):
    result = runbook("run", "oom-surge", "-p", "workloda=sts/x", "-p", "zzz=1", "--dry-run")
    assert result.exit_code == 3
    assert result.stderr == (
        "Error: playbook oom-surge has no param workloda (from --param workloda); did you mean `workload`?\n"
        "playbook oom-surge has no param zzz (from --param zzz); its params: container, max_model_len_factor, "
        "max_model_len_floor, namespace, observe, restore, restore_observe, scale_to, workload\n")
    assert _incidents(tmp_path / "state") == []


def test_item5_a_misspelled_playbook_gets_a_suggestion():
    result = runbook("run", "oom-surg")
    assert result.exit_code == 3
    assert result.stderr == ("Error: no playbook oom-surg: give a file, or a name from `runbook list`; "
                             "did you mean `oom-surge`?\n")


def test_item5_a_misspelled_scenario_gets_a_suggestion(tmp_path):
    result = runbook("drill", "oom-surg", "--yes")
    assert result.exit_code == 3
    assert result.stdout == ""
    assert result.stderr == "Error: no scenario oom-surg (see `runbook drill --list`); did you mean `oom-surge`?\n"
    assert _incidents(tmp_path / "state") == []


def test_item5_a_scenario_nothing_like_any_lists_the_first_fifteen():
    result = runbook("drill", "qqq")
    assert result.exit_code == 3
    from runbook.sim.scenario import scenario_names

    names = sorted(scenario_names())
    shown = ", ".join(names[:15]) + (f", … ({len(names) - 15} more)" if len(names) > 15 else "")
    # More than 15 are counted, not listed: the message already names `runbook drill --list`.
    assert result.stderr == ("Error: no scenario qqq (see `runbook drill --list`); expected one of: "
                             f"{shown}\n")
    assert "lingering-cuda-context, oom-surge, " in result.stderr
