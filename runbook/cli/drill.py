"""`runbook drill SCENARIO`: a whole incident on a simulated world, from alert to RCA, in seconds.

Shows live progress on stdout (prompts on stderr); `--output json` prints one document on stdout.
The exit code is the run's (0 resolved or dry run, 4 refused, 5 mitigated with capacity reduced, 130
interrupted, 1 otherwise), even when the output pipe closed under it; SIGINT/SIGTERM stop it at a safe
point and roll back, SIGHUP is ignored.
"""

from __future__ import annotations

import click

from runbook.cli.complete import scenario_names
from runbook.cli.output import output_option, print_json, progress_console, stderr_console


@click.command()
@click.argument("scenario", required=False, shell_complete=scenario_names)
@click.option("--list", "list_", is_flag=True, help="List the bundled scenarios.")
@click.option("--yes", "-y", is_flag=True, help="Approve every confirmation prompt (hard guards still apply).")
@click.option("--dry-run", is_flag=True, envvar="RUNBOOK_DRY_RUN", help="Run the diagnostics; apply nothing.")
@click.option("--operator", "operator_name", default=None, help="Name recorded as the approver (default: the local user).")
@output_option
def drill(scenario: str | None, list_: bool, yes: bool, dry_run: bool, operator_name: str | None, output: str) -> None:
    """Run the playbook of SCENARIO against a simulated world on virtual time."""
    from runbook.sim import scenario as scenarios

    if list_:
        found = scenarios.list_scenarios()
        if output == "json":
            print_json([{"name": s.name, "playbook": s.playbook, "expect": s.expect} for s in found])
        else:
            for s in found:
                click.echo(s.name)
        return
    if not scenario:
        raise click.UsageError(f"name a scenario: {', '.join(scenarios.scenario_names())} (or --list)")

    from runbook.cli.live import LiveView
    from runbook.cli.prompt import operator_for
    from runbook.cli.signals import run_signals
    from runbook.cli.state import state_directory
    from runbook.drill.run import check_scenario_name, run_drill
    from runbook.engine.runner import default_operator_name

    check_scenario_name(scenario)  # a misspelled name: before the state directory is touched
    console = progress_console()  # what people read, on stdout; the prompts and errors go to stderr
    state = state_directory()

    def on_start(s, playbook, incident):
        if output == "text":
            console.print(f"[bold]drill[/] {s.name}: {s.description.strip()}", highlight=False)
            console.print(f"[dim]incident {incident}; virtual time starts {s.t0:%Y-%m-%d %H:%M:%S} UTC[/]")

    view = LiveView(console) if output == "text" else None
    with run_signals() as caught:
        result = run_drill(scenario, state=state,
                           operator=operator_for(yes=yes, by=operator_name or default_operator_name(),
                                                 console=stderr_console(), rehearsal=True),
                           dry_run=dry_run, on_event=view, on_progress=view.progress if view else None,
                           on_start=on_start, interrupted=caught.journaled)
    # Both print helpers fall silent on a closed stream: the exit code stays the run's.
    if output == "json":
        print_json(result.to_json())
    else:
        console.print(f"journal: {result.journal}", highlight=False, markup=False)
        console.print(f"report:  {result.report}", highlight=False, markup=False)
    raise SystemExit(result.run.exit_code)
