"""Rendering the RCA report: the context through a Jinja2 template, as Markdown or one HTML file.

Markdown links its charts (PNG files written beside it); HTML carries them inline, so the file
opens offline on its own. A user template replaces the bundled one with `--template FILE`.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import jinja2
from jinja2.sandbox import SandboxedEnvironment
from markupsafe import Markup

from runbook.files import bundled
from runbook.record import safe_fs
from runbook.errors import InvalidInput, RunbookError
from runbook.record.journal import read_journal
from runbook.model import events as ev
from runbook.reporting import charts as chart_drawing
from runbook.reporting.context import build_context

Format = Literal["md", "html"]
CHART_DIR = "charts"


@dataclasses.dataclass(frozen=True)
class Report:
    text: str
    charts: tuple[chart_drawing.Chart, ...]


def _environment(fmt: Format, template: Path | None) -> tuple[jinja2.Environment, str]:
    loaders: list[jinja2.BaseLoader] = [jinja2.FileSystemLoader(str(bundled.folder("templates")))]
    name = f"rca.{fmt}.j2"
    if template is not None:
        if not template.is_file():
            raise InvalidInput(f"template {template} does not exist")
        loaders.insert(0, jinja2.FileSystemLoader(str(template.parent)))
        name = template.name
    env = SandboxedEnvironment(loader=jinja2.ChoiceLoader(loaders), undefined=jinja2.StrictUndefined,
                               autoescape=fmt == "html", keep_trailing_newline=True, trim_blocks=True,
                               lstrip_blocks=True)
    env.filters["cell"] = lambda text: str(text).replace("|", "\\|").replace("\n", " ")
    env.filters["md"] = _inline_markdown if fmt == "html" else str
    return env, name


@functools.lru_cache(maxsize=1)
def _markdown() -> Any:
    from markdown_it import MarkdownIt

    # Inline code, emphasis and backslash escapes only; raw HTML in the text is escaped, never passed.
    return MarkdownIt("zero", {"html": False}).enable(["backticks", "emphasis", "escape"])


def _inline_markdown(text: object) -> Markup:
    """The journal's Markdown-flavoured text (`--max-model-len`, **bold**) as HTML, escaped."""
    return Markup(_markdown().renderInline(str(text)))


def render(events: Sequence[ev.Event], *, fmt: Format = "md", template: Path | None = None,
           with_charts: bool = True) -> Report:
    context = build_context(events)
    drawn = chart_drawing.draw_all(events, context["markers"]) if with_charts else []
    if fmt == "html":
        context["charts"] = [{"signal": c.signal, "title": c.title,
                              "src": "data:image/png;base64," + base64.b64encode(c.png).decode()} for c in drawn]
    else:
        context["charts"] = [{"signal": c.signal, "title": c.title, "src": f"{CHART_DIR}/{c.filename}"}
                             for c in drawn]
    env, name = _environment(fmt, template)
    try:
        text = env.get_template(name).render(**context)
    except jinja2.TemplateError as exc:
        where = f" (line {exc.lineno})" if getattr(exc, "lineno", None) else ""
        raise InvalidInput(f"the report template {name} failed{where}: {exc}") from None
    return Report(text, tuple(drawn))


def render_markdown(events: Sequence[ev.Event]) -> str:
    return render(events, fmt="md", with_charts=False).text


def write_report(journal_path: Path, out: Path, *, fmt: Format = "md", template: Path | None = None,
                 with_charts: bool = True) -> Path:
    """Write the report (and, for Markdown, its charts in `charts/` beside it); returns its path."""
    read = read_journal(journal_path)
    report = render(read.events, fmt=fmt, template=template, with_charts=with_charts)
    try:
        safe_fs.write_private(safe_fs.private_dir(out.parent) / out.name, report.text.encode("utf-8"))
        if fmt == "md" and report.charts:
            folder = safe_fs.private_dir(out.parent / CHART_DIR)
            for chart in report.charts:
                safe_fs.write_private(folder / chart.filename, chart.png)
    except OSError as exc:
        raise RunbookError(f"cannot write the report {out}: {safe_fs.reason(exc)}") from None
    return out
