"""The playbook as data: steps, guards, what alerts start it and what triage detects.

Frozen pydantic models with unknown keys forbidden; the loader maps their validation errors
back to `file:line:col`. Action params are validated separately, against each action's model.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import pydantic

from runbook.model.duration import Duration
from runbook.model.patterns import checked_regex

SLUG = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _slug(value: str, what: str) -> str:
    if not SLUG.fullmatch(value):
        raise ValueError(f"{what} must be lowercase letters, digits and dashes (like `oom-surge`), found {value!r}")
    return value


class Match(_Strict):
    """Which alerts start this playbook, and how alert labels become params."""

    alerts: tuple[str, ...] = ()  # Alertmanager alertname values
    titles: tuple[str, ...] = ()  # regular expressions on a PagerDuty incident title
    labels: dict[str, str] = {}  # param name <- alert label name

    @pydantic.field_validator("titles")
    @classmethod
    def _titles_compile(cls, titles: tuple[str, ...]) -> tuple[str, ...]:
        for title in titles:
            checked_regex(title, "title pattern")
        return titles


class AppliesWhen(_Strict):
    """Where a playbook applies at all: where this signal's sources have a series with these labels
    (a canary version deployed, a Docker Compose host scraped). Where they have none, triage lists the
    playbook as not applicable here, `because` — neither quiet nor an exporter missing."""

    signal: str
    labels: dict[str, str] = {}  # may hold templates such as "{{ params.namespace }}"
    because: str = pydantic.Field(min_length=1, max_length=200)  # what its absence means, in words


class Detect(_Strict):
    """The condition triage evaluates, and that guards re-check right before acting."""

    signal: str
    above: float | None = None
    below: float | None = None
    for_: Duration = pydantic.Field(0.0, alias="for")
    labels: dict[str, str] = {}  # may hold templates such as "{{ params.namespace }}"
    applies_when: AppliesWhen | None = None

    @pydantic.model_validator(mode="after")
    def _one_bound(self) -> "Detect":
        if (self.above is None) == (self.below is None):
            raise ValueError("give exactly one of `above` or `below`")
        return self

    def holds(self, value: float) -> bool:
        return value > self.above if self.above is not None else value < self.below  # type: ignore[operator]

    def describe(self) -> str:
        op, bound = (">", self.above) if self.above is not None else ("<", self.below)
        return f"{self.signal} {op} {bound:g}"


class Guard(_Strict):
    """Hard limits and prompts around one remediation. `--yes` answers prompts only."""

    confirm: bool = True
    # False: only a person's yes applies it (the prompt, `runbook approve`); never --yes or a webhook
    # policy, which propose it instead. Implies confirm.
    unattended: bool = True
    recheck: bool = True  # re-check the playbook's detect condition right before acting
    lock: bool = True
    cooldown: Duration | None = None  # no second application to the same target within this
    budget_per_hour: int | None = pydantic.Field(3, ge=0)  # applications per target per rolling hour
    min_ready: int | None = pydantic.Field(1, ge=0)  # ready pods that must remain
    max_fraction: float | None = pydantic.Field(None, gt=0, le=1)  # share of a workload's pods touched
    floor: float | None = None  # lowest value the action may set (replicas, a flag)
    ceiling: float | None = None

    @pydantic.model_validator(mode="after")
    def _floor_ceiling(self) -> "Guard":
        if self.floor is not None and self.ceiling is not None and self.floor > self.ceiling:
            raise ValueError(f"floor {self.floor:g} is above ceiling {self.ceiling:g}")
        return self


OnFail = Literal["stop", "continue", "rollback", "escalate"]


class Step(_Strict):
    id: str
    uses: str
    name: str | None = None
    with_: dict[str, Any] = pydantic.Field(default_factory=dict, alias="with")
    when: str | None = None  # a Jinja2 expression: "steps['pods'].result.not_ready"
    guard: Guard | None = None
    on_fail: OnFail = "stop"
    timeout: Duration | None = None

    @pydantic.field_validator("id")
    @classmethod
    def _id_slug(cls, value: str) -> str:
        return _slug(value, "a step id")


class Improvements(_Strict):
    short: tuple[str, ...] = ()  # < 1 day
    mid: tuple[str, ...] = ()  # < 1 week
    long: tuple[str, ...] = ()  # < 1 month


class Rca(_Strict):
    root_cause_hints: tuple[str, ...] = ()
    improvements: Improvements = Improvements()


class Playbook(_Strict):
    name: str
    title: str
    severity: Literal["P1", "P2", "P3", "P4"] = "P2"
    description: str = ""
    match: Match = Match()
    detect: Detect | None = None
    params: dict[str, Any] = {}
    steps: tuple[Step, ...]
    rca: Rca = Rca()

    @pydantic.field_validator("name")
    @classmethod
    def _name_slug(cls, value: str) -> str:
        return _slug(value, "a playbook name")

    @pydantic.field_validator("steps")
    @classmethod
    def _some_steps(cls, steps: tuple[Step, ...]) -> tuple[Step, ...]:
        if not steps:
            raise ValueError("a playbook needs at least one step")
        return steps

    def step(self, step_id: str) -> Step:
        for step in self.steps:
            if step.id == step_id:
                return step
        raise KeyError(step_id)
