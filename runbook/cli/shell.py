"""`runbook version` and `runbook completion SHELL`: what is installed, and tab completion for it.

Completion covers commands, options and the names people type (playbooks, scenarios, incidents,
actions); `eval "$(runbook completion bash)"` in ~/.bashrc turns it on (zsh and fish alike).
"""

from __future__ import annotations

import platform

import click

from runbook.cli.output import output_option, print_json

SHELLS = ("bash", "zsh", "fish")


@click.command()
@output_option
def version(output: str) -> None:
    """Show runbook's version (and Python's)."""
    from runbook import __version__

    if output == "json":
        print_json({"runbook": __version__, "python": platform.python_version()})
    else:
        click.echo(f"runbook {__version__}")


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the completion script for SHELL; e.g. `eval "$(runbook completion bash)"` in ~/.bashrc.

    \b
    bash:  eval "$(runbook completion bash)"                          (~/.bashrc)
    zsh:   eval "$(runbook completion zsh)"                           (~/.zshrc)
    fish:  runbook completion fish > ~/.config/fish/completions/runbook.fish
    """
    from click.shell_completion import get_completion_class

    from runbook.cli import main

    script = get_completion_class(shell)(main, {}, "runbook", "_RUNBOOK_COMPLETE").source()  # type: ignore[misc]
    click.echo(script)
