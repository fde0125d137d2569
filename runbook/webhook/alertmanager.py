"""Alertmanager webhook payloads (version 4), and the bearer-token or basic-auth check.

Alertmanager signs nothing: the receiver config carries a credential. Each alert is its own
incident, identified by fingerprint + startsAt (a re-fire after resolution starts a new one).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as dt
import hmac
import re
from collections.abc import Sequence
from typing import Any

from runbook.model.alert import Alert
from runbook.errors import Malformed
from runbook.webhook.inbound import (GO_ZERO, Delivery, Inbound, digest, load_json, parse_any_time,
                                     parse_time, plausible, string_map)

_FINGERPRINT = re.compile(r"^[0-9a-fA-F]{1,32}$")
MAX_ALERTS = 1000


def authenticate(authorization: str | None, tokens: Sequence[str]) -> str | None:
    """None when `Authorization` carries a configured token (bearer, or as the basic-auth password)."""
    if not authorization:
        return "missing Authorization header (bearer token or basic auth)"
    scheme, _, value = authorization.strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return "basic auth credentials are not valid base64 of user:password"
        value = decoded.partition(":")[2]
    elif scheme.lower() != "bearer":
        return f"unsupported Authorization scheme {scheme[:20]!r}; use Bearer or Basic"
    ok = False
    for token in tokens:
        ok |= hmac.compare_digest(token.encode("utf-8"), value.encode("utf-8"))
    return None if ok else "the credential does not match a configured token"


def _ends(item: dict[str, Any], where: str, status: str, now: dt.datetime | None) -> dt.datetime | None:
    """When a resolved alert ended; None for a firing one or Go's zero time ("not set")."""
    if not item.get("endsAt"):
        return None
    ends = parse_any_time(item["endsAt"], f"{where}.endsAt")
    if status != "resolved" or ends == GO_ZERO:  # a firing alert's endsAt is never used
        return None
    return plausible(ends, item["endsAt"], f"{where}.endsAt", now=now)


def _alert(item: Any, index: int, now: dt.datetime | None) -> Inbound:
    where = f"alerts[{index}]"
    if not isinstance(item, dict):
        raise Malformed(f"{where} must be an object")
    status = item.get("status")
    if status not in ("firing", "resolved"):
        raise Malformed(f"{where}.status must be firing or resolved, found {str(status)[:40]!r}")
    labels = string_map(item.get("labels"), f"{where}.labels")
    annotations = string_map(item.get("annotations"), f"{where}.annotations")
    starts = parse_time(item.get("startsAt"), f"{where}.startsAt", now=now)
    ends = _ends(item, where, status, now)
    fingerprint = item.get("fingerprint")
    if fingerprint is None:
        # Older or templated payloads: the label set is what Alertmanager hashes too.
        fingerprint = digest(*(f"{k}={v}" for k, v in sorted(labels.items())))[:16]
    if not isinstance(fingerprint, str) or not _FINGERPRINT.fullmatch(fingerprint):
        raise Malformed(f"{where}.fingerprint must be hexadecimal")
    identity = f"{fingerprint}|{starts.isoformat()}"
    alert = Alert("alertmanager", labels.get("alertname", ""), labels, annotations, status=status,
                  fingerprint=fingerprint, starts_at=starts)
    occurred = ends if status == "resolved" and ends is not None else starts
    generator = item.get("generatorURL")
    return Inbound("alertmanager", f"am-alert|{identity}|{status}", f"am|{identity}",
                   "open" if status == "firing" else "close", alert, occurred,
                   details={"fingerprint": fingerprint, "status": status,
                            "ends_at": ends.isoformat() if ends and status == "resolved" else None,
                            "generator_url": generator[:2048] if isinstance(generator, str) else None})


def parse(body: bytes, *, now: dt.datetime | None = None) -> Delivery:
    """A v4 group → one `Inbound` per alert; `now` (the service's clock) bounds their times."""
    doc = load_json(body)
    if not isinstance(doc, dict):
        raise Malformed("an Alertmanager payload is a JSON object")
    if doc.get("version") != "4":
        raise Malformed(f"unsupported payload version {str(doc.get('version'))[:20]!r}; expected \"4\"")
    alerts = doc.get("alerts")
    if not isinstance(alerts, list):
        raise Malformed("`alerts` must be a list")
    if len(alerts) > MAX_ALERTS:
        raise Malformed(f"{len(alerts)} alerts in one payload; set max_alerts ≤ {MAX_ALERTS} on the receiver")
    inbound = tuple(_alert(item, i, now) for i, item in enumerate(alerts))
    group = {"receiver": doc.get("receiver"), "group_key": doc.get("groupKey"),
             "truncated_alerts": doc.get("truncatedAlerts")}
    inbound = tuple(dataclasses.replace(i, details={**i.details, **{k: v for k, v in group.items()
                                                                 if isinstance(v, (str, int))}})
                    for i in inbound)
    return Delivery("alertmanager", None, inbound, ignored=None if inbound else "the payload has no alerts")
