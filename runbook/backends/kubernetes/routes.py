"""Traffic routes on the official client: a Service's selector, an ingress-nginx canary Ingress's
weight and a Gateway API HTTPRoute's backend weights, read and changed as one plan saw them.

Every change is a JSON merge patch carrying the resourceVersion its plan read (a 409 is
`StalePlan`), read back and compared with what was asked (issue 16, item 3: canary rollback).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from runbook.backends.base import TrafficRoute
from runbook.backends.kubernetes.api import KubeApi
from runbook.errors import CommandFailed, Conflict, InvalidInput, StalePlan

MERGE_PATCH = "application/merge-patch+json"
CANARY = "nginx.ingress.kubernetes.io/canary"
CANARY_WEIGHT = "nginx.ingress.kubernetes.io/canary-weight"
GATEWAY_GROUP, GATEWAY_VERSION, HTTPROUTES = "gateway.networking.k8s.io", "v1", "httproutes"
ROUTE_KINDS = ("service", "ingress", "httproute")


def _check_kind(kind: str) -> str:
    kind = kind.lower()
    if kind not in ROUTE_KINDS:
        raise InvalidInput(f"unknown route kind {kind!r}; one of {', '.join(ROUTE_KINDS)}")
    return kind


def _ingress_backend(obj: dict) -> str:
    """The Service a canary Ingress sends its share to: its first rule's first path, else its default."""
    spec = obj.get("spec") or {}
    for rule in spec.get("rules") or []:
        for path in ((rule.get("http") or {}).get("paths") or []):
            name = ((path.get("backend") or {}).get("service") or {}).get("name")
            if name:
                return str(name)
    name = ((spec.get("defaultBackend") or {}).get("service") or {}).get("name")
    return str(name or "")


def httproute_weights(obj: dict, where: str) -> dict[str, int]:
    """Backend Service → weight over the route's rules (Gateway API: a backendRef's weight defaults to 1).

    A backend weighted differently in two rules is refused: one weight per version is what a
    rollback moves, and which rule's would be a guess."""
    weights: dict[str, int] = {}
    for i, rule in enumerate((obj.get("spec") or {}).get("rules") or []):
        for ref in rule.get("backendRefs") or []:
            name, weight = str(ref.get("name") or ""), int(ref.get("weight", 1))
            if name in weights and weights[name] != weight:
                raise InvalidInput(f"{where}: backend {name} has weight {weights[name]} in one rule and {weight} in "
                                   f"rule {i}; give each rule the same weights, or change the route by hand")
            weights[name] = weight
    return weights


def route_from(kind: str, obj: dict) -> TrafficRoute:
    """A Service, Ingress or HTTPRoute object (as JSON) read into a `TrafficRoute`."""
    meta = obj.get("metadata") or {}
    name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
    version = str(meta.get("resourceVersion") or "")
    where = f"{kind}/{name} in {namespace}"
    if kind == "service":
        selector = (obj.get("spec") or {}).get("selector") or {}
        return TrafficRoute(kind, name, namespace, selector={str(k): str(v) for k, v in selector.items()},
                            resource_version=version)
    if kind == "ingress":
        annotations = meta.get("annotations") or {}
        if str(annotations.get(CANARY, "")).lower() != "true":
            raise InvalidInput(f"{where} is not an ingress-nginx canary (no {CANARY}: \"true\" annotation); "
                               "name the canary Ingress, not the main one")
        raw = str(annotations.get(CANARY_WEIGHT, "0"))
        if not raw.isdigit():
            raise InvalidInput(f"{where}: {CANARY_WEIGHT} is {raw!r}, not a whole number")
        return TrafficRoute(kind, name, namespace, weights={_ingress_backend(obj) or name: int(raw)},
                            resource_version=version)
    return TrafficRoute(kind, name, namespace, weights=httproute_weights(obj, where), resource_version=version)


def _same(a: TrafficRoute, b: TrafficRoute) -> bool:
    return dict(a.selector) == dict(b.selector) and dict(a.weights) == dict(b.weights)


def _shown(route: TrafficRoute) -> str:
    if route.kind == "service":
        return "selector " + ",".join(f"{k}={v}" for k, v in sorted(route.selector.items()))
    return "weights " + ", ".join(f"{k}={v}" for k, v in sorted(route.weights.items()))


