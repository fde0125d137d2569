"""Checked field types shared by the actions' params models.

Every value that may come from an alert or a template is checked here before it can reach a
selector, PromQL or a command line.
"""

from __future__ import annotations

import re
from typing import Annotated

import pydantic

from runbook.model.patterns import checked_regex
from runbook.actions import base
from runbook.model.registry import METRIC_SIGNAL

_SIGNAL = re.compile(r"^[A-Za-z_][A-Za-z0-9_:]{0,127}$")
_LABEL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9_.:/@+-]{0,253}$")
SIGNALS = ("KILL", "TERM", "INT", "HUP", "QUIT", "USR1", "USR2")


def _signal_name(value: str) -> str:
    if not _SIGNAL.fullmatch(value):
        raise ValueError(f"{value!r} is not a signal name (letters, digits, '_' and ':')")
    return value


def _prom_labels(value: dict[str, str]) -> dict[str, str]:
    for key, item in value.items():
        if not _LABEL.fullmatch(key):
            raise ValueError(f"{key!r} is not a Prometheus label name")
        if not isinstance(item, str) or not _LABEL_VALUE.fullmatch(item):
            raise ValueError(f"label {key}={item!r} has characters not allowed in a matcher value")
    return value


def _label_names(value: list[str]) -> list[str]:
    for key in value:
        if not _LABEL.fullmatch(key):
            raise ValueError(f"{key!r} is not a Prometheus label name")
    return value


def _unix_signal(value: str) -> str:
    name = value.upper().removeprefix("SIG")
    if name not in SIGNALS:
        raise ValueError(f"signal {value!r} is not one of {', '.join(SIGNALS)}")
    return name


def _regex(value: str) -> str:
    if re.compile(checked_regex(value)).search("") is not None:
        raise ValueError(f"pattern {value!r} matches everything; make it specific")
    return value


SignalName = Annotated[str, pydantic.AfterValidator(_signal_name), METRIC_SIGNAL]
PromLabels = Annotated[dict[str, str], pydantic.AfterValidator(_prom_labels)]
LabelNames = Annotated[list[str], pydantic.AfterValidator(_label_names)]
Selector = Annotated[str, pydantic.AfterValidator(lambda v: (base.parse_selector(v), v)[1])]
WorkloadRef = Annotated[str, pydantic.AfterValidator(lambda v: (base.parse_workload(v), v)[1])]
K8sName = Annotated[str, pydantic.AfterValidator(lambda v: base.check_name(v))]
UnixSignal = Annotated[str, pydantic.AfterValidator(_unix_signal)]
Pattern = Annotated[str, pydantic.AfterValidator(_regex)]
Argv = Annotated[list[str], pydantic.Field(min_length=1)]


def check_flag_change(factor: float | None, value: float | None, floor: float | None,
                      ceiling: float | None) -> None:
    """A flag change (`k8s.set_arg`, `compose.set_arg`): exactly one of `factor` or `value`, and
    bounds that leave room for a value. ValueError says which is wrong."""
    if (factor is None) == (value is None):
        raise ValueError("give exactly one of `factor` or `value`")
    if floor is not None and ceiling is not None and floor > ceiling:
        raise ValueError(f"floor {floor:g} is above ceiling {ceiling:g}")
