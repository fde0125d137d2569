"""Issue 15, item 4: every `signal:` a playbook names is checked against the signal catalog at
load time — `runbook validate` reports a misspelt one as file:line:col with "did you mean", and
leaves alone what is not a metric signal (a kill's `signal: KILL`) or not known until run time.
"""

from __future__ import annotations

import json

from click.testing import CliRunner

from runbook.actions import load_builtin
from runbook.cli import main
from runbook.loading import validation
from runbook.signals.catalog import build_catalog

MISSPELT = """\
name: queue
title: a waiting queue
detect: {signal: waiting_reqests, above: 50}
params: {namespace: llm, node: gpu-node-0, which: waiting_requests}
steps:
  - id: by-pod
    uses: prom.query
    with: {signal: waiting_requets, by: [pod]}
  - id: templated
    uses: prom.query
    with: {signal: "{{ params.which }}"}
  - id: kill
    uses: node.kill_pids
    with: {node: "{{ params.node }}", pids: [4242], signal: KILL}
"""


def validate(*args: str):
    return CliRunner().invoke(main, ["validate", *args], catch_exceptions=False)


def test_validate_reports_unknown_signal_names_with_place_and_suggestion(tmp_path):
    book = tmp_path / "queue.yaml"
    book.write_text(MISSPELT)
    result = validate(str(book))
    assert result.exit_code == 3
    assert f"{book}:3:18  detect.signal  [RB132 unknown-signal]" in result.output
    assert f"{book}:8:20  steps[0].with.signal  [RB132 unknown-signal]" in result.output
    assert "    no signal `waiting_reqests` in signal profile vllm\n    hint: did you mean `waiting_requests`?" in result.output
    assert "no signal `waiting_requets`" in result.output
    # A Unix signal and a signal chosen by a template are not metric signal names to check now.
    assert "KILL" not in result.output and "templated" not in result.output
    assert result.output.count("unknown-signal") == 2


def test_the_check_as_json_points_at_the_value(tmp_path):
    book = tmp_path / "queue.yaml"
    book.write_text(MISSPELT)
    problems = json.loads(validate("--output", "json", str(book)).stdout)
    assert [(p["path"], p["line"], p["column"], p["code"]) for p in problems] == [
        ("detect.signal", 3, 18, "RB132"), ("steps[0].with.signal", 8, 20, "RB132")]


def test_a_signal_the_config_file_adds_is_known(tmp_path, monkeypatch):
    config = tmp_path / "runbook.yaml"
    config.write_text("signals:\n  overrides:\n    waiting_reqests: {aggregate: sum, expr: 'my_queue{{labels}}'}\n"
                      "    waiting_requets: {aggregate: sum, expr: 'my_queue{{labels}}'}\n")
    monkeypatch.setenv("RUNBOOK_CONFIG", str(config))
    book = tmp_path / "queue.yaml"
    book.write_text(MISSPELT)
    result = validate(str(book))
    assert result.exit_code == 0, result.output


def test_a_catalog_given_by_the_caller_is_the_one_checked_against(tmp_path):
    catalog = build_catalog(profile="article")
    loaded = validation.load_playbook_text(MISSPELT.replace("waiting_reqests", "gpu_cache_hit_rate")
                                           .replace("waiting_requets", "gpu_cache_hit_rate"),  # the article's alone
                                           file="queue.yaml", registry=load_builtin(), catalog=catalog)
    assert loaded.ok, [p.format() for p in loaded.problems]
    plain = validation.load_playbook_text(MISSPELT.replace("waiting_reqests", "gpu_cache_hit_rate")
                                          .replace("waiting_requets", "gpu_cache_hit_rate"),  # the article's alone
                                          file="queue.yaml", registry=load_builtin())
    assert {p.path for p in plain.problems} == {"detect.signal", "steps[0].with.signal"}
    assert "in signal profile vllm" in plain.problems[0].message


def test_every_bundled_playbook_names_only_catalog_signals():
    result = validate()
    assert result.exit_code == 0, result.output
