"""The state directory a command works in, resolved and checked in this one place.

Refused with exit 2 and the fix when others could steer it; from then on, until the command ends,
whatever the process creates is private to its user: reports, charts, SQLite and its WAL included.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from runbook import settings

PRIVATE_UMASK = 0o077
_UMASK_SET = "runbook.private_umask"


def state_directory(*, create: bool = True) -> Path:
    """`create=False` for commands that only read: a missing directory is left missing."""
    state = settings.checked_state_dir(create=create)
    _private_until_the_command_ends()
    return state


def _private_until_the_command_ends() -> None:
    # Writers we do not control (the report's charts, SQLite's WAL) obey only the umask; it is
    # process-wide, so it is put back when the command ends, and a library caller keeps its own.
    context = click.get_current_context(silent=True)
    if context is None:
        return
    root = context.find_root()
    if root.meta.get(_UMASK_SET):
        return
    previous = os.umask(PRIVATE_UMASK)
    root.meta[_UMASK_SET] = True
    root.call_on_close(lambda: os.umask(previous))
