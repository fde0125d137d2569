"""One PNG chart per signal the run read: what it means and its unit, the alert's threshold, the
alert's own line (the series added up as the alert reads them), numbered markers, gaps as gaps.

Values come from the journal's `series` evidence (recorded at the end of a run from the metrics
backend), so a report can be drawn long after the incident, offline. `plans` decides what a chart
shows (pure, tested as data); `draw` only paints a plan.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import math
import re
from collections.abc import Sequence
from typing import Any

from runbook.model import events as ev
from runbook.model.duration import format_duration
from runbook.reporting.words import meaning

MARK_STYLE = {"onset": ("#7f8c8d", ":"), "alert": ("#c0392b", "-"), "action": ("#e67e22", "--"),
              "rollback": ("#8e44ad", "--"), "recovered": ("#27ae60", "-")}
THRESHOLD_COLOR = "#d4ac0d"
ALERTS_LINE_COLOR = "#222222"
LABEL_GAP = 0.035  # the least distance, in axes widths, between two marker numbers on one row
LABEL_ROW = 0.085  # how far each further row of marker numbers sits below the one above
MAX_LINES = 12


@dataclasses.dataclass(frozen=True)
class Chart:
    signal: str
    filename: str
    png: bytes
    title: str = ""


@dataclasses.dataclass(frozen=True)
class Line:
    label: str
    times: tuple[dt.datetime, ...]
    values: tuple[float, ...]  # NaN where there is no sample: matplotlib breaks the line there
    alerts_view: bool = False  # the detect signal as the alert reads it


@dataclasses.dataclass(frozen=True)
class MarkerLabel:
    number: int
    kind: str
    at: dt.datetime
    x: float  # axes fraction
    row: int  # 0 at the top


@dataclasses.dataclass(frozen=True)
class Plan:
    signal: str
    filename: str
    title: str
    ylabel: str
    lines: tuple[Line, ...]
    xlim: tuple[dt.datetime, dt.datetime]
    marker_labels: tuple[MarkerLabel, ...]
    threshold: float | None = None
    threshold_label: str = ""


def _safe_name(signal: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", signal)[:100] or "signal"


def _time(value: Any) -> dt.datetime:
    return ev.parse_iso(value) if isinstance(value, str) else value


def _points(raw: Sequence[Sequence[Any]], step: float) -> tuple[tuple[dt.datetime, ...], tuple[float, ...]]:
    """Samples in time order; a null sample, or a stretch with none, becomes NaN: a gap, never a bridge."""
    pairs = sorted((_time(at), math.nan if value is None else float(value)) for at, value in raw)
    times: list[dt.datetime] = []
    values: list[float] = []
    for at, value in pairs:
        if times and step > 0 and (at - times[-1]).total_seconds() > 1.5 * step:
            times.append(times[-1] + dt.timedelta(seconds=step))
            values.append(math.nan)
        times.append(at)
        values.append(value)
    return tuple(times), tuple(values)


def _label(labels: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in labels.items()) or "total"


def _place(markers: Sequence[dict[str, Any]], xlim: tuple[dt.datetime, dt.datetime]) -> tuple[MarkerLabel, ...]:
    """Each marker's number on the first row where it keeps LABEL_GAP from the numbers already there."""
    width = max((xlim[1] - xlim[0]).total_seconds(), 1.0)
    rows: list[list[float]] = []
    placed = []
    for mark in sorted(markers, key=lambda m: (_time(m["at"]), m.get("number", 0))):
        at = _time(mark["at"])
        x = (at - xlim[0]).total_seconds() / width
        row = next((i for i, xs in enumerate(rows) if all(abs(x - other) >= LABEL_GAP for other in xs)), len(rows))
        if row == len(rows):
            rows.append([])
        rows[row].append(x)
        placed.append(MarkerLabel(int(mark.get("number", len(placed) + 1)), str(mark["kind"]), at, x, row))
    return tuple(placed)


