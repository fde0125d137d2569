"""Issue 13, finding 2: a validly signed or authenticated body that can never be accepted answers 400.

JSON nested thousands deep and strings that are not Unicode (a lone surrogate) are refused with a
reason before anything is stored; every answer, whatever its status, is counted in /metrics.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from runbook.webhook import pagerduty
from runbook.webhook.settings import Secrets
from tests.webhook.helpers import AM_TOKEN, PD_SECRET, am_headers, pd_headers, request, serve


def pd_body(*, title: str = "OOM on vllm-server", event_id: str = "01POISONEVENT0000000000001",
            extra: str = "") -> bytes:
    """A PagerDuty V3 incident.triggered event, written by hand so `extra` can splice raw JSON in."""
    doc = {"event": {"id": event_id, "event_type": "incident.triggered", "resource_type": "incident",
                     "occurred_at": "2026-03-14T03:12:07.000Z", "agent": None, "client": None,
                     "data": {"id": "PPOISON1", "type": "incident", "title": title, "number": 7,
                              "status": "triggered", "urgency": "high",
                              "service": {"id": "PSVC001", "summary": "vllm-serving", "type": "service_reference"}}}}
    text = json.dumps(doc)
    if extra:
        text = text[:-3] + f', "extra": {extra}' + text[-3:]  # inside event.data
    return text.encode()


def am_body(labels: dict[str, str]) -> bytes:
    """An Alertmanager webhook v4 group of one firing alert."""
    alert = {"status": "firing", "labels": {"alertname": "VllmOomSurge", "namespace": "llm", **labels},
             "annotations": {"summary": "OOM"}, "startsAt": "2026-03-14T03:12:07.042Z",
             "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "http://prometheus:9090/graph",
             "fingerprint": "5e3b0a1c2d4f6789"}
    doc = {"receiver": "runbook", "status": "firing", "alerts": [alert], "groupLabels": {},
           "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://alertmanager:9093",
           "version": "4", "groupKey": "{}:{alertname=\"VllmOomSurge\"}", "truncatedAlerts": 0}
    return json.dumps(doc).encode()  # json.dumps escapes a lone surrogate as \ud800, as a hostile sender would


def counted(url: str, source: str, status: int) -> float:
    text = request(url, "GET", "/metrics").body
    found = re.search(rf'^runbook_webhook_responses_total\{{source="{source}",status="{status}"\}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def nothing_stored(state: Path, service) -> None:
    journals = [p for p in (state / "incidents").rglob("*") if p.is_file()] if (state / "incidents").exists() else []
    assert journals == []
    assert service.store.incidents() == [] and service.store.seen_count() == 0 and service.store.owed_count() == 0


def test_f2_a_signed_pagerduty_body_nested_5000_deep_is_400_and_counted(tmp_path):
    state = tmp_path / "state"
    body = pd_body(extra="[" * 5000 + "]" * 5000)
    with serve(state) as srv:
        reply = request(srv.url, "POST", "/webhooks/pagerduty", body, pd_headers(body, webhook_id="wh-deep"))
        assert reply.status == 400, reply.body
        assert "nested" in reply.body["error"] and "64" in reply.body["error"]
        assert counted(srv.url, "pagerduty", 400) == 1.0
        assert 'runbook_webhook_deliveries_total{source="pagerduty",verdict="malformed"} 1.0' in \
            request(srv.url, "GET", "/metrics").body
        nothing_stored(state, srv.service)


def test_f2_deep_nesting_inside_strings_is_only_text(tmp_path):
    state = tmp_path / "state"
    body = pd_body(title="OOM " + "[{" * 2000)  # brackets in a string are not nesting
    with serve(state) as srv:
        reply = request(srv.url, "POST", "/webhooks/pagerduty", body, pd_headers(body, webhook_id="wh-text"))
        assert reply.status == 202, reply.body


def test_f2_a_lone_surrogate_in_an_alertmanager_label_is_400_naming_the_field(tmp_path):
    state = tmp_path / "state"
    body = am_body({"pod": "vllm-\ud800-0"})
    assert b"\\ud800" in body
    with serve(state) as srv:
        reply = request(srv.url, "POST", "/webhooks/alertmanager", body, am_headers())
        assert reply.status == 400, reply.body
        assert "alerts[0].labels.pod" in reply.body["error"] and "surrogate" in reply.body["error"]
        assert counted(srv.url, "alertmanager", 400) == 1.0
        nothing_stored(state, srv.service)


def test_f2_a_lone_surrogate_in_a_label_name_is_400_too(tmp_path):
    state = tmp_path / "state"
    body = am_body({"p\udfffod": "vllm-0"})
    with serve(state) as srv:
        reply = request(srv.url, "POST", "/webhooks/alertmanager", body, am_headers())
        assert reply.status == 400 and "alerts[0].labels" in reply.body["error"], reply.body
        nothing_stored(state, srv.service)


def test_f2_a_lone_surrogate_in_a_pagerduty_title_is_400_naming_the_field(tmp_path):
    state = tmp_path / "state"
    body = pd_body(title="OOM on \ud800 vllm-server")
    with serve(state) as srv:
        reply = request(srv.url, "POST", "/webhooks/pagerduty", body, pd_headers(body, webhook_id="wh-sur"))
        assert reply.status == 400, reply.body
        assert "event.data.title" in reply.body["error"] and "surrogate" in reply.body["error"]
        assert counted(srv.url, "pagerduty", 400) == 1.0
        nothing_stored(state, srv.service)


def test_f2_a_surrogate_pair_is_a_real_character_and_accepted(tmp_path):
    state = tmp_path / "state"
    body = pd_body(title="OOM on vllm-server \U0001F525")  # json.dumps writes the pair \ud83d\udd25
    assert b"\\ud83d\\udd25" in body
    with serve(state) as srv:
        reply = request(srv.url, "POST", "/webhooks/pagerduty", body, pd_headers(body, webhook_id="wh-pair"))
        assert reply.status == 202, reply.body


def test_f2_nan_and_infinity_are_not_json(tmp_path):
    state = tmp_path / "state"
    body = pd_body(extra="NaN")
    with serve(state) as srv:
        reply = request(srv.url, "POST", "/webhooks/pagerduty", body, pd_headers(body, webhook_id="wh-nan"))
        assert reply.status == 400 and "NaN" in reply.body["error"], reply.body
        nothing_stored(state, srv.service)


def test_f2_an_unexpected_failure_is_a_json_500_and_counted(tmp_path):
    state = tmp_path / "state"
    body = pd_body()

    def broken(delivery):
        raise RuntimeError("a bug in the ack path")

    with serve(state) as srv:
        srv.service.accept = broken  # the route calls whatever the service's accept is
        reply = request(srv.url, "POST", "/webhooks/pagerduty", body, pd_headers(body, webhook_id="wh-bug"))
        assert reply.status == 500 and reply.headers["content-type"] == "application/json", reply.body
        assert reply.body["status"] == 500 and "a bug in the ack path" not in reply.body["error"]
        assert counted(srv.url, "pagerduty", 500) == 1.0
        assert 'runbook_webhook_deliveries_total{source="pagerduty",verdict="error"} 1.0' in \
            request(srv.url, "GET", "/metrics").body


def test_f2_every_answer_is_counted_by_source_and_status(tmp_path):
    state = tmp_path / "state"
    good = pd_body(event_id="01COUNTED00000000000000001")
    with serve(state) as srv:
        url = srv.url
        assert request(url, "POST", "/webhooks/pagerduty", good, pd_headers(good, webhook_id="wh-c1")).status == 202
        assert request(url, "POST", "/webhooks/pagerduty", good, pd_headers(good, webhook_id="wh-c1")).status == 200
        bad_signature = {**pd_headers(good), pagerduty.SIGNATURE_HEADER: "v1=" + "0" * 64}
        assert request(url, "POST", "/webhooks/pagerduty", good, bad_signature).status == 401
        assert request(url, "POST", "/webhooks/pagerduty", good,
                       {**pd_headers(good), "Content-Type": "text/plain"}).status == 415
        huge = b"{" + b" " * (srv.service.config.max_body_bytes + 1) + b"}"
        assert request(url, "POST", "/webhooks/pagerduty", huge, pd_headers(huge)).status == 413
        assert request(url, "POST", "/webhooks/alertmanager", am_body({}), am_headers("wrong")).status == 401
        for source, status, n in (("pagerduty", 202, 1), ("pagerduty", 200, 1), ("pagerduty", 401, 1),
                                  ("pagerduty", 415, 1), ("pagerduty", 413, 1), ("alertmanager", 401, 1)):
            assert counted(url, source, status) == n, (source, status)
    with serve(tmp_path / "other", secrets_=Secrets(pagerduty=(PD_SECRET,), alertmanager=(), operators=())) as srv:
        assert request(srv.url, "POST", "/webhooks/alertmanager", am_body({}), am_headers(AM_TOKEN)).status == 404
        assert counted(srv.url, "alertmanager", 404) == 1.0
