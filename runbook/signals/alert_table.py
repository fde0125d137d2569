"""The bundled table of alert conditions: the SOP signal-table rows no playbook detects itself.

Each row names a signal, a bound, a `for:` window, the labels one alert is raised per, and the
playbook that handles it; `runbook triage` evaluates the rows and `runbook rules` exports them.
"""

from __future__ import annotations

import importlib.resources
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import pydantic

from runbook.errors import InvalidInput
from runbook.model.duration import Duration
from runbook.signals import promql
from runbook.signals.catalog import Catalog

TABLE_FILE = "alerts.yaml"  # beside the profiles, but not one (catalog.bundled_profiles leaves it out)
ALERT_NAME = re.compile(r"^[A-Z][A-Za-z0-9]{2,63}$")
PLAYBOOK_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


class AlertRow(pydantic.BaseModel):
    """One alert condition: `signal` (or the first of a list the profile has) above/below a bound."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    alert: str
    signal: str | list[str]
    above: float | None = None
    below: float | None = None
    for_: Duration = pydantic.Field(0.0, alias="for")
    by: list[str] = []
    needs: list[str] = []  # catalog params the row cannot be evaluated without
    severity: Literal["P1", "P2", "P3", "P4"] = "P2"
    playbook: str
    summary: str = pydantic.Field(min_length=1)
    description: str = ""

    @pydantic.field_validator("alert")
    @classmethod
    def _alert(cls, value: str) -> str:
        if not ALERT_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not an alert name in CamelCase, such as VllmKvCacheHigh")
        return value

    @pydantic.field_validator("signal")
    @classmethod
    def _signal(cls, value: str | list[str]) -> str | list[str]:
        for name in [value] if isinstance(value, str) else value:
            if not promql.SIGNAL_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a signal name (letters, digits, '_' and ':')")
        if isinstance(value, list) and not value:
            raise ValueError("give at least one signal")
        return value

    @pydantic.field_validator("by", "needs")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        for name in value:
            promql.check_label_name(name)
        return value

    @pydantic.field_validator("playbook")
    @classmethod
    def _playbook(cls, value: str) -> str:
        if not PLAYBOOK_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not a playbook name (lower case letters, digits and '-')")
        return value

    @pydantic.model_validator(mode="after")
    def _one_bound(self) -> "AlertRow":
        if (self.above is None) == (self.below is None):
            raise ValueError("give exactly one of `above` or `below`")
        return self

    def signal_in(self, catalog: Catalog) -> str | None:
        """The signal this row reads in `catalog`: the first of its list the profile has; None if none."""
        names = [self.signal] if isinstance(self.signal, str) else self.signal
        return next((n for n in names if n in catalog.signals), None)

    def missing_params(self, catalog: Catalog) -> list[str]:
        return [n for n in self.needs if catalog.values.get(n) is None]

    def holds(self, value: float) -> bool:
        return value > self.above if self.above is not None else value < self.below  # type: ignore[operator]

    def describe(self, signal: str) -> str:
        op, bound = (">", self.above) if self.above is not None else ("<", self.below)
        return f"{signal} {op} {bound:g}"


class AlertTable(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    alerts: list[AlertRow]

    @pydantic.field_validator("alerts")
    @classmethod
    def _unique(cls, rows: list[AlertRow]) -> list[AlertRow]:
        seen = [r.alert for r in rows]
        doubled = sorted({a for a in seen if seen.count(a) > 1})
        if doubled:
            raise ValueError(f"alert name(s) {', '.join(doubled)} appear more than once")
        return rows


def table_path() -> Path:
    return Path(str(importlib.resources.files("runbook.signals") / TABLE_FILE))


def load_alert_table(path: Path | None = None) -> list[AlertRow]:
    """The rows of the table (the bundled one by default); InvalidInput listing every problem, located."""
    from runbook.files.problems import problems_from_validation_error
    from runbook.files.yamlsource import load_yaml, read_yaml_text

    path = path or table_path()
    label = "<bundled>/signals/" + TABLE_FILE if path == table_path() else str(path)
    try:
        text = read_yaml_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read the alert table {label}: {exc}") from None
    doc = load_yaml(text, file=label, kind="alert table")
    problems = list(doc.problems)
    if not problems:
        try:
            return list(AlertTable.model_validate(doc.data if doc.data is not None else {}).alerts)
        except pydantic.ValidationError as exc:
            problems = problems_from_validation_error(exc, file=label, positions=doc.positions, model=AlertTable)
    raise InvalidInput(f"the alert table {label} is invalid ({len(problems)} problem(s)):\n"
                       + "\n".join(p.format() for p in sorted(problems)))


def unknown_signals(rows: Sequence[AlertRow], catalog: Catalog) -> list[str]:
    """The rows none of whose signals the catalog has, as `Alert (signal)`."""
    return [f"{r.alert} ({r.signal if isinstance(r.signal, str) else ' or '.join(r.signal)})"
            for r in rows if r.signal_in(catalog) is None]
