"""The weekly review as people read it: plain text for the terminal, or one HTML file with a chart
per trend (incidents per day, the median time to resolve per day, the outcomes per playbook).

Both render the document `review.build` made; `-o json` prints that document itself.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping
from typing import Any

from runbook.model.duration import format_duration

FATES = (("applied", "applied"), ("resolved", "stayed in a resolved incident"), ("rolled_back", "rolled back"),
         ("undo_failed", "rollback failed"), ("in_doubt", "in doubt"), ("failed", "failed"),
         ("refused", "refused"), ("proposed", "left to a human"), ("escalated", "escalated"))


def _span(times: Mapping[str, Any], moment: str) -> str:
    row = times[moment]
    if not row["count"]:
        return "—"
    return f"{row['median']} (p90 {row['p90']}, n={row['count']})"


def text(review: Mapping[str, Any]) -> str:
    """The review as plain lines, widest facts first; every section says when it has nothing."""
    window = review["window"]
    counted = "drill(s) reviewed" if review["subject"] == "drills" else "incident(s)"
    lines = [f"Review {window['since'][:10]} → {window['until'][:10]} (UTC): {review['incidents']} {counted}"
             + (f", {review['drills']} drill(s) apart" if review["subject"] != "drills" else "")]
    if review["outcomes"]:
        lines.append("Outcomes: " + ", ".join(f"{k} {v}" for k, v in review["outcomes"].items()))
    times = review["times"]
    lines += ["", "Times, from the alert's start (median, p90):",
              f"  to detect (first journal line)  {_span(times, 'detect')}",
              f"  to mitigate (the fix verified)  {_span(times, 'mitigate')}",
              f"  to resolve                      {_span(times, 'resolve')}"]
    lines += ["", "By playbook and severity:"]
    for row in review["by_playbook"] or []:
        outcomes = ", ".join(f"{k} {v}" for k, v in row["outcomes"].items())
        lines.append(f"  {row['playbook']} [{row['severity']}]: {row['incidents']} ({outcomes}); "
                     f"resolve {_span(row['times'], 'resolve')}")
    if not review["by_playbook"]:
        lines.append("  none")
    lines += ["", "Actions:"]
    for row in review["actions"]:
        parts = [f"{row[key]} {words}" for key, words in FATES if row[key]]
        lines.append(f"  {row['action']}: planned {row['planned']}" + (", " + ", ".join(parts) if parts else ""))
    if not review["actions"]:
        lines.append("  none planned")
    lines += ["", "Recurring targets (a change planned in more than one incident):"]
    lines += [f"  {r['target']}: {r['incidents']} incidents ({', '.join(r['playbooks'])}), last {r['last']}"
              for r in review["recurring_targets"]] or ["  none"]
    lines += ["", "Changes still in doubt (check by hand):"]
    lines += [f"  {r['incident']}: {r['action']} on {r['target']} — {r['why']}" for r in review["in_doubt"]] \
        or ["  none"]
    lines += ["", "Escalated:"]
    lines += [f"  {r['incident']} ({r['playbook']}): {r['why']}" for r in review["escalations"]] or ["  none"]
    if review["drills"]:
        lines += ["", "Drills: " + ", ".join(f"{k} {v}" for k, v in review["drill_playbooks"].items())
                  + "; " + ", ".join(f"{k} {v}" for k, v in review["drill_outcomes"].items())]
    if review["damaged"]:
        lines += ["", f"{len(review['damaged'])} journal(s) with unreadable lines (a change may be missing): "
                  + ", ".join(review["damaged"][:5])]
    if review["unreadable"]:
        lines += ["", "Left out, unreadable: " + "; ".join(review["unreadable"][:5])]
    return "\n".join(lines) + "\n"


def _png(draw) -> str:
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 3), dpi=100)
    draw(figure.add_subplot())
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def charts(review: Mapping[str, Any]) -> list[dict[str, str]]:
    """A chart per trend, as inline PNGs: nothing to draw for an empty window."""
    days = review["days"]
    if not review["incidents"]:
        return []
    labels = [d["day"][5:] for d in days]
    step = max(1, len(labels) // 15)

    def per_day(axes) -> None:
        axes.bar(labels, [d["incidents"] - d["not_resolved"] for d in days], color="#27ae60", label="resolved")
        axes.bar(labels, [d["not_resolved"] for d in days], bottom=[d["incidents"] - d["not_resolved"] for d in days],
                 color="#c0392b", label="not resolved")
        axes.set_ylabel("incidents")
        axes.set_xticks(range(0, len(labels), step), labels[::step])
        axes.legend(loc="upper left")

    def resolve(axes) -> None:
        axes.plot(labels, [d["median_resolve_s"] / 60 if d["median_resolve_s"] is not None else float("nan")
                           for d in days], marker="o")
        axes.set_ylabel("median minutes to resolve")
        axes.set_xticks(range(0, len(labels), step), labels[::step])

    def outcomes(axes) -> None:
        rows = review["by_playbook"][:12]
        names = [f"{r['playbook']} [{r['severity']}]" for r in rows]
        kinds = sorted({k for r in rows for k in r["outcomes"]})
        left = [0] * len(rows)
        for kind in kinds:
            values = [r["outcomes"].get(kind, 0) for r in rows]
            axes.barh(names, values, left=left, label=kind)
            left = [a + b for a, b in zip(left, values)]
        axes.invert_yaxis()
        axes.set_xlabel("incidents")
        axes.legend(loc="lower right")

    return [{"title": "Incidents per day", "src": _png(per_day)},
            {"title": "Median time to resolve per day", "src": _png(resolve)},
            {"title": "Outcomes per playbook", "src": _png(outcomes)}]


def html(review: Mapping[str, Any]) -> str:
    """One HTML file that opens offline: the review's tables and its charts inline."""
    import jinja2

    from runbook.files import bundled

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(bundled.folder("templates"))),
                             undefined=jinja2.StrictUndefined, autoescape=True, trim_blocks=True, lstrip_blocks=True)
    env.filters["span"] = _span
    env.filters["duration"] = lambda s: "—" if s is None else format_duration(s)
    return env.get_template("review.html.j2").render(review=review, charts=charts(review), fates=FATES)
