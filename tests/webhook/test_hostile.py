"""Hostile inputs over real HTTP, driven by hypothesis: only 2xx or 4xx, nothing executed, still healthy.

Payloads keep the Alertmanager and PagerDuty shapes (so they get past the first checks) with
odd types and hostile strings where labels, titles and ids go.
"""

from __future__ import annotations

import hashlib
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runbook.record.journal import list_incidents
from runbook.model import events as ev
from tests.engine.helpers import cluster as fake_cluster
from tests.webhook.helpers import am_group, am_headers, journal, oom_world, pd_event, pd_headers, request, serve

NASTY = st.sampled_from(["a;rm -rf /", "$(id)", "app=x,app!=y", "`reboot`", "ｌｌｍ", "llm\u202e", "\x00", "../..",
                         "{{ 7*7 }}", "' or 1=1 --", "a" * 300, "\ud7ff", "llm\n", "vector(1)"])
VALUE = NASTY | st.text(max_size=40) | st.integers() | st.none() | st.lists(st.text(max_size=5), max_size=2)


@st.composite
def am_payloads(draw):
    doc = json.loads(am_group(fingerprint=draw(st.from_regex(r"[0-9a-f]{16}", fullmatch=True))))
    alert = doc["alerts"][0]
    for key in draw(st.lists(st.sampled_from(["namespace", "alertname", "pod", "job"]), max_size=3)):
        alert["labels"][key] = draw(VALUE)
    if draw(st.booleans()):
        alert[draw(st.sampled_from(["status", "startsAt", "fingerprint", "labels", "annotations"]))] = draw(VALUE)
    if draw(st.booleans()):
        doc[draw(st.sampled_from(["version", "alerts", "groupKey"]))] = draw(VALUE)
    return json.dumps(doc).encode()


@st.composite
def pd_payloads(draw):
    doc = json.loads(pd_event(event_id=draw(st.from_regex(r"[A-Z0-9]{10}", fullmatch=True))))
    event = doc["event"]
    target = draw(st.sampled_from(["title", "id", "service", "status"]))
    event["data"][target] = draw(VALUE)
    if draw(st.booleans()):
        event[draw(st.sampled_from(["event_type", "occurred_at", "id", "data"]))] = draw(VALUE)
    return json.dumps(doc).encode()


def test_hostile_payloads_are_refused_or_contained(tmp_path):
    state = tmp_path / "state"
    c = fake_cluster()
    with serve(state, world=oom_world(c)) as srv:
        seen: set[int] = set()

        @given(st.one_of(am_payloads().map(lambda b: ("alertmanager", b)), pd_payloads().map(lambda b: ("pagerduty", b))))
        @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        def deliver(case):
            source, body = case
            headers = am_headers() if source == "alertmanager" else pd_headers(body, webhook_id=f"wh-{hashlib.sha256(body).hexdigest()[:20]}")
            reply = request(srv.url, "POST", f"/webhooks/{source}", body, headers)
            seen.add(reply.status)
            assert reply.status in (200, 202, 400), reply.body
            if reply.status == 400:
                assert reply.body["error"]

        deliver()
        srv.wait_idle(30)
        assert request(srv.url, "GET", "/healthz").status == 200
        assert 400 in seen
    assert c.mutations == []  # the default policy proposes; nothing was applied
    for summary in list_incidents(state):
        for event in journal(state, summary.id):
            if event.type == ev.RUN_STARTED:
                namespace = event.data["params"]["namespace"]
                assert namespace.replace("-", "").isalnum() and namespace.isascii()
