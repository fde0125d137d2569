"""Where the bundled playbooks and report templates are: the top of the checkout, or inside the wheel.

Operators edit them at the top of the repository (`playbooks/`, `templates/`); the build maps those
folders into the package (pyproject's package-dir), so an installed wheel has them beside the code.
"""

from __future__ import annotations

from pathlib import Path

from runbook.errors import RunbookError

PACKAGE = Path(__file__).resolve().parents[1]  # runbook/: the wheel carries the bundled folders there
FOLDERS = ("playbooks", "templates")


def folder(name: str) -> Path:
    """The bundled folder `name`: inside the installed package, else at the top of the checkout.

    A wheel puts it at runbook/<name>; an editable install or a plain checkout runs the package from
    the repository, whose top level holds it.
    """
    if name not in FOLDERS:
        raise ValueError(f"no bundled folder {name!r}; there are {', '.join(FOLDERS)}")
    for candidate in (PACKAGE / name, PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise RunbookError(f"the bundled {name} are missing: neither {PACKAGE / name} nor {PACKAGE.parent / name} "
                            "exists; reinstall runbook")
