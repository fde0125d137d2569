"""How the report writes a moment: the UTC clock time, and its distance from the first alert.

One place, so the timeline, the milestones and the actions table line up to the second.
"""

from __future__ import annotations

import datetime as dt


def clock(at: dt.datetime) -> str:
    return at.astimezone(dt.timezone.utc).strftime("%H:%M:%S")


def relative(at: dt.datetime, origin: dt.datetime) -> str:
    """`T+03:05`, `T-07:00`, `T+1:02:03`: the time since (or before) the first alert."""
    seconds = int(round((at - origin).total_seconds()))
    sign = "-" if seconds < 0 else "+"
    hours, rest = divmod(abs(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return f"T{sign}{hours}:{minutes:02d}:{secs:02d}" if hours else f"T{sign}{minutes:02d}:{secs:02d}"
