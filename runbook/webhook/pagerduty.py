"""PagerDuty V3 webhooks: the `X-PagerDuty-Signature` check on the raw body, then the payload.

The signature is HMAC-SHA256 of the exact body bytes, hex, as one or more `v1=` entries (several
during a secret rotation); any entry matching any configured secret is enough.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import re
from collections.abc import Sequence
from typing import Any

from runbook.model.alert import Alert
from runbook.errors import Malformed
from runbook.webhook.inbound import Delivery, Inbound, load_json, parse_time

SIGNATURE_HEADER = "x-pagerduty-signature"
WEBHOOK_ID_HEADER = "x-webhook-id"
EFFECTS = {"incident.triggered": "open", "incident.acknowledged": "update", "incident.resolved": "close"}
STATUS = {"incident.triggered": "triggered", "incident.acknowledged": "acknowledged",
          "incident.resolved": "resolved"}
_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_HEX = re.compile(r"^[0-9a-fA-F]{64}$")
MAX_SIGNATURES = 16  # rotation needs two; many more is an attempt to make us hash a lot


def signatures(header: str | None) -> list[str]:
    """The `v1=` hex digests in the header; other versions and junk entries are ignored."""
    if not header:
        return []
    found = []
    for entry in header.split(",")[:MAX_SIGNATURES]:
        entry = entry.strip()
        if entry.startswith("v1=") and _HEX.fullmatch(entry[3:]):
            found.append(entry[3:].lower())
    return found


def sign(body: bytes, secret: bytes) -> str:
    return "v1=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify(body: bytes, header: str | None, secrets: Sequence[bytes]) -> str | None:
    """None when a signature matches one of the secrets; otherwise why not (for the 401 body)."""
    given = signatures(header)
    if not header:
        return "missing X-PagerDuty-Signature header"
    if not given:
        return "X-PagerDuty-Signature has no v1= signature"
    ok = False
    for secret in secrets:
        expected = hmac.new(secret, body, hashlib.sha256).hexdigest()
        for candidate in given:
            # Every pair is compared, in constant time, so timing says nothing about which failed.
            ok |= hmac.compare_digest(expected, candidate)
    return None if ok else "no signature matches a configured secret"


def _str(value: Any, what: str, *, limit: int = 1024, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value) or len(value) > limit:
        raise Malformed(f"{what} must be a non-empty string of at most {limit} characters")
    return value


def parse(body: bytes, *, webhook_id: str | None, now: dt.datetime | None = None) -> Delivery:
    """A V3 delivery → one `Inbound` for the incident events we handle, or an ignored delivery.

    `now` (the service's clock) bounds `occurred_at`. The delivery key is the X-Webhook-Id with the
    event id: the header is not signed, so it alone must never make a new signed event a duplicate.
    """
    doc = load_json(body)
    if isinstance(doc, dict) and "messages" in doc and "event" not in doc:
        raise Malformed("this is a V1/V2 webhook payload (`messages`); create a V3 webhook subscription")
    if not isinstance(doc, dict) or not isinstance(doc.get("event"), dict):
        raise Malformed("a PagerDuty V3 payload is an object with an `event` object")
    event = doc["event"]
    event_id = _str(event.get("id"), "event.id", limit=128)
    event_type = _str(event.get("event_type"), "event.event_type", limit=128)
    if webhook_id is not None and not _ID.fullmatch(webhook_id):
        raise Malformed("X-Webhook-Id must be letters, digits, '-' and '_' (at most 128)")
    delivery_key = f"{webhook_id}|{event_id}" if webhook_id is not None else None
    if event_type not in EFFECTS:
        return Delivery("pagerduty", delivery_key, (), ignored=f"event type {event_type} is not handled")
    occurred = parse_time(event.get("occurred_at"), "event.occurred_at", now=now)
    data = event.get("data")
    if not isinstance(data, dict):
        raise Malformed(f"event.data must be the incident object for {event_type}")
    incident_id = _str(data.get("id"), "event.data.id", limit=128)
    if not _ID.fullmatch(incident_id):
        raise Malformed("event.data.id must be letters, digits, '-' and '_'")
    title = _str(data.get("title"), "event.data.title", limit=4096, required=False)
    service = data.get("service") if isinstance(data.get("service"), dict) else {}
    service_id = _str(service.get("id"), "event.data.service.id", limit=128, required=False)
    service_name = _str(service.get("summary"), "event.data.service.summary", limit=1024, required=False)
    priority = data.get("priority") if isinstance(data.get("priority"), dict) else {}
    labels = {k: v for k, v in {"service_id": service_id, "service": service_name,
                                "urgency": data.get("urgency"), "priority": priority.get("summary"),
                                "incident_number": str(data.get("number", "")) or None}.items()
              if isinstance(v, str) and v}
    annotations = {k: v for k, v in {"html_url": data.get("html_url"), "incident_key": data.get("incident_key")}.items()
                   if isinstance(v, str) and v}
    alert = Alert("pagerduty", title, labels, annotations, status=STATUS[event_type], fingerprint=incident_id,
                  starts_at=occurred)
    agent = event.get("agent") if isinstance(event.get("agent"), dict) else {}
    inbound = Inbound("pagerduty", f"pd-event|{event_id}", f"pd|{incident_id}", EFFECTS[event_type],  # type: ignore[arg-type]
                      alert, occurred, title=title, service=tuple(s for s in (service_id, service_name) if s),
                      details={"event_id": event_id, "event_type": event_type, "incident_id": incident_id,
                               "webhook_id": webhook_id, "agent": agent.get("summary")})
    return Delivery("pagerduty", delivery_key, (inbound,))
