"""`k8s.route_to_stable`, `k8s.retire_canary`, `k8s.route_check`: a canary rolled back (SOP §7).

The route goes back to the stable version (a Service's selector, an ingress-nginx canary weight
or an HTTPRoute's backend weights), the canary is scaled to 0 while the stable pods keep serving,
and the route is checked to point at stable only (issue 16, item 3). Each change is a `Plan`.
"""

from __future__ import annotations

import pydantic

from runbook.actions import base, fields
from runbook.actions.base import ActionResult, Plan, StepContext
from runbook.backends.base import TrafficRoute
from runbook.errors import InvalidInput
from runbook.model.registry import ActionParams, Kind, action

ROUTE_KINDS = {"service": "service", "svc": "service", "ingress": "ingress", "ing": "ingress",
               "httproute": "httproute"}


def parse_route(ref: str) -> tuple[str, str]:
    """`service/vllm` → ("service", "vllm"); kinds service, ingress (an ingress-nginx canary), httproute."""
    kind, sep, name = ref.partition("/")
    if not sep or kind.lower() not in ROUTE_KINDS:
        raise ValueError(f"route {ref!r} must be kind/name with kind one of service, ingress, httproute")
    return ROUTE_KINDS[kind.lower()], base.check_name(name, "route name")



class _RouteParams(ActionParams):
    route: str  # service/vllm | ingress/vllm-canary | httproute/vllm
    stable_selector: fields.Selector  # the stable version's pods: app=vllm,version=v1
    canary_backend: fields.K8sName | None = None  # ingress, httproute: the canary's backend Service
    stable_backend: fields.K8sName | None = None  # httproute: the stable version's backend Service
    namespace: fields.K8sName | None = None

    @pydantic.field_validator("route")
    @classmethod
    def _route(cls, value: str) -> str:
        parse_route(value)
        return value

    @pydantic.model_validator(mode="after")
    def _backends(self) -> "_RouteParams":
        kind, _ = parse_route(self.route)
        if kind == "httproute" and (self.canary_backend is None or self.stable_backend is None):
            raise ValueError("an httproute needs `canary_backend` and `stable_backend` (the two backend Services)")
        return self


def _wanted(kind: str, route: TrafficRoute, p: _RouteParams, stable: dict[str, str]) -> dict:
    """The change that sends everything to stable: {"selector": …} or {"weights": …}."""
    if kind == "service":
        return {"selector": stable}
    if kind == "ingress":
        (backend,) = route.weights
        if p.canary_backend is not None and p.canary_backend != backend:
            raise InvalidInput(f"{p.route} sends its canary share to {backend}, not to {p.canary_backend}; name the "
                               "canary Ingress of the canary's Service")
        return {"weights": {backend: 0}}
    missing = [b for b in (p.canary_backend, p.stable_backend) if b not in route.weights]
    if missing:
        raise InvalidInput(f"{p.route} has no backend {', '.join(str(m) for m in missing)} (backends: "
                           f"{', '.join(sorted(route.weights)) or 'none'})")
    return {"weights": {p.canary_backend: 0, p.stable_backend: 100}}


def _view(route: TrafficRoute) -> dict:
    return {"selector": dict(route.selector)} if route.kind == "service" else {"weights": dict(route.weights)}


@action("k8s.route_to_stable", kind=Kind.REMEDIATION, params=_RouteParams, reversible=True)
def route_to_stable(ctx: StepContext, p: _RouteParams) -> Plan:
    """Send all traffic back to the stable version: a Service's selector set to the stable pods', a
    canary Ingress's weight to 0, or an HTTPRoute's weights to canary 0 / stable 100.

    The plan counts the stable version's ready pods as those left serving, so the `min_ready` guard
    refuses to move the route to a version with none. Reversible: a rollback restores the route.
    """
    namespace = ctx.namespace(p.namespace)
    kind, name = parse_route(p.route)
    stable = base.parse_selector(p.stable_selector)
    route = ctx.cluster.get_route(namespace, kind, name)
    change = _wanted(kind, route, p, stable)
    before = _view(route)
    after = {"selector": stable} if kind == "service" else {"weights": {**route.weights, **change["weights"]}}
    stable_pods = ctx.cluster.list_pods(namespace, stable)
    ready = sum(1 for pod in stable_pods if pod.ready and not pod.deleting)
    left_as = TrafficRoute(kind, name, namespace, **after)

    def apply(dry_run: bool) -> dict:
        # Only from the route the plan read: another hand's change since is never written over.
        done = ctx.cluster.set_route(namespace, kind, name, dry_run=dry_run, expected=route,
                                     resource_version=route.resource_version or None, **change)
        return _view(done)

    def rollback() -> dict:
        # Only while the route is still as this change left it.
        restore = {"selector": dict(route.selector)} if kind == "service" else \
            {"weights": {k: route.weights[k] for k in change["weights"]}}
        done = ctx.cluster.set_route(namespace, kind, name, expected=left_as, **restore)
        return _view(done)

    return Plan(target=f"{namespace}/{kind}/{name}", namespace=namespace,
                summary=f"route {kind}/{name} to the stable version ({p.stable_selector})",
                before={**before, "stable ready": f"{ready}/{len(stable_pods)}"},
                after={**after, "stable ready": f"{ready}/{len(stable_pods)}"},
                apply=apply, rollback=rollback, ready_before=ready, ready_after=ready,
                noop=before == after)


