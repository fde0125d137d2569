"""PagerDuty notes of runs that did not end well (issue 16, item 6): what they left changed, and a refused token.

A run that raised out of the service, one a restart could not finish, and one rolled back each post a
note that says, from the journal, what is still changed, maybe changed or undone, and that a person must
look; a 401 or 403 is given up at once, names the variable to fix, and shows in /readyz.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from runbook.record import journal as journals
from runbook.backends.base import World
from runbook.model import events as ev
from runbook.sim.fakes import FakeMetrics
from runbook.webhook import left_behind
from runbook.webhook.settings import PAGERDUTY_API_TOKEN_ENV, Policy, WebhookConfig
from runbook.webhook.store import Store
from tests.engine.helpers import cluster as fake_cluster
from tests.webhook.helpers import journal, pd_event, pd_headers, request, secrets, serve
from tests.webhook.pagerduty_api import TOKEN, FakePagerDuty

UNATTENDED = Policy(unattended={"test-oom": ["scale-down"]})  # the run applies its change itself


def with_token():
    return dataclasses.replace(secrets(), pagerduty_api=TOKEN)


def config(pd: FakePagerDuty, *, policy: Policy = Policy()) -> WebhookConfig:
    return WebhookConfig(workers=2, policy=policy, pagerduty_notes=pd.settings())


def deliver(srv) -> str:
    reply = request(srv.url, "POST", "/webhooks/pagerduty", pd_event(), pd_headers(pd_event()))
    assert reply.status == 202, reply.body
    srv.wait_idle()
    assert srv.service.notes.wait_idle(20), "the note was not posted in time"
    return reply.body["alerts"][0]["incident"]


def note_states(state, incident: str) -> list[str]:
    return [e.data["pagerduty"]["state"] for e in journal(state, incident)
            if e.type == ev.NOTE and "pagerduty" in e.data]


def test_a_run_that_raises_after_its_change_posts_what_it_left_changed(state, pd):
    with serve(state, config=config(pd, policy=UNATTENDED), secrets_=with_token()) as srv:
        def store_gone(*args, **kwargs):  # the outcome cannot be recorded: the run raises out of the service
            raise RuntimeError("disk I/O error")

        srv.service.runs.finish = store_gone
        incident = deliver(srv)
        assert srv.service.store.incident(incident).state == "error"
    assert pd.violations == []
    [note] = pd.posted("PGR0VU2")
    content = note["content"]
    assert content.startswith("runbook: playbook test-oom DID NOT FINISH\nThe run raised RuntimeError: disk I/O error")
    assert "Still changed:\n- k8s.scale on llm/statefulset/vllm-server" in content
    assert "A person must look: check llm/statefulset/vllm-server by hand" in content
    assert "Nothing more will be tried for this incident until a person acts." in content
    run = [e.run for e in journal(state, incident) if e.type == ev.ACTION_APPLIED][0]
    assert content.endswith(f"runbook run {run}")  # the run whose journal it read, as a resend would look for
    assert note_states(state, incident) == ["posted"]


def test_a_rolled_back_run_says_what_it_changed_and_undid(state, pd):
    c = fake_cluster()
    world = World(metrics=FakeMetrics({"oom_failures_per_min": 4.0}), cluster=c)  # the change does not help
    with serve(state, world=world, config=config(pd, policy=UNATTENDED), secrets_=with_token()) as srv:
        deliver(srv)
    [note] = pd.posted("PGR0VU2")
    content = note["content"]
    assert "ended ROLLED_BACK" in content and "The run did not end well." in content
    assert "Changed, then rolled back:\n- k8s.scale on llm/statefulset/vllm-server" in content
    assert "Still changed" not in content
    assert "A person must look: the journal says how far it got" in content  # nothing is left changed
    assert [m[0] for m in c.mutations] == ["scale", "scale"]


def test_a_restart_that_leaves_the_change_to_a_person_posts_it(state, pd):
    with serve(state, config=config(pd), secrets_=with_token()) as srv:
        incident = deliver(srv)  # proposes: the first note
    # As a process killed mid-apply leaves it: a change confirmed, no result, the incident `running`.
    folder = journals.incident_dir(state, incident)
    interrupted = journals.JsonlJournal(folder / journals.JOURNAL_NAME, incident=incident, run="run-killed")
    at = dt.datetime(2026, 3, 14, 3, 20, tzinfo=dt.timezone.utc)
    interrupted.record(ev.RUN_STARTED, at=at, data={"playbook": "test-oom"})
    interrupted.record(ev.ACTION_PLANNED, at=at, step="scale-down", data={
        "action": "k8s.scale", "target": "llm/statefulset/vllm-server", "summary": "scale 7 -> 1",
        "before": {"replicas": 7}, "after": {"replicas": 1}})
    interrupted.record(ev.ACTION_CONFIRMED, at=at, step="scale-down", data={"by": "alice"})
    interrupted.close()
    store = Store(state / "webhook" / "state.sqlite3")
    with store.transaction() as db:
        db.execute("UPDATE incidents SET state = 'running', owner = 'elsewhere:1' WHERE id = ?", (incident,))
    store.close()
    with serve(state, config=config(pd), secrets_=with_token()) as srv:
        srv.wait_idle()
        assert srv.service.notes.wait_idle(20)
        assert srv.service.store.incident(incident).outcome == "interrupted"
    first, second = pd.posted("PGR0VU2")
    assert "ended PROPOSED" in first["content"]
    content = second["content"]
    assert content.startswith("runbook: playbook test-oom DID NOT FINISH\nA restart found the run interrupted: "
                              "llm/statefulset/vllm-server is now replicas=3, neither")
    assert "Maybe changed:\n- k8s.scale on llm/statefulset/vllm-server: scale 7 -> 1 (interrupted while being applied" \
        in content
    assert "check llm/statefulset/vllm-server by hand" in content
    assert content.endswith("runbook run run-killed")
    assert note_states(state, incident) == ["posted", "posted"]
    # The change may have happened: the restart counts it as applied, for every later cooldown and budget.
    killed = [e for e in journal(state, incident) if e.run == "run-killed"]
    assert [e.type for e in killed] == [ev.RUN_STARTED, ev.ACTION_PLANNED, ev.ACTION_CONFIRMED, ev.RUN_INTERRUPTED,
                                        ev.ACTION_UNKNOWN, ev.ESCALATED, ev.RUN_FINISHED]
    unknown = killed[4]
    assert (unknown.step, unknown.data["action"], unknown.data["target"], unknown.data["recovered"]) == \
        ("scale-down", "k8s.scale", "llm/statefulset/vllm-server", True)
    counted = journals.History(state).records("llm/statefulset/vllm-server", since=at, action="k8s.scale")
    assert [(a.incident, a.at) for a in counted] == [(incident, unknown.at)]
    assert unknown.at >= at  # counted from the restart: never a shorter wait than the real one


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_token_is_given_up_at_once_named_and_shown_by_readyz(state, pd, status):
    pd.script[("POST", "notes")] = [status]
    with serve(state, config=config(pd), secrets_=with_token()) as srv:
        incident = deliver(srv)
        ready = request(srv.url, "GET", "/readyz")
    assert len(pd.requests) == 1  # not retried: every try would be refused the same way
    [given_up] = [e for e in journal(state, incident) if e.type == ev.NOTE and "pagerduty" in e.data]
    assert given_up.data["pagerduty"]["state"] == "failed"
    assert f"answered {status}" in given_up.data["message"] and PAGERDUTY_API_TOKEN_ENV in given_up.data["message"]
    assert ready.status == 200 and ready.body["status"] == "ready"  # webhooks must still arrive
    [warning] = ready.body["warnings"]
    assert warning.startswith(f"1 PagerDuty note(s) given up; the latest, for incident {incident} (PagerDuty PGR0VU2)")
    assert PAGERDUTY_API_TOKEN_ENV in warning and TOKEN not in warning


def test_readyz_has_no_warnings_while_notes_post(state, pd):
    with serve(state, config=config(pd), secrets_=with_token()) as srv:
        deliver(srv)
        ready = request(srv.url, "GET", "/readyz")
    assert ready.status == 200 and ready.body == {"status": "ready"}


# -- what a run left behind, from its journal -------------------------------------------------

def _events(*rows):
    at = dt.datetime(2026, 3, 14, 3, 12, tzinfo=dt.timezone.utc)
    return [ev.Event(n, at, "inc-1", run, kind, step, data) for n, (run, kind, step, data) in enumerate(rows, 1)]


def change(target: str, summary: str = "") -> dict:
    return {"action": "k8s.scale", "target": target, "summary": summary}


def test_each_change_is_listed_by_its_last_fate_and_other_runs_are_left_out():
    events = _events(
        ("r1", ev.RUN_STARTED, None, {"playbook": "oom-surge"}),
        ("r1", ev.STEP_FINISHED, "oom", {"kind": "diagnostic", "status": "ok", "summary": "4 OOM/min"}),
        ("r1", ev.ACTION_PLANNED, "a", change("sts/a", "3 -> 1")),
        ("r1", ev.ACTION_APPLIED, "a", change("sts/a", "3 -> 1")),
        ("r1", ev.ACTION_APPLIED, "b", change("sts/b")),
        ("r1", ev.ROLLBACK_APPLIED, "b", {}),
        ("r1", ev.ACTION_APPLIED, "c", change("sts/c")),
        ("r1", ev.ROLLBACK_FAILED, "c", {"error": "forbidden"}),
        ("r1", ev.ACTION_UNKNOWN, "d", {**change("sts/d"), "error": "timed out"}),
        ("r1", ev.ACTION_PLANNED, "e", change("sts/e")),  # planned, never confirmed: no fate
        ("r2", ev.ACTION_APPLIED, "x", change("sts/x")),  # another run's change
    )
    left = left_behind.from_events(events, "r1")
    assert left.playbook == "oom-surge" and left.findings == ["oom: 4 OOM/min"]
    assert left.in_place == ["k8s.scale on sts/a: 3 -> 1"]
    assert left.undone == ["k8s.scale on sts/b"]
    assert left.undo_failed == ["k8s.scale on sts/c (its rollback failed: forbidden)"]
    assert left.in_doubt == ["k8s.scale on sts/d (the apply raised: timed out)"]
    assert left.targets == ["sts/a", "sts/c", "sts/d"]  # not the undone one, not the one never applied
    assert left_behind.lines(left)[-1] == "A person must look: check sts/a, sts/c, sts/d by hand"


def test_an_interrupted_change_in_doubt_is_maybe_changed_and_a_known_one_is_not():
    events = _events(
        ("r1", ev.ACTION_PLANNED, "a", change("sts/a")),
        ("r1", ev.RUN_INTERRUPTED, "a", {"verdict": "unknown", "reason": "cannot tell"}),
        ("r2", ev.ACTION_PLANNED, "b", change("sts/b")),
        ("r2", ev.RUN_INTERRUPTED, "b", {"verdict": "not_applied", "reason": "unchanged"}),
    )
    assert left_behind.from_events(events, "r1").in_doubt == [
        "k8s.scale on sts/a (interrupted while being applied: cannot tell)"]
    nothing = left_behind.from_events(events, "r2")
    assert nothing.in_doubt == [] and left_behind.lines(nothing)[0] == "It left nothing changed."


def test_a_missing_journal_is_unknown_and_a_damaged_one_never_reads_as_nothing_changed(tmp_path):
    missing = left_behind.read(tmp_path, "inc-1", "r1")
    assert missing.unreadable is not None and "cannot read the journal" in missing.unreadable
    assert left_behind.lines(missing) == [f"What it changed is unknown: {missing.unreadable}.",
                                          "A person must look: check the playbook's targets by hand."]
    folder = journals.incident_dir(tmp_path, "inc-2")
    folder.mkdir(parents=True)
    (folder / journals.JOURNAL_NAME).write_bytes(b"\xff not json\n")
    damaged = left_behind.lines(left_behind.read(tmp_path, "inc-2", "r1"))
    assert "It left nothing changed." not in damaged
    assert damaged[0].startswith("Its journal has 1 unreadable line(s), so a change may be missing above (")
