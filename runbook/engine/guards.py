"""The hard guards: pure predicates over a plan, the step's guard settings and history.

Each returns a `Verdict` naming the guard; the runner journals every one. `--yes` answers the
confirmation prompt and never reaches these: only the playbook's own numbers change them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Sequence

from runbook.actions.base import Plan
from runbook.record.journal import Application
from runbook.model.duration import format_duration
from runbook.model.playbook import Guard


@dataclasses.dataclass(frozen=True)
class Verdict:
    guard: str
    allowed: bool
    reason: str


def _ok(guard: str, reason: str) -> Verdict:
    return Verdict(guard, True, reason)


def _no(guard: str, reason: str) -> Verdict:
    return Verdict(guard, False, reason)


def floor_ceiling(plan: Plan, guard: Guard) -> Verdict | None:
    if plan.value_after is None or (guard.floor is None and guard.ceiling is None):
        return None
    if guard.floor is not None and plan.value_after < guard.floor:
        return _no("floor", f"{plan.summary} would set {plan.value_after:g}, below the floor {guard.floor:g}")
    if guard.ceiling is not None and plan.value_after > guard.ceiling:
        return _no("ceiling", f"{plan.summary} would set {plan.value_after:g}, above the ceiling {guard.ceiling:g}")
    return _ok("floor", f"{plan.value_after:g} within [{guard.floor}, {guard.ceiling}]")


def min_ready(plan: Plan, guard: Guard) -> Verdict | None:
    if plan.ready_after is None or guard.min_ready is None:
        return None
    if plan.ready_after < guard.min_ready:
        return _no("min_ready", f"{plan.summary} would leave {plan.ready_after} ready pod(s) "
                                f"(of {plan.ready_before} ready now); at least {guard.min_ready} must stay ready")
    return _ok("min_ready", f"{plan.ready_after} ready pod(s) left, minimum {guard.min_ready}")


def max_fraction(plan: Plan, guard: Guard) -> Verdict | None:
    if guard.max_fraction is None or plan.touched is None or not plan.total:
        return None
    share = plan.touched / plan.total
    if share > guard.max_fraction + 1e-9:
        return _no("max_fraction", f"{plan.summary} touches {plan.touched} of {plan.total} pods ({share:.0%}); "
                                   f"at most {guard.max_fraction:.0%} per run")
    return _ok("max_fraction", f"touches {plan.touched} of {plan.total} pods, at most {guard.max_fraction:.0%}")


def cooldown(plan: Plan, guard: Guard, *, now: dt.datetime, last: Application | None) -> Verdict | None:
    if guard.cooldown is None:
        return None
    if last is not None and now - last.at < dt.timedelta(seconds=guard.cooldown):
        ago = (now - last.at).total_seconds()
        wait = guard.cooldown - ago
        # The incident is named: the on-call can read what was done and why (`runbook rca INCIDENT`); a
        # change in doubt says so, since the target may show nothing of it.
        changed, why = ("was changed", "") if last.doubt is None else \
            ("may have been changed", f": {last.doubt}; counted as applied")
        return _no("cooldown", f"{plan.target} {changed} by this action {format_duration(ago)} ago (incident "
                               f"{last.incident}{why}); cooldown {format_duration(guard.cooldown)}, "
                               f"{format_duration(wait)} left")
    return _ok("cooldown", f"no change to {plan.target} by this action within {format_duration(guard.cooldown)}")


def budget(plan: Plan, guard: Guard, *, applied_last_hour: int) -> Verdict | None:
    if guard.budget_per_hour is None:
        return None
    if applied_last_hour >= guard.budget_per_hour:
        return _no("budget", f"{applied_last_hour} remediation(s) already applied to {plan.target} in the last hour; "
                             f"the budget is {guard.budget_per_hour} per hour")
    return _ok("budget", f"{applied_last_hour} of {guard.budget_per_hour} remediations used this hour on {plan.target}")


def plan_guards(plan: Plan, guard: Guard) -> list[Verdict]:
    """The guards that read only the plan: floor and ceiling, min ready, max fraction, the plan's own refusal."""
    verdicts: list[Verdict] = []
    if plan.refusal is not None:
        verdicts.append(_no(*plan.refusal))
    for check in (floor_ceiling, min_ready, max_fraction):
        verdict = check(plan, guard)
        if verdict is not None:
            verdicts.append(verdict)
    return verdicts


def history_guards(plan: Plan, guard: Guard, *, action: str, now: dt.datetime,
                   applications: Callable[[str | None, dt.datetime], Sequence[Application]]) -> list[Verdict]:
    """Cooldown and hourly budget: they read what was applied before, so they run under the target's lock.

    `applications(action_or_None, since)` lists the remediations applied to this target, oldest first.
    """
    verdicts: list[Verdict] = []
    if guard.cooldown is not None:
        same_action = applications(action, now - dt.timedelta(seconds=guard.cooldown))
        verdicts.append(cooldown(plan, guard, now=now, last=same_action[-1] if same_action else None))  # type: ignore[arg-type]
    if guard.budget_per_hour is not None:
        hour = applications(None, now - dt.timedelta(hours=1))
        verdicts.append(budget(plan, guard, applied_last_hour=len(hour)))  # type: ignore[arg-type]
    return verdicts


def hard_guards(plan: Plan, guard: Guard, *, action: str, now: dt.datetime,
                applications: Callable[[str | None, dt.datetime], Sequence[Application]]) -> list[Verdict]:
    """Every hard guard in order; the first refusal is the one the run reports."""
    return plan_guards(plan, guard) + history_guards(plan, guard, action=action, now=now, applications=applications)
