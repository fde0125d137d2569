"""The action registry: `@action` declares a name, a kind and a params model for a function.

The engine always receives a registry explicitly; the default one exists only so that the
built-in action modules can register themselves with a decorator at import time.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from collections.abc import Callable
from typing import Any

import pydantic


class Kind(str, enum.Enum):
    DIAGNOSTIC = "diagnostic"  # read-only: always allowed, runs in dry-run
    REMEDIATION = "remediation"  # changes the world: planned, guarded, confirmed, journaled
    CONTROL = "control"  # flow of the run: verify, note, escalate


class MetricSignal:
    """Marks a params field whose value names a Prometheus signal (not, say, a Unix signal)."""


METRIC_SIGNAL = MetricSignal()


def _marks_signal(annotation: Any) -> bool:
    if METRIC_SIGNAL in getattr(annotation, "__metadata__", ()):
        return True
    return any(_marks_signal(arg) for arg in typing.get_args(annotation))


class ActionParams(pydantic.BaseModel):
    """Base of every action's params: unknown keys are errors, values are immutable."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, defer_build=True)

    @classmethod
    def signal_fields(cls) -> tuple[str, ...]:
        """The fields declared as metric signals (typed `fields.SignalName`): what the report charts."""
        found = cls.__dict__.get("_signal_fields_cache")
        if found is None:
            hints = typing.get_type_hints(cls, include_extras=True)
            found = tuple(name for name in cls.model_fields if _marks_signal(hints.get(name)))
            type.__setattr__(cls, "_signal_fields_cache", found)
        return found


@dataclasses.dataclass(frozen=True)
class ActionSpec:
    name: str
    kind: Kind
    params: type[ActionParams]
    func: Callable[..., Any]
    module: str
    reversible: bool = False  # a remediation whose before-state can be restored

    @property
    def doc(self) -> str:
        return (self.func.__doc__ or "").strip()

    @property
    def summary(self) -> str:
        return self.doc.splitlines()[0] if self.doc else ""


class Registry:
    def __init__(self) -> None:
        self._specs: dict[str, ActionSpec] = {}

    def add(self, spec: ActionSpec) -> None:
        existing = self._specs.get(spec.name)
        if existing is not None and existing.func is not spec.func:
            raise ValueError(f"action {spec.name!r} registered twice: in {existing.module} and {spec.module}")
        self._specs[spec.name] = spec

    def get(self, name: str) -> ActionSpec | None:
        return self._specs.get(name)

    def names(self) -> list[str]:
        return sorted(self._specs)

    def specs(self) -> list[ActionSpec]:
        return [self._specs[n] for n in self.names()]


# The built-in actions register here when their modules are imported: `runbook.actions.load_builtin()`
# imports them all, so this module never imports the actions (they import it).
BUILTIN = Registry()


def action(name: str, *, kind: Kind, params: type[ActionParams], reversible: bool = False,
           registry: Registry | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as action `name`; the function is returned unchanged."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        if not func.__doc__:
            raise ValueError(f"action {name!r} needs a docstring: it is the user-facing catalogue")
        (registry or BUILTIN).add(ActionSpec(name=name, kind=kind, params=params, func=func,
                                              module=func.__module__, reversible=reversible))
        return func

    return decorate
