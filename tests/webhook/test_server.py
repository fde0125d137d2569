"""The running server over real HTTP on loopback: signatures, dedupe, runs, limits, proposals.

The world is `runbook.sim.fakes` fakes on a fake clock, so verification windows take no time; the
only waits are bounded ones for a run to finish.
"""

from __future__ import annotations

import json

import pytest

from runbook.clock import FakeClock
from runbook.record.journal import list_incidents
from runbook.model import events as ev
from runbook.webhook.settings import Policy, WebhookConfig
from tests.engine.helpers import cluster as fake_cluster
from tests.webhook.helpers import (AM_TOKEN, OPERATOR_TOKEN, PD_NEXT_SECRET, PD_SECRET, am_group, am_headers,
                                   journal, oom_world, pd_event, pd_headers, request, secrets, serve)

OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}


def runs_started(state) -> int:
    return sum(1 for s in list_incidents(state) for e in journal(state, s.id)
               if e.type == ev.RUN_STARTED and not e.data.get("dry_run"))


def post_pd(srv, body, **kwargs):
    return request(srv.url, "POST", "/webhooks/pagerduty", body, pd_headers(body, **kwargs))


def post_am(srv, body, token=AM_TOKEN):
    return request(srv.url, "POST", "/webhooks/alertmanager", body, am_headers(token))


@pytest.fixture
def state(tmp_path):
    return tmp_path / "state"


def test_signed_delivery_is_acked_journaled_and_run(state):
    with serve(state) as srv:
        reply = post_pd(srv, pd_event())
        assert reply.status == 202, reply.body
        incident = reply.body["alerts"][0]["incident"]
        received = journal(state, incident)
        assert received[0].type == ev.ALERT_RECEIVED  # on disk before the 2xx
        assert received[0].data["delivery"]["webhook_id"] == "wh-1"
        srv.wait_idle()
        events = journal(state, incident)
        types = [e.type for e in events]
        assert types[:2] == [ev.ALERT_RECEIVED, ev.RUN_STARTED] and "action.proposed" in types
        assert ev.ACTION_APPLIED not in types  # the default policy proposes
        assert events[-1].type == ev.RUN_FINISHED and events[-1].data["outcome"] == "proposed"


@pytest.mark.parametrize("headers", [
    {},  # missing
    {"X-PagerDuty-Signature": "v1=" + "0" * 64},  # bad
    {"X-PagerDuty-Signature": "garbage"},  # malformed
], ids=["missing", "bad", "malformed"])
def test_unsigned_or_badly_signed_is_401_and_nothing_is_journaled(state, headers):
    with serve(state) as srv:
        body = pd_event()
        reply = request(srv.url, "POST", "/webhooks/pagerduty", body, {"Content-Type": "application/json", **headers})
        assert reply.status == 401 and "signature" in reply.body["error"]
        assert list_incidents(state) == []


def test_rotation_two_signatures_accepted_and_a_retired_secret_refused(state):
    rotated = secrets().__class__(pagerduty=(PD_NEXT_SECRET,), alertmanager=(AM_TOKEN,))
    with serve(state, secrets_=rotated) as srv:
        body = pd_event()
        # During a rotation PagerDuty signs with the old and the new secret.
        assert post_pd(srv, body, secrets_=(PD_SECRET, PD_NEXT_SECRET)).status == 202
        stale = pd_event(incident="PSTALE1", event_id="ev-stale")
        assert post_pd(srv, stale, secrets_=(PD_SECRET,), webhook_id="wh-2").status == 401
        assert len(list_incidents(state)) == 1


def test_a_delivery_retried_five_times_runs_once(state):
    with serve(state) as srv:
        body = pd_event()
        answers = [post_pd(srv, body).status for _ in range(5)]
        # A second subscription (secret rotation) redelivers the same event under a new webhook id.
        answers.append(post_pd(srv, body, webhook_id="wh-other-subscription").status)
        srv.wait_idle()
        assert answers == [202, 200, 200, 200, 200, 200]
        assert runs_started(state) == 1
        metrics = request(srv.url, "GET", "/metrics").body
        assert 'runbook_webhook_deliveries_total{source="pagerduty",verdict="duplicate"} 5.0' in metrics


