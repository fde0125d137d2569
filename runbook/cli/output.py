"""The only place that builds rich consoles and prints JSON documents.

What people read (data, a run's progress) goes to stdout; errors, warnings and prompts to stderr.
`--output json` prints exactly one JSON document on stdout, with no colour. NO_COLOR (set and not
empty, https://no-color.org) drops every style, bold and dim too. A stream that closes (`| head`, a
hung-up terminal) falls silent.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from runbook.cli.streams import write_or_fall_silent

class FormatChoice(click.Choice):
    """A format for `-o/--output`; a value that looks like a destination says `-f/--out-file` takes that."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and value not in self.choices and (value == "-" or "/" in value or "." in value):
            self.fail(f"{value!r} is not a format: -o is the report's format ({' or '.join(self.choices)}), as in "
                      f"kubectl; give the destination with -f/--out-file {value}", param, ctx)
        return super().convert(value, param, ctx)


output_option = click.option("--output", "-o", "output", type=click.Choice(["text", "json"]), default="text",
                             show_default=True, help="text for people, json for tools (one document on stdout).")


def _styles() -> dict[str, Any]:
    from runbook import settings

    # rich alone keeps bold, dim and underline under NO_COLOR; no colour system means no escape codes at all.
    return {"color_system": None} if settings.environment().get("NO_COLOR") else {}


def stderr_console():
    """Errors, warnings and prompts."""
    from runbook.cli.quiet_console import QuietOnCloseConsole

    # soft_wrap: a long line stays one line in logs and pipes instead of breaking at 80 columns.
    return QuietOnCloseConsole(stderr=True, highlight=False, soft_wrap=True, **_styles())


def stdout_console():
    """Data: tables, lists, descriptions."""
    from runbook.cli.quiet_console import QuietOnCloseConsole

    return QuietOnCloseConsole(highlight=False, **_styles())


def progress_console():
    """A run's progress on stdout, one line per event even past the terminal's width (logs, pipes)."""
    from runbook.cli.quiet_console import QuietOnCloseConsole

    return QuietOnCloseConsole(highlight=False, soft_wrap=True, **_styles())


def print_columns(headers: list[str], rows: list[list[str]]) -> None:
    """A plain table on stdout, columns padded to their widest cell: no rich import, never wrapped."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]
    for row in (headers, *rows):
        click.echo("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())


def print_json(document: Any) -> None:
    # A reader that went away (`| head`) does not change the exit code: that is the run's.
    write_or_fall_silent(sys.stdout, json.dumps(document, indent=2, ensure_ascii=False, default=str) + "\n")
