"""Regular expressions written in playbooks, scenarios and config, checked when they are loaded.

One check, so a bad pattern reads the same wherever it was written.
"""

from __future__ import annotations

import re


def checked_regex(value: str, what: str = "") -> str:
    """`value` if it compiles; otherwise a ValueError naming it (as `what`) and the compiler's reason."""
    try:
        re.compile(value)
    except re.error as exc:
        label = f"{what} {value!r}" if what else repr(value)
        raise ValueError(f"{label} is not a valid regular expression: {exc}") from None
    return value
