"""One PNG chart per signal the run read, with the alert, actions and recovery marked.

Values come from the journal's `series` evidence (recorded at the end of a run from the
metrics backend), so a report can be drawn long after the incident, offline.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import re
from collections.abc import Sequence
from typing import Any

from runbook.model import events as ev

MARK_STYLE = {"alert": ("#c0392b", "-"), "action": ("#e67e22", "--"), "rollback": ("#8e44ad", "--"),
              "recovered": ("#27ae60", "-")}


@dataclasses.dataclass(frozen=True)
class Chart:
    signal: str
    filename: str
    png: bytes


def _safe_name(signal: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", signal)[:100] or "signal"


def _points(raw: Sequence[Sequence[Any]]) -> tuple[list[dt.datetime], list[float]]:
    times, values = [], []
    for at, value in raw:
        if value is None:
            continue
        times.append(ev.parse_iso(at) if isinstance(at, str) else at)
        values.append(float(value))
    return times, values


def draw(series_event: ev.Event, markers: Sequence[dict[str, Any]]) -> Chart | None:
    """The chart of one `series` evidence event, or None when it holds no points."""
    data = series_event.data
    lines = [(s.get("labels") or {}, *_points(s.get("points") or [])) for s in data.get("series") or []]
    lines = [line for line in lines if line[1]]
    if not lines:
        return None
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    from matplotlib import dates as mdates
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 3.2), dpi=100)
    axes = figure.add_subplot()
    for labels, times, values in lines[:12]:
        name = ", ".join(f"{k}={v}" for k, v in labels.items()) or "total"
        axes.plot(times, values, linewidth=1.4, label=name)
    for mark in markers:
        at = mark["at"] if isinstance(mark["at"], dt.datetime) else ev.parse_iso(mark["at"])
        color, style = MARK_STYLE.get(mark["kind"], ("#555555", ":"))
        axes.axvline(at, color=color, linestyle=style, linewidth=1)
        axes.annotate(mark["label"], xy=(at, 1), xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                      va="top", ha="right", color=color)
    axes.set_title(str(data.get("signal")), fontsize=10)
    axes.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=dt.timezone.utc))
    axes.set_xlabel("UTC", fontsize=8)
    axes.tick_params(labelsize=8)
    axes.grid(True, alpha=0.3)
    if len(lines) > 1:
        axes.legend(fontsize=7, loc="upper left")
    figure.tight_layout()
    buffer = io.BytesIO()
    # A fixed Software tag and no timestamp keep the bytes stable for the same journal.
    figure.savefig(buffer, format="png", metadata={"Software": "runbook"})
    return Chart(str(data.get("signal")), f"{_safe_name(str(data.get('signal')))}.png", buffer.getvalue())


def draw_all(events: Sequence[ev.Event], markers: Sequence[dict[str, Any]]) -> list[Chart]:
    charts = []
    for event in events:
        if event.type == ev.EVIDENCE and event.data.get("kind") == "series":
            chart = draw(event, markers)
            if chart is not None:
                charts.append(chart)
    return charts
