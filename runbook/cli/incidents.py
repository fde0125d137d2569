"""`runbook incidents` and `runbook rca`: what happened, read back from the journals.

Both read the state directory only; a torn last line of a journal is skipped with a warning.
"""

from __future__ import annotations

from pathlib import Path

import click

from runbook.cli.output import output_option, print_json, stderr_console, stdout_console
from runbook.errors import InvalidInput


@click.command()
@output_option
def incidents(output: str) -> None:
    """List incidents: id, playbook, started, outcome."""
    from runbook import settings
    from runbook.journal import list_incidents

    found = list_incidents(settings.state_dir())
    if output == "json":
        print_json([{"id": i.id, "playbook": i.playbook, "started": i.started.isoformat() if i.started else None,
                     "outcome": i.outcome, "journal": str(i.path)} for i in found])
        return
    if not found:
        stderr_console().print(f"no incidents in {settings.state_dir()}", markup=False)
        return
    from rich.table import Table

    table = Table(show_edge=False, header_style="bold")
    for column in ("id", "playbook", "started (UTC)", "outcome"):
        table.add_column(column, overflow="fold")
    for i in found:
        table.add_row(i.id, i.playbook or "-", i.started.strftime("%Y-%m-%d %H:%M:%S") if i.started else "-",
                      i.outcome or "-")
    stdout_console().print(table)


@click.command()
@click.argument("incident")
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the report here (default: stdout).")
def rca(incident: str, out: Path | None) -> None:
    """Write the RCA report of INCIDENT (an id from `runbook incidents`, or a journal path)."""
    from runbook import settings
    from runbook.journal import incident_dir, read_journal
    from runbook.reporting.rca import render_markdown

    path = Path(incident)
    if not path.is_file():
        path = incident_dir(settings.state_dir(), incident) / "journal.jsonl"
        if not path.is_file():
            raise InvalidInput(f"no incident {incident!r} in {settings.state_dir()} (see `runbook incidents`)")
    read = read_journal(path)
    for warning in read.warnings:
        stderr_console().print(f"warning: {warning}", markup=False)
    text = render_markdown(read.events)
    if out is None:
        click.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")
        stderr_console().print(f"wrote {out}", markup=False)
