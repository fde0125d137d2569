"""Who says yes in a webhook-started run: the config's unattended policy, or a human's approval.

A change the policy does not allow is answered `Proposed`: the engine journals it as proposed and
stops the run there. Every remediation asks, even one the playbook marks `confirm: false`.
"""

from __future__ import annotations

from collections.abc import Callable

from runbook.engine.operator import Confirmation, ConfirmRequest
from runbook.engine.runner import Proposed
from runbook.model.playbook import Guard, Playbook
from runbook.model.registry import Kind, Registry
from runbook.webhook.settings import Policy

POLICY = "webhook policy"


class PolicyOperator:
    def __init__(self, policy: Policy, playbook: str, closed: Callable[[], bool]):
        self.policy, self.playbook, self.closed = policy, playbook, closed

    def confirm(self, request: ConfirmRequest) -> Confirmation:
        if self.closed():
            return Confirmation(False, POLICY, "the alert resolved; nothing more is applied for this incident")
        if self.policy.allows(self.playbook, request.step) and not request.needs_person:
            return Confirmation(True, f"{POLICY} (unattended)", "allowed unattended by webhook.policy")
        why = " (guard unattended: false)" if request.needs_person else ""
        return Proposed(False, POLICY, f"needs a human{why}: runbook approve {request.incident} {request.step}")


class ApprovalOperator:
    """The approved step is confirmed in the approver's name; any later one goes back to the policy."""

    def __init__(self, step: str, by: str, fallback: PolicyOperator):
        self.step, self.by, self.fallback = step, by, fallback

    def confirm(self, request: ConfirmRequest) -> Confirmation:
        if request.step == self.step:
            if self.fallback.closed():
                return Confirmation(False, self.by, "the alert resolved after the approval; not applied")
            return Confirmation(True, self.by, "approved with runbook approve", by_person=True)
        return self.fallback.confirm(request)


def always_ask(playbook: Playbook, registry: Registry) -> Playbook:
    """The playbook with every remediation's `confirm` on, so the policy sees each change."""
    steps = []
    for step in playbook.steps:
        spec = registry.get(step.uses)
        if spec is not None and spec.kind is Kind.REMEDIATION and not (step.guard or Guard()).confirm:
            step = step.model_copy(update={"guard": (step.guard or Guard()).model_copy(update={"confirm": True})})
        steps.append(step)
    return playbook.model_copy(update={"steps": tuple(steps)})


def remediation_steps(playbook: Playbook, registry: Registry) -> list[str]:
    return [s.id for s in playbook.steps if (spec := registry.get(s.uses)) is not None
            and spec.kind is Kind.REMEDIATION]
