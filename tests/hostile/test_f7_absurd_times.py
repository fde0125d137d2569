"""Issue 13, finding 7b: an absurd alert time (year 1, years ahead) is refused with 400 naming the
field and the accepted range; Alertmanager's `endsAt: 0001-01-01T00:00:00Z` ("unset") still works.
"""

from __future__ import annotations

import json
import re

import pytest

from runbook.clock import FakeClock, utc
from runbook.webhook import alertmanager, pagerduty
from runbook.errors import Malformed
from tests.webhook.helpers import am_headers, pd_headers, request, serve

NOW = utc(2026, 3, 14, 3, 20, 0)
INCIDENT_ID = re.compile(r"^\d{8}-\d{6}-")
GO_ZERO = "0001-01-01T00:00:00Z"  # what Alertmanager writes for a time that is not set


def am_group(starts_at: str, *, status: str = "firing", ends_at: str = GO_ZERO,
             fingerprint: str = "7a1b2c3d4e5f6a7b") -> bytes:
    """An Alertmanager webhook v4 group of one alert, written from the published format."""
    alert = {"status": status, "labels": {"alertname": "VllmOomSurge", "namespace": "llm", "pod": "vllm-0"},
             "annotations": {"summary": "OOM"}, "startsAt": starts_at, "endsAt": ends_at,
             "generatorURL": "http://prometheus:9090/graph", "fingerprint": fingerprint}
    return json.dumps({"receiver": "runbook", "status": status, "alerts": [alert], "groupLabels": {},
                       "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://alertmanager:9093",
                       "version": "4", "groupKey": "{}:{alertname=\"VllmOomSurge\"}", "truncatedAlerts": 0}).encode()


def pd_event(occurred_at: str) -> bytes:
    return json.dumps({"event": {
        "id": "01EVENTTIME000000000000001", "event_type": "incident.triggered", "resource_type": "incident",
        "occurred_at": occurred_at, "agent": None, "client": None,
        "data": {"id": "PTIME001", "type": "incident", "title": "OOM on vllm-server", "number": 3,
                 "status": "triggered", "urgency": "high",
                 "service": {"id": "PSVC001", "summary": "vllm-serving", "type": "service_reference"}}}}).encode()


def test_f7_alertmanager_starts_at_in_year_1_is_400_naming_the_field_and_range(tmp_path):
    body = am_group(GO_ZERO)
    with serve(tmp_path / "state", clock=FakeClock(NOW)) as srv:
        reply = request(srv.url, "POST", "/webhooks/alertmanager", body, am_headers())
        assert reply.status == 400, reply.body
        assert "alerts[0].startsAt" in reply.body["error"] and "2000-01-01" in reply.body["error"]
        assert srv.service.store.incidents() == []


def test_f7_pagerduty_occurred_at_in_year_1_is_400(tmp_path):
    body = pd_event("0001-01-01T00:00:00.000Z")
    with serve(tmp_path / "state", clock=FakeClock(NOW)) as srv:
        reply = request(srv.url, "POST", "/webhooks/pagerduty", body, pd_headers(body, webhook_id="wh-t1"))
        assert reply.status == 400 and "event.occurred_at" in reply.body["error"], reply.body


def test_f7_a_time_years_ahead_of_the_service_clock_is_400(tmp_path):
    body = am_group("2031-03-14T03:12:07Z")
    with serve(tmp_path / "state", clock=FakeClock(NOW)) as srv:
        reply = request(srv.url, "POST", "/webhooks/alertmanager", body, am_headers())
        assert reply.status == 400 and "alerts[0].startsAt" in reply.body["error"], reply.body
        assert "2027-03-15" in reply.body["error"]  # the latest accepted: a year and a day past the clock


def test_f7_a_firing_alert_with_the_unset_ends_at_is_accepted_with_an_8_digit_date(tmp_path):
    with serve(tmp_path / "state", clock=FakeClock(NOW)) as srv:
        for starts, fingerprint in (("2026-03-14T03:12:07.042Z", "1111111111111111"),
                                    ("2000-01-01T00:00:00Z", "2222222222222222"),
                                    ("2026-03-20T03:12:07Z", "3333333333333333")):  # a sender's clock days fast
            reply = request(srv.url, "POST", "/webhooks/alertmanager", am_group(starts, fingerprint=fingerprint),
                            am_headers())
            assert reply.status == 202, reply.body
            assert INCIDENT_ID.match(reply.body["alerts"][0]["incident"]), reply.body
        assert srv.service.store.incidents()[0].id.startswith(("2026", "2000"))


def test_f7_a_resolved_alert_with_an_unset_ends_at_closes_at_its_start():
    (inbound,) = alertmanager.parse(am_group("2026-03-14T03:12:07Z", status="resolved"), now=NOW).inbound
    assert inbound.effect == "close" and inbound.occurred_at == utc(2026, 3, 14, 3, 12, 7)


def test_f7_a_resolved_alert_ending_in_year_1500_is_refused():
    with pytest.raises(Malformed, match=r"alerts\[0\]\.endsAt"):
        alertmanager.parse(am_group("2026-03-14T03:12:07Z", status="resolved", ends_at="1500-01-01T00:00:00Z"),
                           now=NOW)


def test_f7_without_a_clock_only_the_lower_bound_applies():
    with pytest.raises(Malformed, match="2000-01-01"):
        pagerduty.parse(pd_event("1999-12-31T23:59:59Z"), webhook_id=None)
    assert pagerduty.parse(pd_event("2031-01-01T00:00:00Z"), webhook_id=None).inbound


def test_f7_a_time_that_overflows_utc_is_malformed_not_a_crash():
    for value in ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"):
        with pytest.raises(Malformed, match=r"alerts\[0\]\.startsAt"):
            alertmanager.parse(am_group(value), now=NOW)