def plans(events: Sequence[ev.Event], markers: Sequence[dict[str, Any]]) -> list[Plan]:
    """What each chart shows: one per signal, the alert's own signal first; every chart on one clock."""
    series = [e for e in events if e.type == ev.EVIDENCE and e.data.get("kind") == "series"]
    if not series:
        return []
    starts = [_time(e.data["start"]) for e in series if e.data.get("start")]
    ends = [_time(e.data["end"]) for e in series if e.data.get("end")]
    every = [_time(at) for e in series for s in e.data.get("series") or [] for at, _ in s.get("points") or []]
    if not (starts or every):
        return []
    xlim = (min(starts or every), max(ends or every))
    labels = _place(markers, xlim)
    by_signal: dict[str, dict[str, ev.Event]] = {}
    for e in series:
        by_signal.setdefault(str(e.data.get("signal")), {})["alerts" if e.data.get("detect") else "detail"] = e
    order = sorted(by_signal, key=lambda s: ("alerts" not in by_signal[s], s))
    out = []
    for signal in order:
        views = by_signal[signal]
        lines: list[Line] = []
        if "detail" in views:
            data = views["detail"].data
            for s in (data.get("series") or [])[:MAX_LINES]:
                times, values = _points(s.get("points") or [], float(data.get("step") or 0))
                if times:
                    lines.append(Line(_label(s.get("labels") or {}), times, values))
        threshold, threshold_label = None, ""
        if "alerts" in views:
            data = views["alerts"].data
            detect = data["detect"]
            aggregate = meaning(signal).aggregate
            for s in (data.get("series") or [])[:1]:
                times, values = _points(s.get("points") or [], float(data.get("step") or 0))
                if times:
                    lines.append(Line(f"as the alert reads it{f' ({aggregate})' if aggregate else ''}",
                                      times, values, alerts_view=True))
            threshold = detect.get("above") if detect.get("above") is not None else detect.get("below")
            held = float(detect.get("for") or 0)
            threshold_label = f"alert: {detect.get('condition')}" + (f" for {format_duration(held)}" if held else "")
        if not any(not all(math.isnan(v) for v in line.values) for line in lines):
            continue
        what = meaning(signal)
        words = what.what.replace("`", "")  # a PNG title shows Markdown's backticks as they are
        title = f"{words[:1].upper()}{words[1:]} — {signal}" if words else signal
        out.append(Plan(signal, f"{_safe_name(signal)}.png", title, what.unit, tuple(lines), xlim, labels,
                        None if threshold is None else float(threshold), threshold_label))
    return out


def draw(plan: Plan) -> bytes:
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    from matplotlib import dates as mdates
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 3.4), dpi=100)
    axes = figure.add_subplot()
    for line in plan.lines:
        if line.alerts_view:
            axes.plot(line.times, line.values, linewidth=2.2, color=ALERTS_LINE_COLOR, label=line.label, zorder=3)
        else:
            axes.plot(line.times, line.values, linewidth=1.2, label=line.label, zorder=2)
    if plan.threshold is not None:
        axes.axhline(plan.threshold, color=THRESHOLD_COLOR, linestyle="--", linewidth=1.6, zorder=4,
                     label=plan.threshold_label)
    if plan.marker_labels:
        # Room above the data for the rows of marker numbers, so they never sit on a line.
        low, high = axes.get_ylim()
        rows = 1 + max(mark.row for mark in plan.marker_labels)
        axes.set_ylim(low, low + (high - low) / max(1 - (0.04 + LABEL_ROW * rows), 0.3))
    for mark in plan.marker_labels:
        color, style = MARK_STYLE.get(mark.kind, ("#555555", ":"))
        axes.axvline(mark.at, color=color, linestyle=style, linewidth=1, zorder=1)
        x = min(max(mark.x, 0.012), 0.988)  # a marker at the window's edge keeps its number inside
        axes.annotate(str(mark.number), xy=(x, 0.97 - LABEL_ROW * mark.row), xycoords="axes fraction",
                      fontsize=7, ha="center", va="top", color="white", zorder=5,
                      bbox={"boxstyle": "circle,pad=0.2", "facecolor": color, "edgecolor": "none"})
    axes.set_xlim(plan.xlim[0], plan.xlim[1])
    axes.set_title(plan.title, fontsize=10)
    axes.set_ylabel(plan.ylabel, fontsize=8)
    axes.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=dt.timezone.utc))
    axes.set_xlabel("UTC (numbered markers: see the list below the charts)", fontsize=8)
    axes.tick_params(labelsize=8)
    axes.grid(True, alpha=0.3)
    if len(plan.lines) > 1 or plan.threshold is not None:
        axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    buffer = io.BytesIO()
    # A fixed Software tag and no timestamp keep the bytes stable for the same journal.
    figure.savefig(buffer, format="png", metadata={"Software": "runbook"}, bbox_inches="tight")
    return buffer.getvalue()


def draw_all(events: Sequence[ev.Event], markers: Sequence[dict[str, Any]]) -> list[Chart]:
    return [Chart(plan.signal, plan.filename, draw(plan), plan.title) for plan in plans(events, markers)]