def test_alertmanager_firing_then_resolved_runs_once_then_closes(state):
    with serve(state) as srv:
        firing = post_am(srv, am_group("firing"))
        assert firing.status == 202, firing.body
        incident = firing.body["alerts"][0]["incident"]
        srv.wait_idle()
        assert post_am(srv, am_group("firing")).status == 200  # repeat_interval re-send
        resolved = post_am(srv, am_group("resolved"))
        assert resolved.status == 202 and resolved.body["alerts"][0] == {"verdict": "closed", "incident": incident}
        srv.wait_idle()
        types = [e.type for e in journal(state, incident)]
        assert types.count(ev.RUN_STARTED) == 1 and types[-2:] == ["proposal.closed", "incident.closed"]
        assert srv.service.store.incident(incident).state == "closed"
        proposals = request(srv.url, "GET", "/proposals", headers=OPERATOR).body["proposals"]
        assert [p["state"] for p in proposals] == ["closed"]
        approve = request(srv.url, "POST", f"/proposals/{incident}/scale-down/approve", b"", OPERATOR)
        assert approve.status == 409 and "closed" in approve.body["error"]


def test_alertmanager_credentials_are_required(state):
    with serve(state) as srv:
        assert post_am(srv, am_group(), token="wrong-token-0123456789").status == 401
        reply = request(srv.url, "POST", "/webhooks/alertmanager", am_group(), {"Content-Type": "application/json"})
        assert reply.status == 401 and reply.headers["www-authenticate"].startswith("Bearer")
        assert list_incidents(state) == []


def test_limits_and_clear_4xx_bodies(state):
    config = WebhookConfig(workers=1, max_body_bytes=64 * 1024)
    with serve(state, config=config) as srv:
        big = b'{"pad": "' + b"x" * (10 << 20) + b'"}'
        too_big = _post_raw(srv.port, "/webhooks/pagerduty", big, {"Content-Type": "application/json"})
        assert too_big.startswith(b"HTTP/1.1 413") and b"limit" in too_big
        chunked = _post_chunked(srv.port, "/webhooks/alertmanager", [b"{" + b" " * 40000] * 3, am_headers())
        assert chunked.startswith(b"HTTP/1.1 413")
        wrong_type = request(srv.url, "POST", "/webhooks/alertmanager", am_group(),
                             {**am_headers(), "Content-Type": "text/plain"})
        assert wrong_type.status == 415 and "application/json" in wrong_type.body["error"]
        not_json = request(srv.url, "POST", "/webhooks/alertmanager", b"{nope", am_headers())
        assert not_json.status == 400 and "not JSON" in not_json.body["error"]
        assert request(srv.url, "GET", "/healthz").body == {"status": "ok"}
        assert list_incidents(state) == []


def _post_raw(port: int, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    import socket

    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode())
        try:
            sock.sendall(body)  # the server may answer and close before reading it all
        except (BrokenPipeError, ConnectionResetError):
            pass
        return _read_answer(sock)


def _post_chunked(port: int, path: str, chunks: list[bytes], headers: dict[str, str]) -> bytes:
    import socket

    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode())
        try:
            for chunk in chunks:
                sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        return _read_answer(sock)


def _read_answer(sock) -> bytes:
    """The status line, headers and a Content-Length body, whatever the server did with the rest."""
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            more = sock.recv(65536)
            if not more:
                return data
            data += more
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            more = sock.recv(65536)
            if not more:
                break
            body += more
        return head + b"\r\n\r\n" + body
    except (ConnectionResetError, TimeoutError):
        return data


