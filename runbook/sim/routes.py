"""The simulated world's traffic routes: a scenario's Services, canary Ingresses and HTTPRoutes,
read and changed as the real API does (resourceVersion and baseline checks, server dry run).

A change is recorded as a `set_route` mutation and fires `route_changed` for the reactions
(issue 16, item 3: canary rollback).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

from runbook.backends.base import TrafficRoute
from runbook.errors import InvalidInput, NotFound, StalePlan

if TYPE_CHECKING:
    from runbook.sim.state import WorldState

ROUTE_KINDS = ("service", "ingress", "httproute")
_PLURALS = {"service": "services", "ingress": "ingresses.networking.k8s.io",
            "httproute": "httproutes.gateway.networking.k8s.io"}


class SimRoutes:
    def __init__(self, state: "WorldState"):
        self._state = state
        self.routes: dict[tuple[str, str, str], TrafficRoute] = {}
        self._versions: dict[tuple[str, str, str], int] = {}
        for r in state.scenario.routes:
            self.routes[(r.namespace, r.kind, r.name)] = TrafficRoute(r.kind, r.name, r.namespace,
                                                                      selector=dict(r.selector),
                                                                      weights=dict(r.weights))

    def _key(self, namespace: str, kind: str, name: str) -> tuple[str, str, str]:
        kind = kind.lower()
        if kind not in ROUTE_KINDS:
            raise InvalidInput(f"unknown route kind {kind!r}; one of {', '.join(ROUTE_KINDS)}")
        key = (namespace, kind, name)
        if key not in self.routes:
            raise NotFound(f'{_PLURALS[kind]} "{name}" not found in namespace {namespace}')
        return key

    def get(self, namespace: str, kind: str, name: str) -> TrafficRoute:
        self._state.tick()
        key = self._key(namespace, kind, name)
        return dataclasses.replace(self.routes[key], resource_version=str(self._versions.get(key, 1)))

    def set(self, namespace: str, kind: str, name: str, *, selector: Mapping[str, str] | None = None,
            weights: Mapping[str, int] | None = None, dry_run: bool = False, expected: TrafficRoute | None = None,
            resource_version: str | None = None) -> TrafficRoute:
        self._state.tick()
        key = self._key(namespace, kind, name)
        kind = key[1]
        current = self.routes[key]
        what = f"change {kind}/{name} in {namespace}"
        if kind == "service" and (weights or not selector):
            raise InvalidInput(f"{what}: a Service routes by its selector; give `selector`, not weights")
        if kind != "service" and (selector or not weights):
            raise InvalidInput(f"{what}: a {kind} routes by weight; give `weights`, not a selector")
        unknown = sorted(set(weights or {}) - set(current.weights))
        if unknown:
            raise InvalidInput(f"{what}: it has no backend {', '.join(unknown)} (backends: "
                               f"{', '.join(sorted(current.weights))})")
        version = str(self._versions.get(key, 1))
        if resource_version and resource_version != version:
            raise StalePlan(f"{what}: it changed since this change was planned (version {version}, planned from "
                            f"{resource_version})")
        if expected is not None and (dict(expected.selector), dict(expected.weights)) != (dict(current.selector),
                                                                                          dict(current.weights)):
            raise StalePlan(f"{what}: it changed since this change was planned")
        after = dataclasses.replace(current, selector=dict(selector) if selector else dict(current.selector),
                                    weights={**current.weights, **(weights or {})})
        if dry_run:
            return dataclasses.replace(after, resource_version=version)
        if after == current:
            return dataclasses.replace(current, resource_version=version)
        self._state.record("set_route", route=f"{kind}/{name}", namespace=namespace,
                           before=_shown(current), after=_shown(after))
        self.routes[key] = after
        self._versions[key] = int(version) + 1
        self._state.fire("route_changed", route=f"{kind}/{name}", namespace=namespace,
                         selector=dict(after.selector), weights=dict(after.weights))
        return dataclasses.replace(after, resource_version=str(self._versions[key]))


def _shown(route: TrafficRoute) -> dict:
    return {"selector": dict(route.selector)} if route.kind == "service" else {"weights": dict(route.weights)}
