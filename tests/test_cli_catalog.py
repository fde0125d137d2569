"""`runbook validate`, `list`, `actions`: exit codes and exact problem locations."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from runbook.cli import main
from runbook.model.registry import Kind
from runbook.actions import load_builtin

BROKEN = """\
name: broken
title: a broken playbook
params: {namespace: llm}
steps:
  - id: pods
    uses: k8s.pods
    with: {workload: statefulset/vllm-server}
  - id: scale
    uses: k8s.scael
    with: {target: statefulset/vllm-server, replicas: 1}
  - id: scale-again
    uses: k8s.scale
    with:
      target: statefulset/vllm-server
      replicas: one
  - id: note
    uses: flow.note
    with: {message: hi}
    gaurd: {confirm: false}
  - id: note-again
    uses: flow.note
    uses: flow.note
    with: {message: twice}
"""


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_a_broken_playbook_gets_four_located_problems(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text(BROKEN)
    result = invoke("validate", str(path), "--output", "json")
    assert result.exit_code == 3
    problems = json.loads(result.stdout)
    found = [(p["line"], p["column"], p["path"], p["code"]) for p in problems]
    assert found == [
        (9, 11, "steps[1].uses", "RB102"),
        (15, 17, "steps[2].with.replicas", "RB110"),
        (19, 5, "steps[3].gaurd", "RB103"),
        (22, 5, "steps[4].uses", "RB101"),
    ], problems
    assert "did you mean `k8s.scale`?" in problems[0]["hint"]
    assert "guard" in problems[2]["hint"]
    assert all(p["file"] == str(path) for p in problems)


def test_the_text_report_names_file_line_column(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text(BROKEN)
    result = invoke("validate", str(path))
    assert result.exit_code == 3
    assert f"{path}:9:11  steps[1].uses  [RB102 unknown-action]" in result.stderr


def test_bundled_playbooks_validate():
    result = invoke("validate")
    assert result.exit_code == 0, result.output
    bundled = sorted((Path(__file__).resolve().parents[1] / "playbooks").glob("*.yaml"))
    assert len(bundled) >= 4
    assert result.stdout.count("ok  <bundled>/") == len(bundled)


def test_list_shows_the_bundled_playbooks():
    result = invoke("list", "--output", "json")
    assert result.exit_code == 0
    names = {p["name"]: p for p in json.loads(result.stdout)}
    assert set(names) >= {"oom-surge", "waiting-queue", "zombie-process", "lingering-cuda-context"}
    assert "VllmOomSurge" in names["oom-surge"]["alerts"]


def test_every_action_is_documented_with_a_kind_and_params():
    result = invoke("actions", "--output", "json")
    actions = {a["name"]: a for a in json.loads(result.stdout)}
    assert set(actions) == set(load_builtin().names())
    for spec in load_builtin().specs():
        assert spec.doc and spec.kind in Kind
    assert actions["k8s.set_arg"]["kind"] == "remediation"
    assert {p["name"] for p in actions["k8s.set_arg"]["params"]} >= {"target", "flag", "factor", "floor"}


def test_describe_an_unknown_action_suggests_one():
    result = invoke("actions", "k8s.scael")
    assert result.exit_code == 3 and "k8s.scale" in result.stderr


def test_a_missing_path_is_a_clear_error(tmp_path):
    result = invoke("validate", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 3 and "no such file" in result.stderr
