"""The only place that builds rich consoles and prints JSON documents.

Data goes to stdout, progress and prompts to stderr; `--output json` prints exactly one JSON
document on stdout, with no colour.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

output_option = click.option("--output", "-o", "output", type=click.Choice(["text", "json"]), default="text",
                             show_default=True, help="text for people, json for tools (one document on stdout).")


def stderr_console():
    from rich.console import Console

    # soft_wrap: a long line stays one line in logs and pipes instead of breaking at 80 columns.
    return Console(stderr=True, highlight=False, soft_wrap=True)


def stdout_console():
    from rich.console import Console

    return Console(highlight=False)


def print_columns(headers: list[str], rows: list[list[str]]) -> None:
    """A plain table on stdout, columns padded to their widest cell: no rich import, never wrapped."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]
    for row in (headers, *rows):
        click.echo("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())


def print_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()
