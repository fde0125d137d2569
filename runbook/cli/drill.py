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
@click.option("--from", "from_incident", default=None, metavar="INCIDENT",
              help="Record INCIDENT (an id from `runbook incidents`, or a journal path) as a scenario and replay it.")
@click.option("--file", "-f", "scenario_file", default=None, type=click.Path(dir_okay=False), metavar="FILE",
              help="With --from: where the scenario is written (default: scenario.yaml beside the journal).")
@click.option("--record-only", is_flag=True, help="With --from: write the scenario; do not replay it.")
@click.option("--playbook", "playbook_file", default=None, type=click.Path(exists=True, dir_okay=False),
              metavar="PATH", help="Run this playbook file instead of the one the scenario names (a change tried "
                                   "on an incident you had).")
@output_option
def drill(scenario: str | None, list_: bool, yes: bool, dry_run: bool, operator_name: str | None,
          from_incident: str | None, scenario_file: str | None, record_only: bool, playbook_file: str | None,
          output: str) -> None:
    """Run the playbook of SCENARIO against a simulated world on virtual time.

    With --from INCIDENT, the incident's journal (its signal readings, the diagnostics' answers, the
    workload as it was) is first recorded as a scenario file, which `runbook drill FILE` replays again;
    what the journal did not hold is listed in the file, never made up.
    """
    from pathlib import Path

    from runbook.sim import scenario as scenarios

    if from_incident is not None:
        if scenario:
            raise click.UsageError("give a SCENARIO or --from INCIDENT, not both")
        scenario = _record(from_incident, scenario_file, output)
        if record_only:
            return
    elif scenario_file or record_only:
        raise click.UsageError("--file and --record-only go with --from INCIDENT")

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
        result = run_drill(scenario, state=state, playbook_file=Path(playbook_file) if playbook_file else None,
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


def _record(incident: str, out: str | None, output: str) -> str:
    """The incident recorded as a scenario file (its path); what the journal lacked said on stderr."""
    from pathlib import Path

    from runbook.cli.state import state_directory
    from runbook.drill.record import record_file
    from runbook.errors import InvalidInput
    from runbook.record.journal import incident_dir

    journal = Path(incident)
    name = None
    if not journal.is_file():
        state = state_directory(create=False)
        journal = incident_dir(state, incident) / "journal.jsonl"
        name = incident
        if not journal.is_file():
            raise InvalidInput(f"no incident {incident!r} in {state} (see `runbook incidents`)")
    target = Path(out) if out else journal.parent / "scenario.yaml"
    written, recorded = record_file(journal, target, incident=name)
    err = stderr_console()
    err.print(f"recorded {recorded.recorded.incident} as {written}", markup=False, highlight=False)
    for title, items in (("not in the journal", recorded.recorded.missing), ("assumed", recorded.recorded.assumed)):
        for item in items:
            err.print(f"  {title}: {item}", markup=False, highlight=False)
    return str(written)
