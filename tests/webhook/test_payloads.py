"""PagerDuty signatures and payloads, Alertmanager payloads and credentials, routing of labels.

The signature vector is go-pagerduty's (webhookv3_test.go): its body bytes and digest, verified
here against our code; payloads are written in data/, and the real ones in ../shared/reference are
parsed too when that folder is there (CI requires it).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.webhook import alertmanager, pagerduty
from runbook.errors import Malformed
from runbook.webhook.routing import Router
from runbook.webhook.settings import RouteRule
from tests.conftest import reference_text
from tests.webhook.helpers import AM_TOKEN, PD_SECRET, am_group, pd_event, playbook

VECTOR = (Path(__file__).parent / "data" / "pagerduty-v3-signature-vector-go-pagerduty-body.json").read_bytes()
VALID = "v1=0c0b9495b893a39e70d1fea2fe11fbe0a825f88b9f67846f6cc07dd2bc5476cd"
MISMATCH = "v1=7020c8a7ec668a9b7012bc3dd82e483394b038f4230acc6785efbf2a7d8bcaf5"
OLD_SECRET = b"an-old-secret-that-was-rotated-out"


def test_signature_known_answer():
    assert len(VECTOR) == 1655
    assert pagerduty.sign(VECTOR, PD_SECRET) == VALID
    assert pagerduty.verify(VECTOR, VALID, [PD_SECRET]) is None
    assert pagerduty.verify(VECTOR, MISMATCH, [PD_SECRET]) == "no signature matches a configured secret"
    assert pagerduty.verify(VECTOR, None, [PD_SECRET]) == "missing X-PagerDuty-Signature header"
    assert pagerduty.verify(VECTOR, "v0=abc,sha1=def", [PD_SECRET]) == "X-PagerDuty-Signature has no v1= signature"


@pytest.mark.parametrize("header", [f"{MISMATCH},{VALID}", f"{VALID},{MISMATCH}", f"{MISMATCH}, {VALID}",
                                    f"v2=ff,{VALID}", VALID.upper().replace("V1=", "v1=")],
                         ids=["second", "first", "space", "unknown-version", "uppercase-hex"])
def test_any_v1_signature_may_match(header):
    assert pagerduty.verify(VECTOR, header, [PD_SECRET]) is None


def test_rotation_accepts_either_secret_and_refuses_a_retired_one():
    assert pagerduty.verify(VECTOR, VALID, [OLD_SECRET, PD_SECRET]) is None
    assert pagerduty.verify(VECTOR, pagerduty.sign(VECTOR, OLD_SECRET), [PD_SECRET]) is not None


def test_the_body_is_verified_byte_for_byte():
    reserialised = json.dumps(json.loads(VECTOR)).encode()
    assert pagerduty.verify(reserialised, VALID, [PD_SECRET]) is not None


def test_priority_updated_is_ignored_politely():
    delivery = pagerduty.parse(VECTOR, webhook_id="abc")
    assert delivery.inbound == () and delivery.ignored == "event type incident.priority_updated is not handled"


@pytest.mark.parametrize(("event_type", "effect", "status"), [
    ("incident.triggered", "open", "triggered"), ("incident.acknowledged", "update", "acknowledged"),
    ("incident.resolved", "close", "resolved")])
def test_incident_events(event_type, effect, status):
    delivery = pagerduty.parse(pd_event(event_type, event_id=f"ev-{status}"), webhook_id="wh-9")
    (inbound,) = delivery.inbound
    assert (inbound.effect, inbound.alert.status, inbound.incident_key) == (effect, status, "pd|PGR0VU2")
    assert inbound.event_key == f"pd-event|ev-{status}" and inbound.service == ("PLLM7SV", "vLLM inference (llm)")
    assert inbound.alert.name == "OOM on vllm-server" and inbound.alert.labels["priority"] == "P1"


@pytest.mark.parametrize("body", [b"", b"not json", b"[]", b'{"event": 1}', b'{"event": {"id": 5}}',
                                  b'{"messages": [{"event": "incident.trigger"}]}',
                                  b'{"event": {"id": "x", "event_type": "incident.triggered", "occurred_at": "yesterday", "data": {}}}',
                                  b'{"event": {"id": "x", "event_type": "incident.triggered", "occurred_at": "2026-01-01T00:00:00Z", "data": {"id": "a;b"}}}'])
def test_malformed_pagerduty(body):
    with pytest.raises(Malformed):
        pagerduty.parse(body, webhook_id=None)


def test_pagerduty_reference_incident_object():
    """The developer docs' incident object, as the `data` of a real V3 event envelope."""
    data = json.loads(reference_text("pagerduty/pagerduty-v3-event-data-incident-object-devdocs.json"))
    body = json.dumps({"event": {"id": "01DEN1HNLBC1VITK192ETHS2CW", "event_type": "incident.triggered",
                                 "resource_type": "incident", "occurred_at": "2020-10-02T18:45:22.169Z",
                                 "agent": None, "client": None, "data": data}}).encode()
    (inbound,) = pagerduty.parse(body, webhook_id=None).inbound
    assert (inbound.effect, inbound.incident_key, inbound.service) == ("open", "pd|PGR0VU2", ("PF9KMXH", "API Service"))
    assert inbound.alert.name == "A little bump in the road"
    assert (inbound.alert.labels["priority"], inbound.alert.labels["urgency"]) == ("P1", "high")


