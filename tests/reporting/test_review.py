"""`runbook review` over journals the engine itself wrote: real runs of the bundled playbooks on the
simulated world (resolved, rolled back, refused and escalated, a change left in doubt) and a drill.

Each incident is run by the same Engine and JsonlJournal as `runbook run`, with an incident id that
is not a drill's; the review is read back through the CLI as a user would.
"""

from __future__ import annotations

import collections
import importlib.resources
import json
import os
import time

import pytest
from click.testing import CliRunner

from runbook.record import journal as journals
from runbook.actions import load_builtin
from runbook.cli import main
from runbook.clock import FakeClock
from runbook.drill.run import bundled_playbook, run_drill
from runbook.engine.operator import AssumeYes
from runbook.engine.runner import Engine
from runbook.errors import BackendError
from runbook.record.locks import MemoryLocks
from runbook.model.alert import Alert
from runbook.reporting.review_facts import from_journal
from runbook.sim.scenario import load_scenario, parse_scenario
from runbook.sim.world import build_world

SINCE = "2026-01-01T00:00:00Z"  # before every bundled scenario's start: their events carry its virtual time


class LosesEveryAnswer:
    """A cluster whose argv patches are stored but whose answers never come back, the rollback's too."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def set_container_argv(self, *args, dry_run=False, **kwargs):
        done = self.inner.set_container_argv(*args, dry_run=dry_run, **kwargs)
        if not dry_run:
            raise BackendError("the answer was cut off")
        return done


def scenario_text(name: str) -> str:
    return (importlib.resources.files("runbook") / "scenarios" / f"{name}.yaml").read_text(encoding="utf-8")


def run_incident(state, scenario, *, wrap_cluster=None) -> str:
    """One real (not drill) run of the scenario's playbook, journaled in `state`; its incident id."""
    registry = load_builtin()
    playbook = bundled_playbook(scenario.playbook, registry)
    clock = FakeClock(scenario.t0)
    backends = build_world(scenario, clock).world_backends()
    if wrap_cluster is not None:
        backends.cluster = wrap_cluster(backends.cluster)
    incident = journals.new_incident_id(scenario.t0, playbook.name)
    journal = journals.JsonlJournal.for_incident(state, incident, journals.new_run_id())
    engine = Engine(registry=registry, world=backends, clock=clock, journal=journal, operator=AssumeYes("oncall"),
                    locks=MemoryLocks(), history=journals.History(None, extra=journal), holder="test")
    alert = Alert(source="alertmanager", name=scenario.alert.name, labels=dict(scenario.alert.labels),
                  annotations={}, starts_at=scenario.t0)
    try:
        engine.run(playbook, alert=alert, params=scenario.params)
    finally:
        journal.close()
    return incident


def review(state, *args: str):
    result = CliRunner().invoke(main, ["review", *args], env={"RUNBOOK_STATE_DIR": str(state)},
                                catch_exceptions=False)
    return result


@pytest.fixture(scope="module")
def week(tmp_path_factory):
    """A state directory with five real incidents and one drill, and the ids by what happened."""
    state = tmp_path_factory.mktemp("review") / "state"
    state.mkdir(mode=0o700)
    no_fix = scenario_text("oom-surge")
    no_fix = no_fix[:no_fix.index("  - name: lower-max-model-len-stops-ooms")]  # the lowered limit does not help
    ids = {
        "resolved": run_incident(state, load_scenario("oom-surge")),
        "resolved_again": run_incident(state, load_scenario("oom-surge-at-floor")),
        "rolled_back": run_incident(state, parse_scenario(no_fix, "oom-surge-no-fix")),
        "escalated": run_incident(state, load_scenario("waiting-queue-all-unready")),
        # The argv patch is stored but its answer is lost, and so is its rollback's: the change is in doubt.
        "in_doubt": run_incident(state, load_scenario("oom-surge"), wrap_cluster=LosesEveryAnswer),
    }
    ids["drill"] = run_drill("zombie-process", state=state, operator=AssumeYes("oncall")).run.incident
    return state, ids


