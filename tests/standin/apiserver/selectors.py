"""Label and field selectors as the API server parses them (`a=b,c!=d,e in (f,g),!h`).

A selector the server cannot parse is a 400, as on a real API server; never "match all".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from tests.standin.apiserver.errors import ApiError

Predicate = Callable[[Mapping[str, str]], bool]

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET = re.compile(rf"^\s*(?P<key>{_KEY})\s+(?P<op>in|notin)\s+\((?P<values>[^)]*)\)\s*$")
_EQ = re.compile(rf"^\s*(?P<key>{_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>{_VALUE})\s*$")
_EXISTS = re.compile(rf"^\s*(?P<neg>!?)\s*(?P<key>{_KEY})\s*$")


def _split(text: str) -> list[str]:
    """Split on commas that are not inside `( … )`."""
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p for p in parts if p.strip()]


def label_selector(text: str | None) -> Predicate:
    if not text:
        return lambda labels: True
    checks: list[Predicate] = []
    for part in _split(text):
        if m := _SET.match(part):
            key, values = m["key"], {v.strip() for v in m["values"].split(",") if v.strip()}
            if m["op"] == "in":
                checks.append(lambda labels, k=key, vs=values: labels.get(k) in vs)
            else:
                checks.append(lambda labels, k=key, vs=values: labels.get(k) not in vs)
        elif m := _EQ.match(part):
            key, value = m["key"], m["value"]
            if m["op"] == "!=":
                checks.append(lambda labels, k=key, v=value: labels.get(k) != v)
            else:
                checks.append(lambda labels, k=key, v=value: labels.get(k) == v)
        elif m := _EXISTS.match(part):
            key = m["key"]
            if m["neg"]:
                checks.append(lambda labels, k=key: k not in labels)
            else:
                checks.append(lambda labels, k=key: k in labels)
        else:
            raise ApiError.bad_request(f"unable to parse requirement: {part.strip()!r} in labelSelector {text!r}")
    return lambda labels: all(check(labels) for check in checks)


FIELDS: dict[str, Callable[[dict], str]] = {
    "metadata.name": lambda o: o["metadata"]["name"],
    "metadata.namespace": lambda o: o["metadata"].get("namespace", ""),
    "spec.nodeName": lambda o: o.get("spec", {}).get("nodeName", ""),
    "status.phase": lambda o: o.get("status", {}).get("phase", ""),
    "involvedObject.name": lambda o: o.get("involvedObject", {}).get("name", ""),
}


def field_selector(text: str | None) -> Callable[[dict], bool]:
    if not text:
        return lambda obj: True
    checks = []
    for part in _split(text):
        m = re.match(r"^\s*([A-Za-z.]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not m or m[1] not in FIELDS:
            raise ApiError.bad_request(f"field label not supported: {part.strip()}")
        get, negate, value = FIELDS[m[1]], m[2] == "!=", m[3]
        checks.append(lambda obj, g=get, n=negate, v=value: (g(obj) == v) != n)
    return lambda obj: all(check(obj) for check in checks)