def test_hostile_labels_are_journaled_but_never_run(state):
    c = fake_cluster()
    with serve(state, world=oom_world(c)) as srv:
        for n, value in enumerate(["a;rm -rf /", "$(id)", "app=x,app!=y", "ｌｌｍ", "llm\u202e"]):
            reply = post_am(srv, am_group(namespace=value, fingerprint=f"{n:016x}"))
            assert reply.status == 202 and reply.body["alerts"][0]["verdict"] == "refused"
        srv.wait_idle()
        assert c.mutations == [] and runs_started(state) == 0
        notes = [e.data["message"] for s in list_incidents(state) for e in journal(state, s.id) if e.type == ev.NOTE]
        assert len(notes) == 5 and all("not a safe value" in n for n in notes)
        assert request(srv.url, "GET", "/healthz").status == 200


def test_approval_re_checks_and_applies_in_the_operators_name(state):
    c = fake_cluster()
    with serve(state, world=oom_world(c)) as srv:
        incident = post_pd(srv, pd_event()).body["alerts"][0]["incident"]
        srv.wait_idle()
        where = f"/proposals/{incident}/scale-down"
        assert request(srv.url, "POST", where + "/approve", b"", {"Authorization": "Bearer nope"}).status == 401
        assert request(srv.url, "POST", f"/proposals/{incident}/observe/approve", b"", OPERATOR).status == 404
        assert c.mutations == []
        approved = request(srv.url, "POST", where + "/approve", b"", OPERATOR)
        assert approved.status == 202 and approved.body["by"] == "alice"
        srv.wait_idle()
        assert request(srv.url, "POST", where + "/approve", b"", OPERATOR).status == 409  # once
        shown = request(srv.url, "GET", where, headers=OPERATOR).body
        assert shown["state"] == "applied" and shown["by"] == "alice"
        assert c.mutations == [("scale", "statefulset/vllm-server", 3, 1)]
        events = journal(state, incident)
        applied = [e for e in events if e.type == ev.ACTION_APPLIED]
        assert len(applied) == 1 and applied[0].data["by"] == "alice"
        approval_run = applied[0].run
        passed = [e for e in events if e.run == approval_run and e.type == ev.GUARD_PASSED]
        assert passed and any(g["guard"] == "recheck" for g in passed[0].data["guards"])
        # scaled down and left there by this playbook: mitigated, capacity reduced (issue 34)
        assert events[-1].type == ev.RUN_FINISHED and events[-1].data["outcome"] == "mitigated"


def test_proposals_expire(state):
    clock = FakeClock()
    config = WebhookConfig(workers=1, policy=Policy(proposal_ttl=600))
    with serve(state, clock=clock, config=config) as srv:
        incident = post_pd(srv, pd_event()).body["alerts"][0]["incident"]
        srv.wait_idle()
        clock.advance(601)
        reply = request(srv.url, "POST", f"/proposals/{incident}/scale-down/approve", b"", OPERATOR)
        assert reply.status == 409 and "expired" in reply.body["error"]
        assert srv.service.proposal(incident, "scale-down")["state"] == "expired"
        assert "proposal.expired" in [e.type for e in journal(state, incident)]


def test_the_sweeper_expires_unapproved_proposals(state):
    clock = FakeClock()
    with serve(state, clock=clock, config=WebhookConfig(workers=1, policy=Policy(proposal_ttl=60))) as srv:
        incident = post_pd(srv, pd_event()).body["alerts"][0]["incident"]
        srv.wait_idle()
        srv.service.sweep()
        assert srv.service.proposal(incident, "scale-down")["state"] == "pending"
        clock.advance(61)
        srv.service.sweep()
        assert srv.service.proposal(incident, "scale-down")["state"] == "expired"
        assert srv.service.store.incident(incident).outcome == "expired"


def test_unattended_policy_applies_without_a_human(state):
    c = fake_cluster()
    config = WebhookConfig(workers=1, policy=Policy(unattended={"test-oom": ["scale-down"]}))
    with serve(state, world=oom_world(c), config=config) as srv:
        incident = post_am(srv, am_group()).body["alerts"][0]["incident"]
        srv.wait_idle()
        applied = [e for e in journal(state, incident) if e.type == ev.ACTION_APPLIED]
        assert [a.data["by"] for a in applied] == ["webhook policy (unattended)"]
        assert c.mutations == [("scale", "statefulset/vllm-server", 3, 1)]
        assert srv.service.store.incident(incident).outcome == "mitigated"  # scaled down, not brought back