def test_the_review_counts_each_real_incident_by_playbook_and_fate_and_the_drill_apart(week):
    state, ids = week
    result = review(state, "--since", SINCE, "-o", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert (doc["incidents"], doc["drills"]) == (5, 1)
    facts = {name: from_journal(journals.incident_dir(state, i) / journals.JOURNAL_NAME) for name, i in ids.items()}
    assert [facts[n].outcome for n in ("resolved", "resolved_again", "rolled_back", "escalated")] == \
        ["resolved", "resolved", "rolled_back", "refused"]
    assert doc["outcomes"] == dict(sorted(collections.Counter(facts[n].outcome for n in ids if n != "drill").items()))
    by = {(r["playbook"], r["severity"]): r for r in doc["by_playbook"]}
    assert by[("oom-surge", "P1")]["incidents"] == 4 and by[("waiting-queue", "P1")]["incidents"] == 1
    assert doc["drill_playbooks"] == {"zombie-process": 1}  # the drill is counted apart, never as an incident

    actions = {r["action"]: r for r in doc["actions"]}
    assert actions["k8s.scale"]["rolled_back"] >= 1 and actions["k8s.scale"]["resolved"] == 2
    assert actions["k8s.set_arg"]["undo_failed"] == 1
    assert actions["k8s.delete_pod"]["refused"] == 1 and actions["k8s.delete_pod"]["applied"] == 0

    [doubt] = doc["in_doubt"]
    assert (doubt["incident"], doubt["action"], doubt["target"]) == (ids["in_doubt"], "k8s.set_arg",
                                                                     "llm/statefulset/vllm-server")
    # The refused run handed the incident to a person, and so did the one whose fix did not hold.
    assert sorted(e["incident"] for e in doc["escalations"]) == sorted([ids["escalated"], ids["rolled_back"]])
    recurring = {r["target"]: r for r in doc["recurring_targets"]}
    # The four oom-surge runs and waiting-queue's refused delete of one of its pods: the same workload again.
    assert recurring["llm/statefulset/vllm-server"]["incidents"] == 5
    assert recurring["llm/statefulset/vllm-server"]["playbooks"] == ["oom-surge", "waiting-queue"]


def test_the_times_run_from_the_alerts_start_to_the_first_line_the_verify_and_the_resolved_end(week):
    state, ids = week
    resolved = from_journal(journals.incident_dir(state, ids["resolved"]) / journals.JOURNAL_NAME)
    scenario = load_scenario("oom-surge")
    assert resolved.alert_start == scenario.t0 and resolved.seconds_to("detect") == 0
    # oom-surge's world stops its OOMs a minute after the fix, and the observation window is 5m; then the
    # capacity comes back in 5m30s (two replicas, each ready in 45s and quiet for 2m), which ends it.
    assert resolved.seconds_to("mitigate") == 60 and resolved.seconds_to("resolve") == 360 + 330
    refused = from_journal(journals.incident_dir(state, ids["escalated"]) / journals.JOURNAL_NAME)
    assert refused.seconds_to("mitigate") is None and refused.seconds_to("resolve") is None  # unknown, not 0
    doc = json.loads(review(state, "--since", SINCE, "-o", "json").stdout)
    assert doc["times"]["resolve"]["count"] == 2  # only the two resolved runs have a time to resolve
    assert doc["by_playbook"][0]["times"]["detect"]["median"] == "0s"


def test_text_and_html_say_every_section_and_html_draws_a_chart_per_trend(week, tmp_path):
    state, ids = week
    text = review(state, "--since", SINCE).stdout
    assert text.startswith("Review 2026-01-01 → ") and "5 incident(s), 1 drill(s) apart" in text
    assert f"{ids['in_doubt']}: k8s.set_arg on llm/statefulset/vllm-server — its rollback failed" in text
    assert "llm/statefulset/vllm-server: 5 incidents (oom-surge, waiting-queue)" in text
    assert "Drills: zombie-process 1; resolved 1" in text
    out = tmp_path / "review.html"
    result = review(state, "--since", SINCE, "-o", "html", "-f", str(out))
    assert result.exit_code == 0 and result.stdout.strip() == str(out)
    page = out.read_text()
    assert page.count('<img alt="') == 3 and page.count("data:image/png;base64,") == 3
    assert f'<tr class="doubt"><td><code>{ids["in_doubt"]}</code>' in page
    assert oct(out.stat().st_mode & 0o777) == "0o600"


def test_the_window_and_the_drills_flag_choose_what_is_reviewed(week):
    state, ids = week
    doc = json.loads(review(state, "--since", "7d", "-o", "json").stdout)
    # The real runs carry March's virtual times; the drill ran now by the wall clock.
    assert (doc["incidents"], doc["drills"]) == (0, 1)
    drills = json.loads(review(state, "--since", "7d", "--drills", "-o", "json").stdout)
    assert drills["subject"] == "drills" and drills["incidents"] == 1 and drills["drills"] == 0
    assert drills["by_playbook"][0]["playbook"] == "zombie-process"


def test_a_journal_last_written_before_the_window_is_left_out_and_a_torn_one_is_named(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    old = run_drill("zombie-process", state=state, operator=AssumeYes("oncall")).journal
    torn = run_drill("waiting-queue", state=state, operator=AssumeYes("oncall")).journal
    month_ago = time.time() - 30 * 86400
    os.utime(old, (month_ago, month_ago))
    with open(torn, "ab") as f:
        f.write(b'{"seq":999,"at":"2026-03-17T15:00:00.000Z","incident":"x","run":"y","type":"action.appl')
    doc = json.loads(review(state, "--since", "7d", "--drills", "-o", "json").stdout)
    assert doc["incidents"] == 1 and doc["damaged"] == [torn.parent.name]
    assert "a change may be missing" in review(state, "--since", "7d", "--drills").stdout


def test_a_bad_window_is_a_clear_error():
    result = CliRunner().invoke(main, ["review", "--since", "last tuesday"])
    assert result.exit_code == 2 and "--since" in result.stderr and "ISO 8601" in result.stderr
    result = CliRunner().invoke(main, ["review", "--since", "2999-01-01T00:00:00Z"])
    assert result.exit_code == 2 and "in the future" in result.stderr


def test_what_a_journal_says_reaches_the_html_escaped(week):
    state, ids = week
    doc = json.loads(review(state, "--since", SINCE, "-o", "json").stdout)
    # An escalation's reason quotes what the run read (an alert's labels, a pod's name): never markup.
    doc["escalations"][0]["why"] = '<script>alert(1)</script> & "x"'
    from runbook.reporting.review_render import html

    page = html(doc)
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &#34;x&#34;" in page
