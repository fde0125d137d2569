"""Issue 13, finding 7a: PagerDuty deliveries are deduplicated on the signed event id, not only on
the unsigned X-Webhook-Id header, so a new event that reuses an old header value is still accepted.
"""

from __future__ import annotations

import json

from runbook.webhook import pagerduty
from tests.webhook.helpers import pd_headers, request, serve


def event(event_id: str, incident: str, event_type: str = "incident.triggered") -> bytes:
    """A PagerDuty V3 webhook event, written from the published format."""
    return json.dumps({"event": {
        "id": event_id, "event_type": event_type, "resource_type": "incident",
        "occurred_at": "2026-03-14T03:12:07.000Z", "agent": None, "client": None,
        "data": {"id": incident, "type": "incident", "title": "OOM on vllm-server", "number": 11,
                 "status": event_type.split(".")[1], "urgency": "high",
                 "service": {"id": "PSVC001", "summary": "vllm-serving", "type": "service_reference"}}}}).encode()


def test_f7_two_different_signed_events_with_one_webhook_id_are_both_accepted(tmp_path):
    first, second = event("01EVENTFIRST00000000000001", "PINC0001"), event("01EVENTSECOND0000000000002", "PINC0002")
    with serve(tmp_path / "state") as srv:
        one = request(srv.url, "POST", "/webhooks/pagerduty", first, pd_headers(first, webhook_id="wh-reused"))
        two = request(srv.url, "POST", "/webhooks/pagerduty", second, pd_headers(second, webhook_id="wh-reused"))
        assert one.status == 202 and two.status == 202, (one.body, two.body)
        assert not two.body.get("duplicate") and two.body["alerts"][0]["verdict"] != "duplicate"
        assert one.body["alerts"][0]["incident"] != two.body["alerts"][0]["incident"]


def test_f7_the_same_event_resent_with_its_webhook_id_is_a_duplicate(tmp_path):
    body = event("01EVENTRESENT0000000000003", "PINC0003")
    with serve(tmp_path / "state") as srv:
        first = request(srv.url, "POST", "/webhooks/pagerduty", body, pd_headers(body, webhook_id="wh-retry"))
        again = request(srv.url, "POST", "/webhooks/pagerduty", body, pd_headers(body, webhook_id="wh-retry"))
        assert first.status == 202 and again.status == 200 and again.body["duplicate"] is True, again.body


def test_f7_an_ignored_event_type_is_deduplicated_on_its_event_id_too(tmp_path):
    annotated = event("01EVENTIGNORED000000000004", "PINC0004", "incident.annotated")
    other = event("01EVENTIGNORED000000000005", "PINC0004", "incident.annotated")
    with serve(tmp_path / "state") as srv:
        assert "ignored" in request(srv.url, "POST", "/webhooks/pagerduty", annotated,
                                    pd_headers(annotated, webhook_id="wh-note")).body
        assert request(srv.url, "POST", "/webhooks/pagerduty", annotated,
                       pd_headers(annotated, webhook_id="wh-note")).body.get("duplicate") is True
        assert "ignored" in request(srv.url, "POST", "/webhooks/pagerduty", other,
                                    pd_headers(other, webhook_id="wh-note")).body


def test_f7_the_delivery_key_names_the_header_and_the_signed_event():
    delivery = pagerduty.parse(event("01EVENTKEY0000000000000006", "PINC0006"), webhook_id="wh-key")
    assert delivery.delivery_key == "wh-key|01EVENTKEY0000000000000006"
    assert pagerduty.parse(event("01EVENTKEY0000000000000006", "PINC0006"), webhook_id=None).delivery_key is None
