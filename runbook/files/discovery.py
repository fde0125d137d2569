"""Which playbook files a command reads, and which config file is in effect, without parsing either.

Light on purpose (no pydantic, YAML or Jinja2): `list` and `validate` use it before they know
whether their cached answer (`loading.listing_cache`) still holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from runbook import settings
from runbook.files import bundled
from runbook.errors import InvalidInput

PLAYBOOK_SUFFIXES = (".yaml", ".yml")
CONFIG_ENV = "RUNBOOK_CONFIG"


def bundled_dir() -> Path:
    return bundled.folder("playbooks")


def discover(paths: Iterable[str | Path]) -> list[Path]:
    """Playbook files under the given files and folders, in a stable order."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(sorted(p for p in path.iterdir() if p.suffix in PLAYBOOK_SUFFIXES and p.is_file()))
        else:
            found.append(path)
    return found


def default_paths() -> list[Path]:
    paths = [bundled_dir()]
    local = Path("playbooks")
    if local.is_dir() and local.resolve() != bundled_dir().resolve():
        paths.append(local)
    return paths


def find_config(explicit: str | Path | None = None, env: Mapping[str, str] | None = None) -> Path | None:
    """`--config`, else `$RUNBOOK_CONFIG`, else ./runbook.yaml, else $XDG_CONFIG_HOME/runbook/config.yaml."""
    env = settings.environment() if env is None else env
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise InvalidInput(f"config file {path} does not exist (given with --config)")
        return path
    if env.get(CONFIG_ENV):
        path = Path(env[CONFIG_ENV]).expanduser()
        if not path.is_file():
            raise InvalidInput(f"config file {path} does not exist (given with {CONFIG_ENV})")
        return path
    candidates = [Path("runbook.yaml")]
    base = Path(env["XDG_CONFIG_HOME"]).expanduser() if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    candidates.append(base / "runbook" / "config.yaml")
    return next((p for p in candidates if p.is_file()), None)