def test_kill_switch_stops_every_change_and_approval(state):
    c = fake_cluster()
    config = WebhookConfig(workers=1, policy=Policy(unattended={"test-oom": ["scale-down"]}))
    with serve(state, world=oom_world(c), config=config, env={"RUNBOOK_KILL_SWITCH": "1"}) as srv:
        incident = post_am(srv, am_group()).body["alerts"][0]["incident"]
        srv.wait_idle()
        refused = [e.data["guard"] for e in journal(state, incident) if e.type == ev.GUARD_REFUSED]
        assert refused == ["kill_switch"] and c.mutations == []
        reply = request(srv.url, "POST", f"/proposals/{incident}/scale-down/approve", b"", OPERATOR)
        assert reply.status == 409 and "kill switch" in reply.body["error"]


def test_readiness_names_what_is_missing(state):
    from runbook.backends.base import World

    with serve(state) as srv:
        assert request(srv.url, "GET", "/readyz").body == {"status": "ready"}
    with serve(state, world=World()) as srv:
        reply = request(srv.url, "GET", "/readyz")
        assert reply.status == 503 and any("metrics" in p for p in reply.body["problems"])


def test_dedupe_survives_a_restart(state):
    body = pd_event()
    with serve(state) as srv:
        assert post_pd(srv, body).status == 202
        srv.wait_idle()
    with serve(state) as srv:
        assert post_pd(srv, body).status == 200
        srv.wait_idle()
    assert runs_started(state) == 1


def test_dedupe_keys_are_kept_48_hours_and_then_forgotten(state):
    clock = FakeClock()
    config = WebhookConfig(workers=1, dedupe_retention="48h")
    with serve(state, clock=clock, config=config) as srv:
        body = pd_event()
        assert post_pd(srv, body).status == 202
        srv.wait_idle()
        clock.advance(47 * 3600)
        srv.service.sweep()
        assert post_pd(srv, body).status == 200
        clock.advance(2 * 3600)
        srv.service.sweep()
        assert srv.service.store.seen_count() == 0
    with pytest.raises(ValueError):
        WebhookConfig(dedupe_retention="47h")


def test_a_full_queue_answers_503_and_loses_nothing(state):
    config = WebhookConfig(workers=1, queue_size=1)
    with serve(state, config=config) as srv:
        srv.service.worker.stop(5)  # nobody takes work off the queue
        first = post_am(srv, am_group(fingerprint="0000000000000001"))
        second = post_am(srv, am_group(fingerprint="0000000000000002"))
        assert first.status == 202
        assert second.status == 503 and second.headers["retry-after"] == "30"
        assert len(list_incidents(state)) == 1
        assert "busy" in request(srv.url, "GET", "/metrics").body


def test_other_pagerduty_events_are_ignored_politely(state):
    with serve(state) as srv:
        doc = json.loads(pd_event())
        doc["event"]["event_type"] = "service.updated"
        body = json.dumps(doc).encode()
        reply = post_pd(srv, body)
        assert reply.status == 200 and "not handled" in reply.body["ignored"]
        assert list_incidents(state) == []


def test_an_acknowledgement_is_journaled_without_a_second_run(state):
    with serve(state) as srv:
        incident = post_pd(srv, pd_event()).body["alerts"][0]["incident"]
        srv.wait_idle()
        ack = post_pd(srv, pd_event("incident.acknowledged", event_id="ev-ack"), webhook_id="wh-ack")
        assert ack.status == 202 and ack.body["alerts"][0] == {"verdict": "recorded", "incident": incident}
        srv.wait_idle()
        assert runs_started(state) == 1
        statuses = [e.data["status"] for e in journal(state, incident) if e.type == ev.ALERT_RECEIVED]
        assert statuses == ["triggered", "acknowledged"]
