"""The `runbook` command: a click group whose subcommands load only when they are called.

Keeping heavy imports out of `runbook --help` is what makes the first line appear fast at 3am.
Errors become one clear line and an exit code here; tracebacks appear only with `--debug`; a
closed output stream ends a command silently.
"""

from __future__ import annotations

import errno
import importlib
import sys
from typing import Any

import click

from runbook import __version__
from runbook.cli.streams import is_closed, silence_standard_streams

# A closed pipe (`| head`) or a terminal that hung up.
CLOSED_STREAM = (errno.EPIPE, errno.EIO)

COMMANDS = {
    "validate": ("runbook.cli.catalog", "validate", "Check playbooks; every problem with file:line:col and a fix."),
    "list": ("runbook.cli.catalog", "list_playbooks", "Show the playbooks: severity, matching alerts, detection."),
    "actions": ("runbook.cli.catalog", "actions", "List every action with its kind, docs and params."),
    "drill": ("runbook.cli.drill", "drill", "Run a playbook against a simulated incident, end to end."),
    "incidents": ("runbook.cli.incidents", "incidents", "List incidents from the journals in the state directory."),
    "rca": ("runbook.cli.incidents", "rca", "Write the RCA report of an incident from its journal."),
    "review": ("runbook.cli.review", "review", "The ops review of the last days' incidents: times, actions, repeats."),
    "run": ("runbook.cli.run", "run", "Run a playbook against the real cluster, guarded and journaled."),
    "triage": ("runbook.cli.triage", "triage", "Ask Prometheus what is wrong and which playbook fits."),
    "signals": ("runbook.cli.triage", "signals", "Show the signal catalog in effect (and check it)."),
    "rules": ("runbook.cli.triage", "rules", "Export the playbooks' detect conditions as alerting rules."),
    "serve": ("runbook.cli.serve", "serve", "Receive PagerDuty and Alertmanager webhooks and run playbooks."),
    "approve": ("runbook.cli.serve", "approve", "Approve a proposed change of a webhook run; the server re-checks every guard."),
    "version": ("runbook.cli.shell", "version", "Show runbook's version."),
    "completion": ("runbook.cli.shell", "completion", "Print the shell completion script (bash, zsh, fish)."),
    "advise": ("runbook.cli.advise", "advise", "Check a vLLM workload's launch flags against the SOP (manifest or live)."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[name]
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Help lists commands from the table above, so `--help` imports none of them.
        rows = [(name, COMMANDS[name][2]) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        from runbook.errors import RunbookError

        try:
            return super().invoke(ctx)
        except RunbookError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            _say(f"Error: {exc}")
            ctx.exit(int(exc.exit_code))
        except KeyboardInterrupt:
            _say("Interrupted; the journal holds everything up to here.")
            ctx.exit(130)
        except OSError as exc:
            if exc.errno not in CLOSED_STREAM or not any(is_closed(s) for s in (sys.stdout, sys.stderr)):
                raise
            # A reader that went away (`runbook list | head -1`): no traceback, and no second
            # failure when Python flushes the closed stream at exit.
            silence_standard_streams()
            ctx.exit(1)


def _say(message: str) -> None:
    """One line on stderr; a stderr that is gone changes neither the exit code nor anything else."""
    try:
        click.echo(message, err=True)
    except OSError:
        silence_standard_streams()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "RUNBOOK"})
@click.version_option(__version__, prog_name="runbook")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Incident response for vLLM serving: playbooks, guarded fixes, journals, RCA.

    State (journals, locks) lives in RUNBOOK_STATE_DIR (default ~/.local/state/runbook), which
    must be yours and writable by you alone (chmod 700).
    Set RUNBOOK_KILL_SWITCH=1, or create the file KILL in the state directory, to refuse
    every remediation. Exit codes: 0 ok, 1 failed, 2 usage, 3 invalid input, 4 refused.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
