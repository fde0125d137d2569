"""Counting log lines that match a playbook's patterns, per pod and per minute, from Kubernetes logs.

Log lines are untrusted: each is cut at MAX_LINE_CHARS before any pattern sees it (a bounded
input keeps even a backtracking pattern bounded), and patterns with nested quantifiers are refused.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Iterable, Sequence

MAX_LINE_CHARS = 4096  # a longer line is matched on its first 4 KiB only
MAX_PATTERNS = 16
MAX_PATTERN_CHARS = 200
# The kubelet's `timestamps=true` prefix: RFC 3339 with up to nanoseconds, then one space.
_K8S_TS = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2}) ")
# A group holding a quantifier, itself quantified: (a+)+, (a*)*, (?:x+){2,} — the shapes that backtrack
# exponentially in Python's engine.
_NESTED_QUANTIFIER = re.compile(r"\((?:[^()\\]|\\.)*[+*}](?:[^()\\]|\\.)*\)\s*[+*{]")


def check_pattern(pattern: str) -> str:
    """`pattern` if it is a bounded, compilable regex; otherwise a ValueError saying how to fix it."""
    if not pattern or len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"a log pattern must have 1 to {MAX_PATTERN_CHARS} characters, got {len(pattern)}")
    if _NESTED_QUANTIFIER.search(pattern):
        raise ValueError(f"log pattern {pattern!r} repeats a group that itself repeats (like (a+)+), which can "
                         "take exponential time; write the repetition once")
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"log pattern {pattern!r} is not a valid regular expression: {exc}") from None
    if compiled.search("") is not None:
        raise ValueError(f"log pattern {pattern!r} matches every line; make it specific")
    return pattern


@dataclasses.dataclass(frozen=True)
class LogLine:
    at: dt.datetime | None  # the kubelet's timestamp; None when the log came without one
    text: str  # at most MAX_LINE_CHARS


def split_lines(text: str, max_chars: int = MAX_LINE_CHARS) -> list[LogLine]:
    """The lines of one container's log, each with the timestamp the kubelet put in front (if any),
    cut at `max_chars`."""
    out = []
    for raw in text.splitlines():
        at = None
        found = _K8S_TS.match(raw)
        if found:
            fraction = (found.group(2) or "0")[:6].ljust(6, "0")
            zone = "+00:00" if found.group(3) == "Z" else found.group(3)
            try:
                at = dt.datetime.fromisoformat(f"{found.group(1)}.{fraction}{zone}").astimezone(dt.timezone.utc)
                raw = raw[found.end():]
            except ValueError:
                at = None
        if raw:
            out.append(LogLine(at, raw[:max_chars]))
    return out


def minute_of(at: dt.datetime) -> str:
    return at.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")


@dataclasses.dataclass
class Counts:
    """Matching lines of many pods: per pod, per pod and minute, per pattern, and the first few."""

    by_pod: dict[str, int] = dataclasses.field(default_factory=dict)
    by_pod_minute: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    by_pattern: dict[str, int] = dataclasses.field(default_factory=dict)
    untimed: int = 0  # matching lines without a timestamp (not in any minute)
    first: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (pod, line)

    @property
    def total(self) -> int:
        return sum(self.by_pod.values())

    @property
    def by_minute(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for minutes in self.by_pod_minute.values():
            for minute, n in minutes.items():
                out[minute] = out.get(minute, 0) + n
        return dict(sorted(out.items()))

    @property
    def peak_per_min(self) -> int:
        """The most matches one pod logged in one minute."""
        return max((n for minutes in self.by_pod_minute.values() for n in minutes.values()), default=0)

    @property
    def peak_total_per_min(self) -> int:
        """The most matches all pods together logged in one minute."""
        return max(self.by_minute.values(), default=0)


def count_matches(logs: Iterable[tuple[str, str]], patterns: Sequence[str], *, keep: int = 20) -> Counts:
    """Count the lines of each (pod, log text) that match any of `patterns` (each checked first)."""
    if len(patterns) > MAX_PATTERNS:
        raise ValueError(f"at most {MAX_PATTERNS} log patterns, got {len(patterns)}")
    compiled = [(p, re.compile(check_pattern(p))) for p in patterns]
    counts = Counts()
    for pod, text in logs:
        counts.by_pod.setdefault(pod, 0)
        for line in split_lines(text):
            hit = [p for p, regex in compiled if regex.search(line.text)] if compiled else [""]
            if not hit:
                continue
            counts.by_pod[pod] += 1
            for p in hit:
                if p:
                    counts.by_pattern[p] = counts.by_pattern.get(p, 0) + 1
            if line.at is None:
                counts.untimed += 1
            else:
                minutes = counts.by_pod_minute.setdefault(pod, {})
                minute = minute_of(line.at)
                minutes[minute] = minutes.get(minute, 0) + 1
            if len(counts.first) < keep:
                counts.first.append((pod, line.text))
    counts.by_pod_minute = {pod: dict(sorted(m.items())) for pod, m in sorted(counts.by_pod_minute.items())}
    return counts
