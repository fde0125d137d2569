"""`runbook incidents` and `runbook rca`: what happened, read back from the journals.

Both read the state directory only; a torn or damaged line of a journal is skipped with a warning.
Incidents are listed newest first by when they ran, one plain line each, so an id is never wrapped.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import click

from runbook.cli.complete import incident_ids
from runbook.cli.output import FormatChoice, output_option, print_columns, print_json, stderr_console
from runbook.errors import InvalidInput, RunbookError


def ran_at(summary) -> dt.datetime | None:
    """When an incident ran, by the wall clock: a drill's events carry the scenario's virtual time,
    so for a drill it is when its journal was last written."""
    from runbook.record.journal import DRILL_PREFIX

    if summary.id.startswith(DRILL_PREFIX) or summary.started is None:
        try:
            return dt.datetime.fromtimestamp(os.stat(summary.path).st_mtime, dt.timezone.utc).replace(microsecond=0)
        except OSError:
            return summary.started
    return summary.started


def _since(text: str | None) -> dt.datetime | None:
    from runbook.cli.triage import parse_at

    if text is None:
        return None
    try:
        return parse_at(text)
    except click.BadParameter as exc:
        raise click.BadParameter(exc.message, param_hint="--since") from None


@click.command()
@click.option("--since", "since_text", default=None, metavar="TIME",
              help="Only incidents that ran since TIME: ISO 8601, unix seconds, or how long ago (2h, 7d).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many, the newest.")
@click.option("--no-drills", is_flag=True, help="Leave out drills (ids starting drill-).")
@output_option
def incidents(since_text: str | None, limit: int | None, no_drills: bool, output: str) -> None:
    """List incidents, newest first by when they ran: id, playbook, ran (UTC), outcome."""
    from runbook.cli.state import state_directory
    from runbook.record.journal import DRILL_PREFIX, list_incidents

    since = _since(since_text)
    state = state_directory(create=False)
    found = list_incidents(state)
    for warning in (w for i in found for w in i.warnings):
        stderr_console().print(f"warning: {warning}", markup=False)
    oldest = dt.datetime.min.replace(tzinfo=dt.timezone.utc)
    rows = sorted(((i, ran_at(i)) for i in found), key=lambda row: (row[1] or oldest, row[0].id), reverse=True)
    if no_drills:
        rows = [(i, ran) for i, ran in rows if not i.id.startswith(DRILL_PREFIX)]
    if since is not None:
        rows = [(i, ran) for i, ran in rows if ran is not None and ran >= since]
    rows = rows[:limit] if limit else rows
    if output == "json":
        print_json([{"id": i.id, "playbook": i.playbook, "started": i.started.isoformat() if i.started else None,
                     "ran": ran.isoformat() if ran else None, "drill": i.id.startswith(DRILL_PREFIX),
                     "outcome": i.outcome, "journal": str(i.path)} for i, ran in rows])
        return
    if not rows:
        since_note = f" since {since:%Y-%m-%d %H:%M:%S} UTC" if since is not None else ""
        click.echo(f"no incidents in {state}{since_note}", err=True)
        return
    # Plain columns, never wrapped: an id is copied whole from the terminal.
    print_columns(["id", "playbook", "ran (UTC)", "outcome"],
                  [[i.id, i.playbook or "-", f"{ran:%Y-%m-%d %H:%M:%S}" if ran else "-", i.outcome or "-"]
                   for i, ran in rows])


@click.command()
@click.argument("incident", shell_complete=incident_ids)
@click.option("--output", "-o", "fmt", type=FormatChoice(["md", "html"]), default=None,
              help="The report's format [default: md]: Markdown links its charts (PNG files beside it); HTML is one "
                   "file with the charts inside.")
@click.option("--format", "legacy_fmt", type=click.Choice(["md", "html"]), default=None, hidden=True)
@click.option("--out-file", "-f", "out", default=None, metavar="PATH",
              help="Where to write the report (default: rca.md or rca.html in the incident's folder; - for stdout).")
@click.option("--out", "legacy_out", default=None, hidden=True)
@click.option("--template", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A Jinja2 template to use instead of the bundled one.")
@click.option("--force", is_flag=True,
              help="Overwrite the report even where what people wrote in it cannot be carried over.")
def rca(incident: str, fmt: str | None, legacy_fmt: str | None, out: str | None, legacy_out: str | None,
        template: Path | None, force: bool) -> None:
    """Write the RCA report of INCIDENT (an id from `runbook incidents`, or a journal path).

    Written again over an earlier report, it keeps what people wrote between the report's
    `<!-- runbook:human begin NAME -->` and `<!-- runbook:human end NAME -->` markers; a report whose
    text cannot be carried over that way is left as it is unless --force is given.
    """
    from runbook.cli.state import state_directory
    from runbook.record.journal import incident_dir, read_journal
    from runbook.reporting.rca import render, write_report

    # --format and --out are the names of before -o/-f followed kubectl; they still work.
    if fmt and legacy_fmt and fmt != legacy_fmt:
        raise click.UsageError(f"-o {fmt} and --format {legacy_fmt} disagree; give one (-o)")
    if out and legacy_out and out != legacy_out:
        raise click.UsageError(f"-f {out} and --out {legacy_out} disagree; give one (-f)")
    fmt = fmt or legacy_fmt or "md"
    out = out or legacy_out
    path = Path(incident)
    if not path.is_file():
        state = state_directory(create=False)
        path = incident_dir(state, incident) / "journal.jsonl"
        if not path.is_file():
            raise InvalidInput(f"no incident {incident!r} in {state} (see `runbook incidents`)")
    read = read_journal(path)
    for warning in read.warnings:
        stderr_console().print(f"warning: {warning}", markup=False)
    if not read.events:
        raise InvalidInput(f"{path} holds no events")
    if out == "-":
        # Markdown on stdout cannot carry chart files; HTML carries them inline.
        click.echo(render(read.events, fmt=fmt, template=template, with_charts=fmt == "html").text, nl=False)
        return
    target = Path(out) if out else path.parent / f"rca.{fmt}"
    earlier = None if force else _earlier_report(target)
    if earlier is None:
        written = write_report(path, target, fmt=fmt, template=template)
    else:
        from runbook.reporting.human_sections import carry_over

        report = render(read.events, fmt=fmt, template=template)
        merged = carry_over(earlier, report.text, where=str(target))  # refused before anything is written
        written = _write(target, merged.text, report.charts if fmt == "md" else ())
        if merged.kept:
            click.echo(f"kept what people wrote in {target.name}: {', '.join(merged.kept)}", err=True)
    click.echo(str(written))


def _earlier_report(target: Path) -> str | None:
    """The text of the report already at `target`, or None when there is none; never read through a link."""
    import os

    from runbook.record import safe_fs

    try:
        fd = safe_fs.open_private(target, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RunbookError(f"cannot read the earlier report {target}: {safe_fs.reason(exc)}") from None
    with os.fdopen(fd, "rb") as file:
        data = file.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{target} is not UTF-8 text, so what people wrote in it cannot be carried over; pass "
                           "--force to overwrite it, or write the report elsewhere with -f FILE") from None


def _write(target: Path, text: str, charts) -> Path:
    """The report and its charts (beside it, as `write_report` places them), 0600, never through a link."""
    from runbook.record import safe_fs
    from runbook.reporting.rca import CHART_DIR

    try:
        safe_fs.write_private(safe_fs.private_dir(target.parent) / target.name, text.encode("utf-8"))
        if charts:
            folder = safe_fs.private_dir(target.parent / CHART_DIR)
            for chart in charts:
                safe_fs.write_private(folder / chart.filename, chart.png)
    except OSError as exc:
        raise RunbookError(f"cannot write the report {target}: {safe_fs.reason(exc)}") from None
    return target
