"""Who confirms a planned change: the terminal's human, `--yes`, or a policy that says no.

The engine asks an `Operator`; it never reads a terminal itself. Without a terminal and
without `--yes`, the answer is a refusal, never a prompt left hanging. A human may also skip
one change (`skip`): the step is journaled skipped and the run goes on.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol


@dataclasses.dataclass(frozen=True)
class ConfirmRequest:
    incident: str
    step: str
    action: str
    target: str
    summary: str
    diff: tuple[str, ...]
    needs_person: bool = False  # guard `unattended: false`: only a person's yes applies it


@dataclasses.dataclass(frozen=True)
class Confirmation:
    approved: bool
    by: str
    reason: str = ""
    skip: bool = False  # not approved, and only this step is left out: the run goes on
    by_person: bool = False  # a person answered (a prompt, `runbook approve`), not a flag or a policy


def skipped(by: str, reason: str) -> Confirmation:
    return Confirmation(False, by, reason, skip=True)


class Operator(Protocol):
    def confirm(self, request: ConfirmRequest) -> Confirmation: ...


class AssumeYes:
    """`--yes`: answers every prompt with yes, in the name of the given operator.

    `rehearsal`: a drill's `--yes`, which stands in for the person at the prompt (nothing real
    changes), so a change that needs a person's yes (guard `unattended: false`) is rehearsed too.
    """

    def __init__(self, by: str, *, rehearsal: bool = False):
        self.by, self.rehearsal = by, rehearsal

    def confirm(self, request: ConfirmRequest) -> Confirmation:
        if self.rehearsal:
            return Confirmation(True, self.by, "--yes (a drill: in place of the person at the prompt)",
                                by_person=request.needs_person)
        if request.needs_person:
            return Confirmation(False, self.by, "this change needs a person's yes (guard unattended: false) and "
                                                "--yes does not give one; run without --yes on a terminal")
        return Confirmation(True, self.by, "--yes")


class NoTerminal:
    """No one to ask: refuse, and say how to proceed."""

    def __init__(self, by: str):
        self.by = by

    def confirm(self, request: ConfirmRequest) -> Confirmation:
        return Confirmation(False, self.by, "no terminal to confirm on; pass --yes to approve, or run in a terminal")


class Scripted:
    """Answers from a list, for tests: True approves, False declines (the run stops), "skip" skips the step."""

    def __init__(self, answers: list[bool | str], by: str = "tester"):
        self.answers, self.by = list(answers), by
        self.asked: list[ConfirmRequest] = []

    def confirm(self, request: ConfirmRequest) -> Confirmation:
        self.asked.append(request)
        if not self.answers:
            raise AssertionError(f"unexpected confirmation asked for {request.step}")
        answer = self.answers.pop(0)
        if answer == "skip":
            return skipped(self.by, "skipped by the operator")
        if not isinstance(answer, bool):
            raise AssertionError(f"a scripted answer is True, False or 'skip', not {answer!r}")
        return Confirmation(answer, self.by, "" if answer else "declined by the operator", by_person=True)
