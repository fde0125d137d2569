"""The note back to PagerDuty (issue 16, item 6): one note per run, with the outcome, over real HTTPS.

A local HTTPS server on 127.0.0.1 stands in for api.pagerduty.com and checks each request as the
REST API v2 documents it; the webhook server runs on fakes and a fake clock, so backoff takes no time.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import pytest

from runbook.clock import FakeClock
from runbook.engine.runner import RunResult, StepOutcome
from runbook.errors import NotConfigured
from runbook.model import events as ev
from runbook.webhook import pagerduty_notes
from runbook.webhook.settings import PagerDutyNotes, Policy, RouteRule, WebhookConfig, load_secrets
from runbook.webhook.store import IncidentRow
from tests.conftest import reference_text
from tests.webhook.helpers import (OPERATOR_TOKEN, RESTORING, journal, pd_event, pd_headers, playbook, request, secrets,
                                   serve)
from tests.webhook.pagerduty_api import FROM, TOKEN, FakePagerDuty


def with_token(token: str | None = TOKEN):
    return dataclasses.replace(secrets(), pagerduty_api=token)


def config(pd: FakePagerDuty, *, policy: Policy = Policy(), routes=(), **notes) -> WebhookConfig:
    return WebhookConfig(workers=2, policy=policy, routes=list(routes), pagerduty_notes=pd.settings(**notes))


def deliver(srv, body: bytes, *, status: int = 202, **kwargs):
    reply = request(srv.url, "POST", "/webhooks/pagerduty", body, pd_headers(body, **kwargs))
    assert reply.status == status, reply.body
    srv.wait_idle()
    assert srv.service.notes.wait_idle(20), "the note was not posted in time"
    return reply


def pd_notes(state: Path, incident: str) -> list[ev.Event]:
    return [e for e in journal(state, incident) if e.type == ev.NOTE and "pagerduty" in e.data]


# -- the tests --------------------------------------------------------------------------------

def test_a_run_that_proposes_posts_one_note_with_the_outcome(state, pd):
    with serve(state, config=config(pd), secrets_=with_token()) as srv:
        incident = deliver(srv, pd_event()).body["alerts"][0]["incident"]
    assert pd.violations == []
    [note] = pd.posted("PGR0VU2")
    content = note["content"]
    assert "playbook test-oom ended PROPOSED" in content
    assert "- oom: " in content  # the finding
    assert "waiting for approval: scale-down (k8s.scale)" in content
    assert content.count(f"runbook approve {incident} scale-down") == 2  # in the reason and beside the action
    assert f"Incident journal: {incident}" in content and f"runbook rca {incident}" in content
    events = journal(state, incident)
    finished = [e.seq for e in events if e.type == ev.RUN_FINISHED]
    [posted] = pd_notes(state, incident)
    assert posted.seq > finished[-1]  # posted after the outcome was journaled
    run = [e.run for e in events if e.type == ev.RUN_FINISHED][-1]
    assert posted.data["pagerduty"] == {"incident": "PGR0VU2", "run": run, "state": "posted", "note": note["id"]}
    assert content.endswith(f"runbook run {run}")
    assert pd.resolved == []  # resolving is off by default


def test_a_duplicate_delivery_posts_nothing_more(state, pd):
    with serve(state, config=config(pd), secrets_=with_token()) as srv:
        body = pd_event()
        deliver(srv, body)
        again = deliver(srv, body, status=200)  # PagerDuty retried the same delivery
        assert again.body["duplicate"] is True
    assert len(pd.posted("PGR0VU2")) == 1
    assert [m for m, _ in pd.requests] == ["POST"]


def test_no_token_no_note_and_no_request(state, pd):
    with serve(state, config=config(pd), secrets_=with_token(None)) as srv:
        assert srv.service.notes is None
        reply = request(srv.url, "POST", "/webhooks/pagerduty", pd_event(), pd_headers(pd_event()))
        assert reply.status == 202
        srv.wait_idle()
        incident = reply.body["alerts"][0]["incident"]
        assert journal(state, incident)[-1].type == ev.RUN_FINISHED
    assert pd.requests == []


def test_429_then_201_retries_after_a_backoff_on_the_clock(state, pd):
    pd.script[("POST", "notes")] = [429]
    clock = FakeClock(dt.datetime(2026, 3, 14, 3, 12, 7, tzinfo=dt.timezone.utc))
    with serve(state, config=config(pd, backoff=3.0), secrets_=with_token(), clock=clock) as srv:
        incident = deliver(srv, pd_event()).body["alerts"][0]["incident"]
    assert pd.violations == []
    assert len(pd.posted("PGR0VU2")) == 1
    # the 429 said nothing was created: sent again at once after the wait, without looking first
    assert [m for m, _ in pd.requests] == ["POST", "POST"]
    assert 3.0 in clock.slept
    assert [e.data["pagerduty"]["state"] for e in pd_notes(state, incident)] == ["posted"]


def test_5xx_until_the_attempts_run_out_is_journaled_and_the_run_keeps_its_outcome(state, pd):
    pd.script[("POST", "notes")] = [503, 502, 500]
    with serve(state, config=config(pd, attempts=3, backoff=1.0), secrets_=with_token()) as srv:
        incident = deliver(srv, pd_event()).body["alerts"][0]["incident"]
        assert srv.service.store.incident(incident).state == "proposed"
    assert pd.posted("PGR0VU2") == [] and len(pd.requests) == 3
    [failed] = pd_notes(state, incident)
    assert failed.data["pagerduty"]["state"] == "failed" and "500" in failed.data["message"]


def test_an_unreachable_api_is_retried_then_journaled(state, pd):
    import socket

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now: every connect is refused
    clock = FakeClock(dt.datetime(2026, 3, 14, 3, 12, 7, tzinfo=dt.timezone.utc))
    settings = pd.settings(api_url=f"https://127.0.0.1:{port}", attempts=3, backoff=2.0)
    with serve(state, config=WebhookConfig(workers=2, pagerduty_notes=settings), secrets_=with_token(),
               clock=clock) as srv:
        incident = deliver(srv, pd_event()).body["alerts"][0]["incident"]
        assert srv.service.store.incident(incident).state == "proposed"  # the run is untouched
    [failed] = pd_notes(state, incident)
    assert failed.data["pagerduty"]["state"] == "failed" and "cannot reach PagerDuty" in failed.data["message"]
    assert [s for s in clock.slept if s in (2.0, 4.0)] == [2.0, 4.0]  # doubling waits between the three tries


@pytest.mark.parametrize("status", [401, 403, 404])  # the library raises on a 401 itself
def test_a_refusal_is_not_retried(state, pd, status):
    pd.script[("POST", "notes")] = [status]
    with serve(state, config=config(pd), secrets_=with_token()) as srv:
        incident = deliver(srv, pd_event()).body["alerts"][0]["incident"]
    assert len(pd.requests) == 1
    [failed] = pd_notes(state, incident)
    assert failed.data["pagerduty"]["state"] == "failed" and str(status) in failed.data["message"]
    assert TOKEN not in failed.data["message"]


def test_a_lost_answer_is_looked_for_before_sending_again(state, pd):
    pd.lose_answer.set()  # PagerDuty stores the note, the answer never arrives
    with serve(state, config=config(pd, timeout=1.0), secrets_=with_token()) as srv:
        deliver(srv, pd_event())
    assert [m for m, _ in pd.requests] == ["POST", "GET"]
    assert len(pd.posted("PGR0VU2")) == 1


def test_resolving_is_a_config_choice(state, pd):
    # the run applies its fix, then brings the replicas back: resolved
    policy = Policy(unattended={"test-oom": ["scale-down", "restore-capacity"]})
    with serve(state, config=config(pd, policy=policy, resolve=True), secrets_=with_token(),
               playbooks=[playbook(RESTORING)]) as srv:
        incident = deliver(srv, pd_event()).body["alerts"][0]["incident"]
    assert pd.violations == []
    [note] = pd.posted("PGR0VU2")
    assert "ended RESOLVED" in note["content"] and "applied: scale-down" in note["content"]
    assert "applied: restore-capacity (k8s.restore_scale): restored statefulset/vllm-server 1 → 3" in note["content"]
    assert pd.resolved == ["PGR0VU2"]
    assert [e.data["pagerduty"]["state"] for e in pd_notes(state, incident)] == ["posted", "resolved"]


def test_a_run_that_leaves_capacity_reduced_does_not_resolve_and_says_how_to_restore(state, pd):
    policy = Policy(unattended={"test-oom": ["scale-down"]})  # scaled down, never brought back
    with serve(state, config=config(pd, policy=policy, resolve=True), secrets_=with_token()) as srv:
        incident = deliver(srv, pd_event()).body["alerts"][0]["incident"]
    [note] = pd.posted("PGR0VU2")
    assert "ended MITIGATED" in note["content"]
    assert "llm/statefulset/vllm-server serves 1 of its 3 replicas" in note["content"]
    assert "kubectl -n llm scale statefulset/vllm-server --replicas=3" in note["content"]
    assert pd.resolved == []  # a person must finish it
    assert [e.data["pagerduty"]["state"] for e in pd_notes(state, incident)] == ["posted"]


def test_an_approved_change_gets_its_own_note_once(state, pd):
    with serve(state, config=config(pd, resolve=True), secrets_=with_token()) as srv:
        incident = deliver(srv, pd_event()).body["alerts"][0]["incident"]
        where = f"/proposals/{incident}/scale-down/approve"
        assert request(srv.url, "POST", where, b"", {"Authorization": f"Bearer {OPERATOR_TOKEN}"}).status == 202
        srv.wait_idle()
        assert srv.service.notes.wait_idle(20)
        srv.service.sweep()  # a sweep offers nothing already posted
        assert srv.service.notes.wait_idle(20)
    first, second = pd.posted("PGR0VU2")
    assert "ended PROPOSED" in first["content"]
    # The approved run applied it and left the workload scaled down: mitigated, so not resolved.
    assert "ended MITIGATED" in second["content"] and "applied: scale-down" in second["content"]
    assert pd.resolved == []
    assert [m for m, _ in pd.requests] == ["POST", "POST"]
    assert [e.data["pagerduty"]["state"] for e in pd_notes(state, incident)] == ["posted", "posted"]


def test_a_restart_does_not_post_twice(state, pd):
    with serve(state, config=config(pd), secrets_=with_token()) as srv:
        incident = deliver(srv, pd_event()).body["alerts"][0]["incident"]
        [owed] = [n for n in [srv.service.notes.note(incident, e.data["pagerduty"]["run"])
                              for e in pd_notes(state, incident)] if n]
        # As a crash right after the POST would leave it: sent, its answer not recorded.
        srv.service.notes._set(owed, state="sending")
    with serve(state, config=config(pd), secrets_=with_token()) as srv:
        assert srv.service.notes.wait_idle(20)
        assert srv.service.notes.note(incident, owed.run).state == "posted"
    with serve(state, config=config(pd), secrets_=with_token()) as srv:
        assert srv.service.notes.wait_idle(20)
    assert len(pd.posted("PGR0VU2")) == 1
    assert [m for m, _ in pd.requests] == ["POST", "GET"]


def test_a_note_owed_when_the_server_stopped_is_posted_at_the_next_start(state, pd):
    with serve(state, config=config(pd), secrets_=with_token()) as srv:
        incident = deliver(srv, pd_event()).body["alerts"][0]["incident"]
        run = pd_notes(state, incident)[0].data["pagerduty"]["run"]
        # As a crash before the POST would leave it: queued, never sent.
        srv.service.notes._set(srv.service.notes.note(incident, run), state="pending")
    pd.notes.clear()
    with serve(state, config=config(pd), secrets_=with_token()) as srv:
        assert srv.service.notes.wait_idle(20)
    assert len(pd.posted("PGR0VU2")) == 1
    assert [m for m, _ in pd.requests] == ["POST", "POST"]  # never sent: no need to look first


def test_the_note_is_owed_with_the_outcome_so_a_crash_before_posting_loses_nothing(state, pd):
    with serve(state, config=config(pd), secrets_=with_token()) as srv:
        srv.service.runs.after_run = lambda row, result: None  # the process dies right after the commit
        reply = request(srv.url, "POST", "/webhooks/pagerduty", pd_event(), pd_headers(pd_event()))
        srv.wait_idle()
        incident = reply.body["alerts"][0]["incident"]
        assert srv.service.store.incident(incident).state == "proposed"
        assert [(n.incident, n.state) for n in srv.service.notes.owed()] == [(incident, "pending")]
    assert pd.requests == []
    with serve(state, config=config(pd), secrets_=with_token()) as srv:
        assert srv.service.notes.wait_idle(20)
        assert srv.service.notes.owed() == []
    assert len(pd.posted("PGR0VU2")) == 1 and [m for m, _ in pd.requests] == ["POST"]


def test_settled_notes_are_forgotten_after_the_retention_and_open_ones_kept(state, pd):
    clock = FakeClock(dt.datetime(2026, 3, 14, 3, 12, 7, tzinfo=dt.timezone.utc))
    with serve(state, config=config(pd), secrets_=with_token(), clock=clock) as srv:
        incident = deliver(srv, pd_event()).body["alerts"][0]["incident"]
        run = pd_notes(state, incident)[0].data["pagerduty"]["run"]
        notes = srv.service.notes
        clock.advance(srv.service.config.dedupe_retention - 60)
        notes.sweep()
        assert notes.note(incident, run).state == "posted"  # not old enough yet
        clock.advance(120)
        notes.sweep()
        assert notes.note(incident, run) is None
    assert len(pd.posted("PGR0VU2")) == 1


def test_the_reference_incident_object_routes_by_service_and_gets_its_note(state, pd):
    data = json.loads(reference_text("pagerduty/pagerduty-v3-event-data-incident-object-devdocs.json"))
    body = json.dumps({"event": {"id": "01DEN1HNLBC1VITK192ETHS2CW", "event_type": "incident.triggered",
                                 "resource_type": "incident", "occurred_at": "2026-03-14T03:12:07.000Z",
                                 "agent": None, "client": None, "data": data}}).encode()
    rule = RouteRule(playbook="test-oom", source="pagerduty", service=data["service"]["id"])
    with serve(state, config=config(pd, routes=[rule]), secrets_=with_token()) as srv:
        deliver(srv, body)
    assert pd.violations == []
    assert len(pd.posted(data["id"])) == 1


def test_an_alertmanager_run_posts_no_note(state, pd):
    from tests.webhook.helpers import am_group, am_headers

    with serve(state, config=config(pd), secrets_=with_token()) as srv:
        assert request(srv.url, "POST", "/webhooks/alertmanager", am_group(), am_headers()).status == 202
        srv.wait_idle()
        assert srv.service.notes.wait_idle(10)
    assert pd.requests == []


def test_a_token_without_a_from_email_is_refused_with_the_fix(state, pd):
    with pytest.raises(NotConfigured, match=r"webhook\.pagerduty_notes\.from_email"):
        with serve(state, config=WebhookConfig(pagerduty_notes=PagerDutyNotes()), secrets_=with_token()):
            pass


def test_the_token_comes_from_the_environment_and_never_shows():
    found = load_secrets({"RUNBOOK_PAGERDUTY_API_TOKEN": TOKEN})
    assert found.pagerduty_api == TOKEN and TOKEN not in repr(found)
    assert load_secrets({}).pagerduty_api is None


def test_a_plain_http_api_url_is_refused():
    with pytest.raises(ValueError, match="api_url"):
        PagerDutyNotes(from_email=FROM, api_url="http://api.pagerduty.com")


def _row(source: str = "pagerduty", fingerprint: str = "PGR0VU2") -> IncidentRow:
    return IncidentRow(id="20260314-031207-test-oom", source=source, source_key=f"pd|{fingerprint}", playbook="test-oom",
                       params={}, alert={"fingerprint": fingerprint}, state="done", job="first", owner=None,
                       outcome="resolved", opened=0.0, updated=0.0, closed=None)


def test_the_note_is_bounded_redacted_and_keeps_its_marker(tmp_path):
    steps = tuple(StepOutcome(f"q{n}", "prom.query", "diagnostic", "ok", f"finding {n} " + "x" * 200, {})
                  for n in range(40))
    steps += (StepOutcome("env", "shell.run", "diagnostic", "ok", "token=ghp_abcdefghijklmnopqrstuvwxyz0123456789", {}),)
    result = RunResult("20260314-031207-test-oom", "r-1", "test-oom", "resolved", "verified", steps, ())
    text = pagerduty_notes.compose(_row(), result, tmp_path, max_chars=1000)
    assert len(text) <= 1000
    assert text.endswith("runbook run r-1") and "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in text
    full = pagerduty_notes.compose(_row(), result, tmp_path, max_chars=25000)
    assert "and 29 more findings" in full and "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in full


@pytest.mark.parametrize("row", [_row(source="alertmanager"), _row(fingerprint="../../users")], ids=["alertmanager", "bad-id"])
def test_only_a_checked_pagerduty_incident_id_reaches_the_url(row):
    assert pagerduty_notes.pd_incident_of(row) is None