class Routes:
    """The three route kinds of one cluster, over the official client's typed and custom-object APIs."""

    def __init__(self, api: KubeApi):
        from kubernetes import client

        self.api = api
        self.networking = client.NetworkingV1Api(api.client)
        self.custom = client.CustomObjectsApi(api.client)

    def _read(self, namespace: str, kind: str, name: str) -> dict:
        what = f"read {kind}/{name} in {namespace}"
        if kind == "service":
            return self.api.call(what, self.api.core.read_namespaced_service, name, namespace)
        if kind == "ingress":
            return self.api.call(what, self.networking.read_namespaced_ingress, name, namespace)
        return self.api.call(what, self.custom.get_namespaced_custom_object, GATEWAY_GROUP, GATEWAY_VERSION,
                             namespace, HTTPROUTES, name)

    def get(self, namespace: str, kind: str, name: str) -> TrafficRoute:
        kind = _check_kind(kind)
        return route_from(kind, self._read(namespace, kind, name))

    def set(self, namespace: str, kind: str, name: str, *, selector: Mapping[str, str] | None = None,
            weights: Mapping[str, int] | None = None, dry_run: bool = False, expected: TrafficRoute | None = None,
            resource_version: str | None = None) -> TrafficRoute:
        """Set a Service's whole selector or some backends' weights, from the plan's baseline only.

        Without `resource_version` the route is read first and must be `expected`; with it, the
        patch carries it. A 409 is `StalePlan`, unless a lost earlier attempt of this call landed.
        """
        kind = _check_kind(kind)
        what = f"change {kind}/{name} in {namespace}"
        if kind == "service":
            if weights or not selector:
                raise InvalidInput(f"{what}: a Service routes by its selector; give `selector`, not weights")
        elif selector or not weights:
            raise InvalidInput(f"{what}: a {kind} routes by weight; give `weights`, not a selector")
        elif kind == "ingress" and len(weights) != 1:
            raise InvalidInput(f"{what}: a canary Ingress has one weight, its canary-weight; give one backend")
        current_obj = None
        version = resource_version
        if not version:
            current_obj = self._read(namespace, kind, name)
            current = route_from(kind, current_obj)
            if expected is not None and not _same(current, expected):
                raise StalePlan(f"{what}: it changed since this change was planned (now {_shown(current)}, "
                                f"planned from {_shown(expected)})")
            version = current.resource_version
        wanted = self._wanted(kind, expected, selector, weights)
        body = self._body(kind, namespace, name, version, selector, weights, expected, current_obj)
        try:
            result = self._patch(namespace, kind, name, body, dry_run)
        except Conflict as exc:
            now = self.get(namespace, kind, name)
            if getattr(exc, "attempts", 1) > 1 and wanted is not None and _same(now, wanted) and not dry_run:
                return now  # our lost earlier attempt landed
            raise StalePlan(f"{what}: it changed since this change was planned (now {_shown(now)}, version "
                            f"{now.resource_version} instead of {version})") from None
        got = route_from(kind, result)
        if wanted is not None and not _same(got, wanted):
            verb = "would store" if dry_run else "stored"
            raise CommandFailed(f"{what}: the API server {verb} {_shown(got)} instead of {_shown(wanted)} (an "
                                "admission webhook rewrote it?)")
        return got

    @staticmethod
    def _wanted(kind: str, expected: TrafficRoute | None, selector: Mapping[str, str] | None,
                weights: Mapping[str, int] | None) -> TrafficRoute | None:
        if kind == "service":
            return TrafficRoute(kind, "", "", selector=dict(selector or {}))
        if expected is None:
            return None
        return dataclasses.replace(expected, weights={**expected.weights, **(weights or {})})

    def _body(self, kind: str, namespace: str, name: str, version: str, selector: Mapping[str, str] | None,
              weights: Mapping[str, int] | None, expected: TrafficRoute | None, current_obj: dict | None) -> dict:
        meta: dict[str, Any] = {"resourceVersion": version}
        if kind == "service":
            # A merge patch merges maps: keys the new selector lacks are removed by name (null).
            old = dict(expected.selector) if expected is not None else dict(
                ((current_obj or {}).get("spec") or {}).get("selector") or {})
            patch_selector: dict[str, Any] = {k: None for k in old if k not in (selector or {})}
            patch_selector.update(selector or {})
            return {"metadata": meta, "spec": {"selector": patch_selector}}
        ((backend, weight),) = dict(weights or {}).items() if kind == "ingress" else (("", 0),)
        if kind == "ingress":
            return {"metadata": {**meta, "annotations": {CANARY_WEIGHT: str(int(weight))}}}
        # An HTTPRoute is a custom resource: no strategic merge, so `rules` goes whole, from the very
        # version read (the precondition makes sure nothing else in it changed meanwhile).
        obj = current_obj if current_obj is not None else self._read(namespace, kind, name)
        if str((obj.get("metadata") or {}).get("resourceVersion") or "") != version:
            raise StalePlan(f"change httproute/{name} in {namespace}: it changed since this change was planned "
                            f"(version {(obj.get('metadata') or {}).get('resourceVersion')} instead of {version})")
        rules = []
        for rule in (obj.get("spec") or {}).get("rules") or []:
            refs = [{**ref, "weight": int(weights[ref.get("name")])} if ref.get("name") in (weights or {}) else ref
                    for ref in rule.get("backendRefs") or []]
            rules.append({**rule, "backendRefs": refs} if "backendRefs" in rule else rule)
        return {"metadata": meta, "spec": {"rules": rules}}

    def _patch(self, namespace: str, kind: str, name: str, body: dict, dry_run: bool) -> dict:
        what = f"change {kind}/{name} in {namespace}"
        dry = "All" if dry_run else None
        if kind == "service":
            return self.api.call(what, self.api.core.patch_namespaced_service, name, namespace, body, dry_run=dry,
                                 _content_type=MERGE_PATCH)
        if kind == "ingress":
            return self.api.call(what, self.networking.patch_namespaced_ingress, name, namespace, body, dry_run=dry,
                                 _content_type=MERGE_PATCH)
        return self.api.call(what, self.custom.patch_namespaced_custom_object, GATEWAY_GROUP, GATEWAY_VERSION,
                             namespace, HTTPROUTES, name, body, dry_run=dry, _content_type=MERGE_PATCH)