def test_alertmanager_pair_is_one_incident():
    firing = alertmanager.parse(am_group("firing")).inbound[0]
    resolved = alertmanager.parse(am_group("resolved")).inbound[0]
    assert firing.incident_key == resolved.incident_key
    assert firing.event_key != resolved.event_key
    assert (firing.effect, resolved.effect) == ("open", "close")
    assert firing.alert.labels["namespace"] == "llm" and firing.details["group_key"].startswith("{}/")


def test_alertmanager_reference_pair_is_one_incident():
    """The real firing/resolved pair an OpenShift Alertmanager sent, byte for byte."""
    firing = alertmanager.parse(reference_text(
        "alertmanager/alertmanager-webhook-v4-firing-openshift-uwm-Error500Alert.json").encode()).inbound[0]
    resolved = alertmanager.parse(reference_text(
        "alertmanager/alertmanager-webhook-v4-resolved-openshift-uwm-Error500Alert.json").encode()).inbound[0]
    assert firing.incident_key == resolved.incident_key and firing.event_key != resolved.event_key
    assert (firing.effect, resolved.effect) == ("open", "close")
    assert firing.alert.name == "Error500Alert" and firing.alert.labels["namespace"] == "monitor-demo"
    assert firing.details["fingerprint"] == "483eb0cd5dcb2110" and firing.details["group_key"].startswith("{}/")


def test_alertmanager_nanosecond_timestamps_and_missing_fingerprint():
    doc = json.loads(am_group())
    doc["alerts"][0]["startsAt"] = "2026-03-14T03:12:07.123456789Z"
    del doc["alerts"][0]["fingerprint"]
    (inbound,) = alertmanager.parse(json.dumps(doc).encode()).inbound
    assert inbound.occurred_at.microsecond == 123456 and len(inbound.alert.fingerprint) == 16


@pytest.mark.parametrize("mutate", [
    lambda d: d.update(version="3"), lambda d: d.update(alerts="x"),
    lambda d: d["alerts"][0].update(status="pending"), lambda d: d["alerts"][0]["labels"].update(n=1),
    lambda d: d["alerts"][0].update(startsAt=5), lambda d: d["alerts"][0].update(fingerprint="zz;"),
    lambda d: d["alerts"].append("alert")], ids=["version", "alerts", "status", "label-type", "time", "fp", "item"])
def test_malformed_alertmanager(mutate):
    doc = json.loads(am_group())
    mutate(doc)
    with pytest.raises(Malformed):
        alertmanager.parse(json.dumps(doc).encode())


def test_alertmanager_credentials():
    basic = base64.b64encode(f"alertmanager:{AM_TOKEN}".encode()).decode()
    assert alertmanager.authenticate(f"Bearer {AM_TOKEN}", [AM_TOKEN]) is None
    assert alertmanager.authenticate(f"Basic {basic}", [AM_TOKEN]) is None
    assert alertmanager.authenticate(None, [AM_TOKEN]).startswith("missing")
    assert alertmanager.authenticate("Bearer wrong", [AM_TOKEN]) is not None
    assert alertmanager.authenticate("Basic !!!", [AM_TOKEN]) is not None
    assert alertmanager.authenticate(f"Token {AM_TOKEN}", [AM_TOKEN]) is not None


HOSTILE = ["a;rm -rf /", "$(id)", "app=x,app!=y", "`id`", "llm\n", "ｌｌｍ", "llm\u202e", "../../etc", "", "-llm",
           "a" * 64, "llm\x00", "llm' or '1'='1", "{{ 7*7 }}", 'llm"}) or vector(1']


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_label_values_never_become_params(value):
    inbound = alertmanager.parse(am_group(namespace=value)).inbound[0]
    route = Router([playbook()]).route(inbound)
    assert route.refused is not None and "namespace" not in route.params


@given(st.text(max_size=80))
@settings(max_examples=300, deadline=None)
def test_a_param_from_a_label_is_always_a_plain_name(value):
    inbound = alertmanager.parse(am_group(namespace=value)).inbound[0]
    route = Router([playbook()]).route(inbound)
    if route.refused is None:
        assert route.params["namespace"] == value
        assert value.isascii() and value[0].isalnum() and value[-1].isalnum() and len(value) <= 63
        assert not set(value) - set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def test_config_routes_come_first():
    router = Router([playbook()], [RouteRule(playbook="test-oom", source="pagerduty", service="PLLM7SV",
                                             params={"workload": "statefulset/other"})])
    inbound = pagerduty.parse(pd_event(title="Something unrelated"), webhook_id=None).inbound[0]
    route = router.route(inbound)
    assert route.playbook.name == "test-oom" and route.params == {"workload": "statefulset/other"}
    unmatched = pagerduty.parse(pd_event(title="Disk full"), webhook_id=None).inbound[0]
    assert Router([playbook()]).route(unmatched).playbook is None


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
                    max_leaves=20))
@settings(max_examples=300, deadline=None)
def test_parsers_reject_anything_odd_with_malformed_only(doc):
    body = json.dumps(doc).encode()
    for parse in (lambda b: pagerduty.parse(b, webhook_id=None), alertmanager.parse):
        try:
            parse(body)
        except Malformed:
            pass