class RetireParams(ActionParams):
    target: fields.WorkloadRef  # the canary's workload
    stable_selector: fields.Selector
    namespace: fields.K8sName | None = None


@action("k8s.retire_canary", kind=Kind.REMEDIATION, params=RetireParams, reversible=True)
def retire_canary(ctx: StepContext, p: RetireParams) -> Plan:
    """Scale the canary's workload to 0, keeping the stable version's pods running.

    The ready pods left are the stable version's, so `min_ready` never lets both versions reach 0;
    a canary whose selector also picks stable pods is refused. Reversible: scaled back.
    """
    namespace = ctx.namespace(p.namespace)
    kind, name = base.parse_workload(p.target)
    if kind == "daemonset":
        raise InvalidInput(f"{p.target}: a DaemonSet has no replica count to scale")
    stable = base.parse_selector(p.stable_selector)
    workload = ctx.cluster.get_workload(namespace, kind, name)
    canary_pods = ctx.cluster.list_pods(namespace, workload.selector)
    stable_pods = ctx.cluster.list_pods(namespace, stable)
    ready = sum(1 for pod in stable_pods if pod.ready and not pod.deleting)
    shared = sorted({pod.name for pod in canary_pods} & {pod.name for pod in stable_pods})
    refusal = None
    if shared:
        refusal = ("selector", f"{p.target}'s selector also picks stable pods ({', '.join(shared)}): scaling it "
                               "would take the stable version down too")
    before = workload.replicas

    def apply(dry_run: bool) -> dict:
        done = ctx.cluster.scale(namespace, kind, name, 0, dry_run=dry_run, expected_replicas=before,
                                 resource_version=workload.resource_version or None)
        return {"replicas": done.replicas}

    def rollback() -> dict:
        done = ctx.cluster.scale(namespace, kind, name, before, expected_replicas=0)
        return {"replicas": done.replicas}

    return Plan(target=f"{namespace}/{kind}/{name}", namespace=namespace,
                summary=f"scale the canary {kind}/{name} {before} → 0 ({ready} stable pod(s) ready)",
                before={"replicas": before}, after={"replicas": 0}, apply=apply, rollback=rollback,
                value_after=0.0, ready_before=ready, ready_after=ready, refusal=refusal, noop=before == 0)


@action("k8s.route_check", kind=Kind.DIAGNOSTIC, params=_RouteParams)
def route_check(ctx: StepContext, p: _RouteParams) -> ActionResult:
    """Whether the route sends traffic to the stable version only: a Service selecting stable pods
    only (its endpoints, at least one ready), or the canary's weight at 0 (and stable's above 0)."""
    namespace = ctx.namespace(p.namespace)
    kind, name = parse_route(p.route)
    stable = base.parse_selector(p.stable_selector)
    route = ctx.cluster.get_route(namespace, kind, name)
    problems: list[str] = []
    endpoints: list[str] = []
    if kind == "service":
        if not route.selector:
            problems.append(f"{p.route} has no selector")
        else:
            pods = ctx.cluster.list_pods(namespace, route.selector)
            endpoints = sorted(pod.name for pod in pods if pod.ready and not pod.deleting)
            others = sorted(pod.name for pod in pods if any(pod.labels.get(k) != v for k, v in stable.items()))
            if others:
                problems.append(f"it selects pods outside the stable version: {', '.join(others)}")
            if not endpoints:
                problems.append("no ready stable pod is behind it")
    else:
        weights = dict(route.weights)
        canary = p.canary_backend or (next(iter(weights)) if kind == "ingress" else None)
        if canary is not None and weights.get(canary, 0) != 0:
            problems.append(f"{canary} still has weight {weights[canary]}")
        if kind == "httproute" and weights.get(str(p.stable_backend), 0) <= 0:
            problems.append(f"{p.stable_backend} has no weight")
    shown = _view(route) | ({"endpoints": endpoints} if kind == "service" else {})
    ctx.evidence("text", f"{p.route}: where traffic goes", route=p.route, **shown)
    if problems:
        return ActionResult.failed(f"{p.route} does not send traffic to stable only: {'; '.join(problems)}",
                                   stable_only=False, problems=problems, **shown)
    ready = f"; {len(endpoints)} ready stable endpoint(s)" if kind == "service" else ""
    return ActionResult.ok(f"{p.route} sends traffic to the stable version only{ready}", stable_only=True, **shown)
