"""Issue 15, item 13: names that line up. The alert each drill fires is the alert `runbook list` says
starts its playbook and the one `runbook rules` exports for it, with the labels the playbook reads;
the SOP's two waiting-queue numbers (its alert line, a pod's queue > 10 for 1 min; scenario B's,
the summed queue > 50, sustained) are each one param of waiting-queue, used the same way by its
steps, its detect (so triage, the re-check and the exported rule), and named in the catalog text.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from runbook.actions import load_builtin
from runbook.cli import main
from runbook.drill.run import bundled_playbook
from runbook.loading import validation
from runbook.signals.catalog import build_catalog
from runbook.sim.scenario import load_scenario, scenario_names
from runbook.triage.rules import alerting_rules


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def exported() -> dict[str, dict]:
    rules = json.loads(invoke("rules", "-o", "json").stdout)["groups"][0]["rules"]
    return {r["labels"]["runbook_playbook"]: r for r in rules}


@pytest.fixture(scope="module")
def listed() -> dict[str, list[str]]:
    return {p["name"]: p["alerts"] for p in json.loads(invoke("list", "--output", "json").stdout)}


@pytest.mark.parametrize("name", scenario_names())
def test_item13_each_drill_fires_the_alert_list_shows_and_rules_export(name, exported, listed):
    scenario = load_scenario(name)
    book = bundled_playbook(scenario.playbook, load_builtin())
    rule = exported[book.name]
    assert scenario.alert.name == rule["alert"] == listed[book.name][0]
    assert scenario.alert.labels.get("severity") == rule["labels"]["severity"]
    needed = {label for param, label in book.match.labels.items() if book.params.get(param) is None}
    assert needed <= set(scenario.alert.labels)  # what the playbook has no default for comes with the alert


def test_item13_the_two_waiting_queue_numbers_are_each_one_param(exported):
    book = bundled_playbook("waiting-queue", load_builtin())
    assert (book.params["waiting_alert"], book.params["waiting_act"]) == (10, 50)
    assert book.detect.above == 50 and book.detect.for_ == 60
    by_pod = book.step("waiting-by-pod")
    assert by_pod.with_["above"] == "{{ params.waiting_alert }}"
    rule = exported["waiting-queue"]
    assert rule["expr"].endswith("> 50") and rule["for"] == "1m"
    assert rule["annotations"]["description"].startswith("waiting_requests > 50 for 1m.")
    for profile in ("vllm", "article"):
        text = build_catalog(profile=profile).get("waiting_requests").help
        assert "> 10 for 1 min (waiting-queue's `waiting_alert`)" in text
        assert "> 50, sustained (its `waiting_act`)" in text


def test_item13_a_detect_bound_names_a_param_and_takes_its_default(tmp_path):
    text = ("name: q\ntitle: t\ndetect: {signal: waiting_requests, above: '{{ params.act }}'}\n"
            "params: {act: 40, label: llm}\nsteps:\n  - id: s\n    uses: prom.query\n"
            "    with: {signal: waiting_requests, above: '{{ params.act }}'}\n")
    loaded = validation.load_playbook_text(text, file="q.yaml", registry=load_builtin())
    assert loaded.ok, [p.format() for p in loaded.problems]
    assert loaded.playbook.detect.above == 40
    document, _ = alerting_rules([loaded.playbook.model_copy(update={"match": loaded.playbook.match.model_copy(
        update={"alerts": ("Q",)})})], build_catalog())
    assert document["groups"][0]["rules"][0]["expr"].endswith("> 40")
    for bad, why in (("'{{ params.label }}'", "param `label` is 'llm', not a number"),
                     ("'{{ params.nope }}'", "no param `nope` in this playbook's params")):
        broken = validation.load_playbook_text(text.replace("'{{ params.act }}'}\nparams", f"{bad}}}\nparams", 1),
                                               file="q.yaml", registry=load_builtin())
        assert [(p.path, p.line) for p in broken.problems] == [("detect.above", 3)], broken.problems
        assert why in broken.problems[0].message
