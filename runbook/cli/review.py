"""`runbook review`: the weekly ops review, read from the journals in the state directory.

Text for the terminal, JSON for tools, or one HTML file with a chart per trend; drills are counted
apart from real incidents, and a journal that cannot be read is named, never silently left out.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import click

from runbook.cli.output import FormatChoice, print_json, stderr_console
from runbook.errors import RunbookError


@click.command()
@click.option("--since", "since_text", default="7d", show_default=True, metavar="TIME",
              help="The window's start: how long ago (7d, 30d), ISO 8601 or unix seconds; it ends now.")
@click.option("--output", "-o", "fmt", type=FormatChoice(["text", "json", "html"]), default="text", show_default=True,
              help="text for people, json for tools, html for one file with the charts inside.")
@click.option("--out-file", "-f", "out", default=None, metavar="PATH",
              help="Where to write it (default: stdout; for html, review.html in the current directory).")
@click.option("--drills", "drills_only", is_flag=True,
              help="Review the drills instead of the real incidents (a game day's review).")
def review(since_text: str, fmt: str, out: str | None, drills_only: bool) -> None:
    """The ops review of the incidents that ran since --since: per playbook and severity, the times to
    detect, mitigate and resolve, which actions resolved and which were rolled back or escalated, the
    targets hit again, and the changes still in doubt.

    Times run from the alert's start (Alertmanager's startsAt, else its arrival): to detect is to the
    incident's first journal line, to mitigate to the first verify that held after a change, to resolve
    to the run's resolved end.
    """
    from runbook.cli.incidents import _since
    from runbook.cli.state import state_directory
    from runbook.record.journal import journal_paths
    from runbook.reporting import review as reviews
    from runbook.reporting.review_facts import from_journal

    since = _since(since_text)
    until = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    if since > until:
        raise click.BadParameter(f"{since_text!r} is in the future; give a time before now", param_hint="--since")
    state = state_directory(create=False)
    facts, unreadable = [], []
    for path in journal_paths(state, modified_since=since):  # a journal last written before the window ran before it
        try:
            facts.append(from_journal(path))
        except OSError as exc:
            unreadable.append(f"{path}: {exc.strerror or exc}")
    for line in unreadable:
        stderr_console().print(f"warning: cannot read {line}", markup=False)
    document = reviews.build(facts, since=since, until=until, unreadable=unreadable, drills_only=drills_only)
    if fmt == "json":
        if out in (None, "-"):
            print_json(document)
            return
        import json

        _write(Path(out), json.dumps(document, indent=2, ensure_ascii=False) + "\n")
        return
    from runbook.reporting import review_render

    if fmt == "text":
        text = review_render.text(document)
        if out in (None, "-"):
            click.echo(text, nl=False)
        else:
            _write(Path(out), text)
        return
    page = review_render.html(document)
    if out == "-":
        click.echo(page, nl=False)
        return
    click.echo(str(_write(Path(out or "review.html"), page)))


def _write(target: Path, text: str) -> Path:
    from runbook.record import safe_fs

    try:
        safe_fs.write_private(safe_fs.private_dir(target.parent) / target.name, text.encode("utf-8"))
    except OSError as exc:
        raise RunbookError(f"cannot write the review {target}: {safe_fs.reason(exc)}") from None
    return target
