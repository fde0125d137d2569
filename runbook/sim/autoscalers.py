"""The simulated world's autoscalers: a scenario's HPAs and KEDA ScaledObjects, read and changed
as the real API does (resourceVersion and baseline checks, server dry run), and acting as they do.

An autoscaler not held at a workload's replicas puts them back within its bounds `sync_seconds`
after a scale outside them (recorded as an `autoscaler_scaled` mutation): the scale-down that an HPA
undoes within a minute of issue 16, item 8. A change is recorded as `set_autoscaler`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import TYPE_CHECKING

from runbook.backends.base import Autoscaler
from runbook.errors import InvalidInput, NotFound, StalePlan

if TYPE_CHECKING:
    from runbook.sim.state import WorldState

_PLURALS = {"hpa": "horizontalpodautoscalers.autoscaling", "scaledobject": "scaledobjects.keda.sh"}


def bounds(a: Autoscaler) -> tuple[int, int]:
    """The replica counts this autoscaler leaves alone: its pause, else [min, max]."""
    if a.paused_replicas is not None:
        return a.paused_replicas, a.paused_replicas
    return a.min_replicas or 0, a.max_replicas if a.max_replicas is not None else 1 << 30


class SimAutoscalers:
    def __init__(self, state: "WorldState"):
        self._state = state
        self.items: dict[tuple[str, str, str], Autoscaler] = {}
        self.sync: dict[tuple[str, str, str], float] = {}
        self._versions: dict[tuple[str, str, str], int] = {}
        self._due: list[tuple[dt.datetime, tuple[str, str, str]]] = []
        for a in state.scenario.autoscalers:
            key = (a.namespace, a.kind, a.name)
            self.items[key] = Autoscaler(a.kind, a.name, a.namespace, a.target, min_replicas=a.min_replicas,
                                         max_replicas=a.max_replicas, paused_replicas=a.paused_replicas)
            self.sync[key] = a.sync_seconds

    def _view(self, key: tuple[str, str, str]) -> Autoscaler:
        return dataclasses.replace(self.items[key], resource_version=str(self._versions.get(key, 1)))

    def for_workload(self, namespace: str, kind: str, name: str) -> list[Autoscaler]:
        return [self._view(k) for k in sorted(self.items, key=lambda k: (k[1], k[2]))
                if k[0] == namespace and self.items[k].target == f"{kind}/{name}"]

    def set(self, namespace: str, kind: str, name: str, *, min_replicas: int | None = None,
            max_replicas: int | None = None, paused_replicas: int | None = None, dry_run: bool = False,
            expected: Autoscaler | None = None, resource_version: str | None = None) -> Autoscaler:
        key = (namespace, kind, name)
        if kind not in _PLURALS:
            raise InvalidInput(f"unknown autoscaler kind {kind!r}; one of hpa, scaledobject")
        if key not in self.items:
            raise NotFound(f'{_PLURALS[kind]} "{name}" not found in namespace {namespace}')
        current = self.items[key]
        what = f"change {kind}/{name} in {namespace}"
        version = str(self._versions.get(key, 1))
        if resource_version and resource_version != version:
            raise StalePlan(f"{what}: it changed since this change was planned (version {version}, planned from "
                            f"{resource_version})")
        if expected is not None and bounds(expected) != bounds(current):
            raise StalePlan(f"{what}: it changed since this change was planned (now {current.shown()})")
        if kind == "hpa":
            if min_replicas is None or max_replicas is None or not 1 <= min_replicas <= max_replicas:
                raise InvalidInput(f"{what}: give 1 ≤ minReplicas ≤ maxReplicas (got {min_replicas}, {max_replicas})")
            after = dataclasses.replace(current, min_replicas=min_replicas, max_replicas=max_replicas)
        else:
            after = dataclasses.replace(current, paused_replicas=paused_replicas)
        if dry_run:
            return dataclasses.replace(after, resource_version=version)
        if after != current:
            self._state.record("set_autoscaler", autoscaler=f"{kind}/{name}", namespace=namespace,
                               before=current.shown(), after=after.shown())
            self.items[key] = after
            self._versions[key] = int(version) + 1
            self.scaled(namespace, after.target)
        return self._view(key)

    def scaled(self, namespace: str, target: str) -> None:
        """A workload's replicas or an autoscaler's bounds changed: each autoscaler of it looks again
        after its sync period."""
        now = self._state.now()
        for key, a in self.items.items():
            if key[0] == namespace and a.target == target:
                self._due.append((now + dt.timedelta(seconds=self.sync[key]), key))

    def settle(self) -> list:
        """Let each autoscaler whose sync has come put its workload back within its bounds; the
        workloads it scaled."""
        if not self._due:
            return []
        now = self._state.now()
        due = sorted(d for d in self._due if d[0] <= now)
        self._due = [d for d in self._due if d[0] > now]
        changed = []
        for _, key in due:
            a = self.items[key]
            kind, _, name = a.target.partition("/")
            w = self._state.workload(a.namespace, kind, name)
            if w is None:
                continue
            low, high = bounds(a)
            wanted = min(max(w.replicas, low), high)
            if wanted != w.replicas:
                self._state.record("autoscaler_scaled", autoscaler=a.ref, namespace=a.namespace, workload=a.target,
                                   before=w.replicas, after=wanted)
                self._state.scale(w, wanted)
                changed.append(w)
        return changed
