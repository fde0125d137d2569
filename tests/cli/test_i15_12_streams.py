"""Issue 15, item 12: human output on stdout and errors on stderr; NO_COLOR means no styling at all;
no Python reprs in what people read; `runbook version`; shell completion of playbook, scenario and
incident names."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys

import pytest

from runbook import __version__
from tests.cli.helpers import runbook


def test_item12_a_drill_shows_its_progress_on_stdout_and_nothing_on_stderr():
    result = runbook("drill", "waiting-queue", "--yes")
    assert result.exit_code == 0
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert "14:41:30 ▶ delete-unready k8s.delete_pod Delete the pods that are not ready" in lines
    assert lines[-2].startswith("journal: ") and lines[-1].startswith("report:  ")


def test_item12_json_stays_one_document_on_stdout():
    result = runbook("drill", "waiting-queue", "--yes", "-o", "json")
    assert result.exit_code == 0 and result.stderr == ""
    assert json.loads(result.stdout)["outcome"] == "resolved"


@pytest.mark.parametrize("scenario", ["oom-surge", "waiting-queue", "lingering-cuda-context"])
def test_item12_no_python_reprs_in_what_people_read(scenario):
    result = runbook("drill", scenario, "--yes")
    assert result.exit_code == 0
    # Text in backticks is quoted source (a playbook's `when:` expression), not a value shown to people.
    shown = re.sub(r"`[^`\n]*`", "`…`", result.stdout + result.stderr)
    for marker in ("['", "{'", "\\\\"):
        assert marker not in shown, [line for line in shown.splitlines() if marker in line]


def test_item12_plans_read_as_words():
    deleted = runbook("drill", "waiting-queue", "--yes").stdout.splitlines()
    assert "             - pods: vllm-server-2" in deleted
    assert "             + pods: none" in deleted
    killed = runbook("drill", "oom-surge-at-floor", "--yes").stdout  # at its floor, the server is killed
    assert "plan: send SIGKILL to 1 process(es) matching `vllm\\.entrypoints|vllm serve` in vllm-server-0" in killed


def _on_a_terminal(args: list[str], env: dict[str, str]) -> bytes:
    primary, secondary = pty.openpty()
    child = subprocess.Popen([sys.executable, "-m", "runbook", *args], stdout=secondary, stderr=secondary,
                             stdin=subprocess.DEVNULL, env=env)
    os.close(secondary)
    seen = b""
    try:
        while True:
            ready, _, _ = select.select([primary], [], [], 30)
            assert ready, f"runbook {' '.join(args)} said nothing for 30 s: {seen[-500:]!r}"
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        assert child.wait(timeout=30) == 0, seen[-2000:]
    finally:
        if child.poll() is None:
            child.kill()
        os.close(primary)
    return seen


def test_item12_no_color_drops_bold_and_dim_too():
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM")}
    env["TERM"] = "xterm-256color"
    styled = _on_a_terminal(["actions"], env)
    assert b"\x1b[1m" in styled  # bold action names on a terminal: the check below can fail
    plain = _on_a_terminal(["actions"], {**env, "NO_COLOR": "1"})
    assert b"\x1b[" not in plain
    assert b"k8s.scale  remediation, reversible" in plain


def test_item12_runbook_version():
    result = runbook("version")
    assert (result.exit_code, result.stdout, result.stderr) == (0, f"runbook {__version__}\n", "")
    document = json.loads(runbook("version", "-o", "json").stdout)
    assert document["runbook"] == __version__ and document["python"] == sys.version.split()[0]


def _complete(words: str, tmp_path=None) -> list[str]:
    env = {"_RUNBOOK_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1)}
    from click.testing import CliRunner

    from runbook.cli import main

    result = CliRunner().invoke(main, [], env=env, prog_name="runbook")
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def test_item12_shell_completion_names_playbooks_scenarios_and_incidents():
    from runbook.sim.scenario import scenario_names

    oom = [f"plain,{name}" for name in scenario_names() if name.startswith("oom")]
    assert {"plain,oom-surge", "plain,oom-surge-metrics-down"} <= set(oom)
    assert _complete("runbook drill oom") == oom
    assert _complete("runbook run wait") == ["plain,waiting-queue"]
    done = runbook("drill", "zombie-process", "--yes", "-o", "json")
    incident = json.loads(done.stdout)["incident_id"]
    assert _complete("runbook rca drill-2026031") == [f"plain,{incident}"]
    assert _complete("runbook actions k8s.s") == ["plain,k8s.scale", "plain,k8s.set_arg"]


def test_item12_completion_scripts_for_the_usual_shells():
    for shell, marker in (("bash", "_RUNBOOK_COMPLETE=bash_complete"), ("zsh", "_RUNBOOK_COMPLETE=zsh_complete"),
                          ("fish", "_RUNBOOK_COMPLETE=fish_complete")):
        result = runbook("completion", shell)
        assert result.exit_code == 0 and marker in result.stdout and result.stderr == ""
    wrong = runbook("completion", "tcsh")
    assert wrong.exit_code == 2 and "'tcsh' is not one of 'bash', 'zsh', 'fish'" in wrong.stderr


def test_item12_a_refused_value_is_shown_with_its_own_backslashes_not_doubled():
    from runbook.text.intake_values import shown

    assert shown("llm\n\x1b[31m") == "'llm\\n\\x1b[31m'"  # control characters escaped, once
    assert shown("vllm\\.entrypoints") == "'vllm\\.entrypoints'"  # a backslash typed is shown as typed
    result = runbook("run", "oom-surge", "-p", "workload=sts\\x")
    assert result.exit_code == 3
    assert result.stderr == ("Error: --param workload='sts\\x' is not a safe value (names of letters, digits, '-', "
                             "'_', '.', joined by '/', '=', ',' or ':'; at most 253); a value is data, never a "
                             "template or a command: put anything else in the playbook\n")


def test_item12_triage_says_why_it_runs_nothing_on_stdout():
    # nothing listens on port 9 of loopback: Prometheus cannot be read, and triage must not act blind
    result = runbook("triage", "--run", "--prometheus-url", "http://127.0.0.1:9")
    assert result.exit_code == 11, result.stdout + result.stderr
    assert "not running anything: Prometheus could not be read" in result.stdout
    assert "not running anything" not in result.stderr
