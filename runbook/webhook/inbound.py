"""What a verified delivery becomes before anything is stored: one `Inbound` per alert or event.

Both sources normalise to it, so the ack path, the dedupe keys and the routing are one code path;
both read their body (bounded depth, Unicode only) and times (2000 to a year ahead) through here.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import re
from typing import Any, Literal

from runbook.errors import Malformed
from runbook.model.alert import Alert
from runbook.model.json_depth import nesting_depth

Effect = Literal["open", "update", "close"]


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
    delivery_key: str | None  # PagerDuty's X-Webhook-Id (repeated on every retry) with the signed event id
    inbound: tuple[Inbound, ...]
    ignored: str | None = None  # why nothing in it is acted on (an event type we do not handle)


def digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()


MAX_DEPTH = 64  # both senders nest under 10 deep; more is an attempt to exhaust the parser's stack
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]", re.A)
_SURROGATE = re.compile("[\ud800-\udfff]")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def _no_constant(name: str) -> Any:
    raise Malformed(f"the body is not JSON: {name} is not a JSON number")


def load_json(body: bytes) -> Any:
    """The body as JSON, or Malformed: UTF-8 only, at most MAX_DEPTH deep, no NaN, every string Unicode."""
    try:
        text = body.decode("utf-8-sig")  # a byte-order mark is tolerated, as json.loads does for bytes
    except UnicodeDecodeError as exc:
        raise Malformed(f"the body is not UTF-8 (byte {exc.start}); send JSON in UTF-8") from None
    depth = nesting_depth(text)
    if depth > MAX_DEPTH:
        raise Malformed(f"the body is nested {depth} deep; at most {MAX_DEPTH} levels of arrays and objects")
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except RecursionError:  # not reached after the depth check; kept so a parser change cannot make it a 500
        raise Malformed(f"the body is nested too deep; at most {MAX_DEPTH} levels") from None
    except ValueError as exc:  # a Malformed from _no_constant is not a ValueError: it passes through
        raise Malformed(f"the body is not JSON: {exc}") from None
    if _SURROGATE_ESCAPE.search(text):  # only a \uD800-\uDFFF escape can leave a lone surrogate
        _refuse_surrogates(doc)
    return doc


def _field(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _NAME.fullmatch(part):
            out += f".{part}" if out else part
        else:
            out += f"[{ascii(part[:60])}]"
    return out or "the body"


def _refuse_surrogates(doc: Any) -> None:
    """Malformed naming a field whose name or value holds a lone surrogate (not a character); no recursion."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(doc, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            if _SURROGATE.search(node):
                raise Malformed(f"{_field(path)} holds a lone surrogate, which is not a Unicode character; "
                                f"send text as valid UTF-8")
        elif isinstance(node, dict):
            for key, value in node.items():
                if _SURROGATE.search(key):
                    raise Malformed(f"a field name in {_field(path)} holds a lone surrogate, which is not a "
                                    f"Unicode character; send text as valid UTF-8")
                stack.append((value, (*path, key)))
        elif isinstance(node, list):
            stack.extend((value, (*path, i)) for i, value in enumerate(node))


_FRACTION = re.compile(r"(\.\d{6})\d+")
EARLIEST = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)  # no alert this service sees predates it
# A sender whose clock runs days fast still pages (Alertmanager drops a 4xx for good); years ahead is corrupt.
AHEAD = dt.timedelta(days=366)
GO_ZERO = dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc)  # Go's zero time: Alertmanager's "not set"


def _stamp(at: dt.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any, what: str, *, now: dt.datetime | None = None) -> dt.datetime:
    """RFC 3339 as Go writes it (nanoseconds, `Z`) → an aware datetime, from 2000 to a year past `now`."""
    return plausible(parse_any_time(value, what), value, what, now=now)


def plausible(parsed: dt.datetime, value: Any, what: str, *, now: dt.datetime | None) -> dt.datetime:
    """`parsed` if it lies from 2000 to a year past `now`; Malformed naming `what` and the range otherwise.

    Refused, not clamped: the time names the incident and its journal, and a clamped one would be a
    time nobody sent. Without `now` (a parser called outside the service) only 2000 is checked.
    """
    if now is None:
        if parsed < EARLIEST:
            raise Malformed(f"{what} {value!r} is before {_stamp(EARLIEST)}, the earliest accepted; "
                            f"check the sender's clock")
        return parsed
    latest = now.astimezone(dt.timezone.utc) + AHEAD
    if not EARLIEST <= parsed <= latest:
        raise Malformed(f"{what} {value!r} is outside the accepted range {_stamp(EARLIEST)} to {_stamp(latest)} "
                        f"(a year past this service's clock); check the sender's clock")
    return parsed


def parse_any_time(value: Any, what: str) -> dt.datetime:
    """RFC 3339 as Go writes it → an aware datetime, any year (Go's zero time included); Malformed otherwise."""
    if not isinstance(value, str) or len(value) > 64:
        raise Malformed(f"{what} must be an RFC 3339 timestamp string")
    try:
        parsed = dt.datetime.fromisoformat(_FRACTION.sub(r"\1", value.strip()).replace("Z", "+00:00"))
    except ValueError:
        raise Malformed(f"{what} {value!r} is not an RFC 3339 timestamp") from None
    if parsed.tzinfo is None:
        raise Malformed(f"{what} {value!r} has no time zone")
    try:
        return parsed.astimezone(dt.timezone.utc)
    except OverflowError:  # 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        raise Malformed(f"{what} {value!r} is not a time that can be represented") from None


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
