"""What a verified delivery becomes before anything is stored: one `Inbound` per alert or event.

Both sources normalise to it, so the ack path, the dedupe keys and the routing are one code path.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import re
from typing import Any, Literal

from runbook.model.alert import Alert

Effect = Literal["open", "update", "close"]


class Malformed(ValueError):
    """The payload can never be accepted as it is: answered 400, and the sender should not retry."""


@dataclasses.dataclass(frozen=True)
class Inbound:
    source: str  # "pagerduty" | "alertmanager"
    event_key: str  # the same event delivered again has the same key
    incident_key: str  # the source's identity of the incident (PD incident id; AM fingerprint + startsAt)
    effect: Effect  # open an incident, add to it, or close it
    alert: Alert
    occurred_at: dt.datetime
    title: str = ""  # PagerDuty incident title, for routing
    service: tuple[str, ...] = ()  # PagerDuty service id and name, for routing
    details: dict[str, Any] = dataclasses.field(default_factory=dict)  # journaled with the alert


@dataclasses.dataclass(frozen=True)
class Delivery:
    source: str
    delivery_key: str | None  # PagerDuty's X-Webhook-Id, repeated on every retry
    inbound: tuple[Inbound, ...]
    ignored: str | None = None  # why nothing in it is acted on (an event type we do not handle)


def digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()


_FRACTION = re.compile(r"(\.\d{6})\d+")


def parse_time(value: Any, what: str) -> dt.datetime:
    """RFC 3339 as Go writes it (nanoseconds, `Z`) → an aware datetime; Malformed otherwise."""
    if not isinstance(value, str) or len(value) > 64:
        raise Malformed(f"{what} must be an RFC 3339 timestamp string")
    try:
        parsed = dt.datetime.fromisoformat(_FRACTION.sub(r"\1", value.strip()).replace("Z", "+00:00"))
    except ValueError:
        raise Malformed(f"{what} {value!r} is not an RFC 3339 timestamp") from None
    if parsed.tzinfo is None:
        raise Malformed(f"{what} {value!r} has no time zone")
    return parsed.astimezone(dt.timezone.utc)


def string_map(value: Any, what: str, *, limit: int = 200) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Malformed(f"{what} must be an object of strings")
    if len(value) > limit:
        raise Malformed(f"{what} has {len(value)} entries; at most {limit}")
    out = {}
    for key, item in value.items():
        if not isinstance(item, str):
            raise Malformed(f"{what}.{key} must be a string, found {type(item).__name__}")
        out[key] = item
    return out
