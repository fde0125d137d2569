"""Choosing pods for an action: by label selector, by workload, or by name.

Shared by the `k8s.*` and `http.*` actions. An empty choice is never "every pod": a selector
must have at least one key=value, and a list of names from an earlier step may be empty only
where the action says so.
"""

from __future__ import annotations

import pydantic

from runbook.actions import base, fields
from runbook.actions.base import StepContext
from runbook.backends.base import Pod
from runbook.errors import NotFound
from runbook.model.registry import ActionParams


class PodsParams(ActionParams):
    namespace: fields.K8sName | None = None
    selector: fields.Selector | None = None
    workload: fields.WorkloadRef | None = None
    names: list[fields.K8sName] | None = None  # with `workload` or `selector`: only these of them

    def has_pods(self) -> bool:
        return self.selector is not None or self.workload is not None or self.names is not None

    @pydantic.model_validator(mode="after")
    def _not_both(self) -> "PodsParams":
        if self.selector is not None and self.workload is not None:
            raise ValueError("give `selector` or `workload`, not both")
        return self


def workload_selector(ctx: StepContext, namespace: str, ref: str) -> dict[str, str]:
    kind, name = base.parse_workload(ref)
    return dict(ctx.cluster.get_workload(namespace, kind, name).selector)


def select_pods(ctx: StepContext, p: PodsParams) -> list[Pod]:
    """The pods `p` names, in a stable order."""
    namespace = ctx.namespace(p.namespace)
    if p.selector is not None:
        selector = base.parse_selector(p.selector)
    elif p.workload is not None:
        selector = workload_selector(ctx, namespace, p.workload)
    elif p.names is not None:
        selector = None
    else:
        raise ValueError("no pods chosen: give `selector`, `workload` or `names`")
    if selector is None:
        # The Cluster protocol lists pods by selector only, so names alone are looked up within
        # the playbook's `selector` param, which every bundled playbook sets.
        default = ctx.params.get("selector")
        if not default:
            raise NotFound("pods given by `names` need a `selector` or `workload` (or a `selector` playbook param)")
        selector = base.parse_selector(str(default))
    pods = sorted(ctx.cluster.list_pods(namespace, selector), key=lambda pod: pod.name)
    if p.names is not None:
        wanted = set(p.names)
        missing = wanted - {pod.name for pod in pods}
        if missing:
            raise NotFound(f"no pod {', '.join(sorted(missing))} in namespace {namespace} matching {selector}")
        pods = [pod for pod in pods if pod.name in wanted]
    return pods


def pod_row(pod: Pod) -> dict:
    return {"name": pod.name, "phase": pod.phase, "ready": pod.ready, "restarts": pod.restarts, "node": pod.node,
            "last_termination_reason": pod.last_termination_reason, "deleting": pod.deleting}
