"""The environment, read in this one place, and where runbook keeps its state.

Every module that needs a variable takes an `env` mapping, defaulting to `environment()`.

`RUNBOOK_STATE_DIR` wins; otherwise `$XDG_STATE_HOME/runbook`, otherwise `~/.local/state/runbook`.
The kill switch is `RUNBOOK_KILL_SWITCH=1` or a file named `KILL` in the state directory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from runbook.record import safe_fs

KILL_SWITCH_ENV = "RUNBOOK_KILL_SWITCH"
KILL_SWITCH_FILE = "KILL"


def environment() -> Mapping[str, str]:
    """The process environment: the only place runbook reads it (tests pass their own mapping instead)."""
    return os.environ


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    env = environment() if env is None else env
    if env.get("RUNBOOK_STATE_DIR"):
        return Path(env["RUNBOOK_STATE_DIR"]).expanduser()
    if env.get("XDG_STATE_HOME"):
        return Path(env["XDG_STATE_HOME"]).expanduser() / "runbook"
    return Path.home() / ".local" / "state" / "runbook"


def checked_state_dir(env: Mapping[str, str] | None = None, *, create: bool = True) -> Path:
    """The state directory, created 0700 if missing; UnsafeStateDir (exit 2, with the fix) if others could steer it."""
    return safe_fs.check_state_dir(state_dir(env), create=create)


def kill_switch(state: Path, env: Mapping[str, str] | None = None) -> str | None:
    """Why every remediation is refused right now, or None when the switch is off."""
    env = environment() if env is None else env
    if env.get(KILL_SWITCH_ENV, "").strip().lower() in {"1", "true", "yes", "on"}:
        return f"{KILL_SWITCH_ENV} is set; unset it to allow remediations"
    # Any entry named KILL counts, a dangling link included: when in doubt, stop.
    if os.path.lexists(state / KILL_SWITCH_FILE):
        return f"{state / KILL_SWITCH_FILE} exists; remove it to allow remediations"
    return None
