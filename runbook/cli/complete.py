"""Shell completion of the names people type: playbooks, scenarios, incidents and actions.

Each completer imports what it reads only when the shell asks, and answers nothing rather than fail:
a half-typed command line is no place for an error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import click
from click.shell_completion import CompletionItem


def _quietly(names: Callable[[], Iterable[str]]) -> Callable[[click.Context, click.Parameter, str], list[CompletionItem]]:
    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
        from runbook.errors import RunbookError

        try:
            found = sorted(set(names()))
        except (RunbookError, OSError, ValueError):
            return []
        return [CompletionItem(name) for name in found if name.startswith(incomplete)]

    return complete


def _playbooks() -> Iterable[str]:
    from runbook.loading import validation

    return [path.stem for path in validation.discover(validation.default_paths())]


def _scenarios() -> Iterable[str]:
    from runbook.sim.scenario import scenario_names

    return scenario_names()


def _incidents() -> Iterable[str]:
    from runbook import settings
    from runbook.record.journal import journal_paths

    return [path.parent.name for path in journal_paths(settings.checked_state_dir(create=False))]


def _actions() -> Iterable[str]:
    from runbook.actions import load_builtin

    return load_builtin().names()


playbook_names = _quietly(_playbooks)
scenario_names = _quietly(_scenarios)
incident_ids = _quietly(_incidents)
action_names = _quietly(_actions)
