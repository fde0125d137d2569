"""The record of applied remediations in the Kubernetes API: one ConfigMap per target, read by every instance.

Cooldowns and budgets count what it holds, so they hold across state directories, machines and
webhook replicas. Each write is a resourceVersion-conditional replace, retried on 409.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import socket
from typing import Any

from runbook.errors import BackendError, Conflict, NotFound
from runbook.record.journal import DRILL_PREFIX, Application
from runbook.model.events import iso_ms, parse_iso

_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MANAGED_BY = {"app.kubernetes.io/managed-by": "runbook", "app.kubernetes.io/component": "applied-record"}
TARGET_ANNOTATION = "runbook/target"
ALL_ACTIONS = "*"  # the key, in `trimmed`, of the newest application dropped whatever its action
WRITE_ATTEMPTS = 5


def record_name(target: str) -> str:
    """A valid, stable ConfigMap name for a target: readable prefix, hash for uniqueness (as its Lease)."""
    readable = re.sub(r"[^a-z0-9]+", "-", target.lower()).strip("-")[:40].strip("-")
    return f"runbook-applied-{readable}-{hashlib.sha256(target.encode()).hexdigest()[:10]}".replace("--", "-")


class AppliedLedger:
    """Applied remediations per target, in ConfigMaps beside the targets' Lease locks.

    The record keeps the applications of the last `retention` and at most `max_entries` of them.
    What it drops is remembered as the newest time dropped (per action and in all), so a window
    that reaches past what the record kept is an error, never a count that looks complete.
    """

    def __init__(self, cluster: Any, *, namespace: str | None = None,
                 retention: dt.timedelta = dt.timedelta(hours=24), max_entries: int = 256,
                 holder: str | None = None):
        self.api = cluster.api
        self.namespace = namespace or cluster.settings.lock_namespace
        self.retention, self.max_entries = retention, max_entries
        self.holder = holder or f"{socket.gethostname()} pid {os.getpid()}"

    def where(self, target: str, given: str | None = None) -> tuple[str, str]:
        """(namespace, name) of the target's record, where LeaseLocks puts its Lease: the lock namespace,
        else the namespace the change is made in, else the target's own."""
        namespace = self.namespace or given
        if not namespace:
            first = target.split("/", 1)[0]
            if not _LABEL.match(first) or first == "node":
                raise BackendError(f"cannot tell which namespace holds the record of changes to {target}; set "
                                   "kubernetes.lock_namespace in the config file")
            namespace = first
        return namespace, record_name(target)

    # -- reading ----------------------------------------------------------------------------

    def applications(self, target: str, *, since: dt.datetime, action: str | None = None,
                     namespace: str | None = None) -> list[Application]:
        """What was applied to `target` (by `action`, or any) since then, oldest first.

        `namespace`: the namespace the change is made in (the plan's), as for the target's Lease.

        Raises BackendUnavailable when the API cannot be read, and BackendError when the record is
        malformed or no longer holds the whole window: an unknown history is never an empty one.
        """
        namespace, name = self.where(target, namespace)
        current = self._read(target, namespace, name)
        if current is None:
            return []
        entries, _, trimmed = _contents(current, target, namespace, name)
        dropped = trimmed.get(action or ALL_ACTIONS)
        if dropped is not None and dropped >= since:
            raise BackendError(
                f"the record of changes to {target} (ConfigMap {namespace}/{name}) keeps {_hours(self.retention)} "
                f"and at most {self.max_entries} applications; it dropped one applied at {iso_ms(dropped)}, inside "
                f"the window since {iso_ms(since)}, so it cannot say what that window holds; shorten the cooldown "
                "or wait until the window has passed it")
        return [e for e in entries if e.at >= since and (action is None or e.action == action)]

    def _read(self, target: str, namespace: str, name: str) -> dict | None:
        try:
            return self.api.call(f"read the record of changes to {target}", self.api.core.read_namespaced_config_map,
                                 name, namespace)
        except NotFound:
            return None  # nothing was ever applied to it from a runbook with a cluster

    # -- writing ----------------------------------------------------------------------------

    def record(self, target: str, application: Application, *, namespace: str | None = None) -> None:
        """Add one application to the target's record (once, however often a lost answer is retried)."""
        if application.incident.startswith(DRILL_PREFIX):
            return  # drills act on a simulated world: never recorded against a real target
        namespace, name = self.where(target, namespace)
        for _ in range(WRITE_ATTEMPTS):
            current = self._read(target, namespace, name)
            if current is None:
                body = self._body(namespace, name, target, {application.key: self.holder},
                                  *self._trim([application], {}))
                try:
                    self.api.call(f"record the change to {target}", self.api.core.create_namespaced_config_map,
                                  namespace, body)
                    return
                except Conflict:
                    continue  # another instance created it first: add to theirs
            entries, holders, trimmed = _contents(current, target, namespace, name)
            if application.key in holders:
                return  # already there: an earlier attempt whose answer was lost
            holders[application.key] = self.holder
            kept, trimmed = self._trim([*entries, application], trimmed)
            current["data"] = _data(kept, holders, trimmed)
            try:
                # The resourceVersion just read makes this conditional: a 409 means another write came first.
                self.api.call(f"record the change to {target}", self.api.core.replace_namespaced_config_map,
                              name, namespace, current)
                return
            except Conflict:
                continue
        raise BackendError(f"the record of changes to {target} (ConfigMap {namespace}/{name}) kept changing while "
                           f"runbook wrote to it ({WRITE_ATTEMPTS} attempts); the change was applied but is recorded "
                           "only in this machine's journal")

    def _trim(self, entries: list[Application], trimmed: dict[str, dt.datetime]
              ) -> tuple[list[Application], dict[str, dt.datetime]]:
        """The entries to keep, newest last, and the newest time dropped per action and in all.

        Retention counts back from the newest application, not this machine's clock: a clock that
        is off drops nothing early.
        """
        entries = sorted(entries, key=lambda e: e.at)
        horizon = entries[-1].at - self.retention
        keep_from = max(len(entries) - self.max_entries, 0)
        while keep_from < len(entries) and entries[keep_from].at < horizon:
            keep_from += 1
        trimmed = dict(trimmed)  # one key per action ever dropped, plus ALL_ACTIONS: bounded by the registry
        for gone in entries[:keep_from]:
            for key in (gone.action, ALL_ACTIONS):
                if key not in trimmed or trimmed[key] < gone.at:
                    trimmed[key] = gone.at
        return entries[keep_from:], trimmed

    @staticmethod
    def _body(namespace: str, name: str, target: str, holders: dict[tuple[str, str, str], str],
              entries: list[Application], trimmed: dict[str, dt.datetime]) -> dict:
        return {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY),
                             "annotations": {TARGET_ANNOTATION: target}},
                "data": _data(entries, holders, trimmed)}


def _data(entries: list[Application], holders: dict[tuple[str, str, str], str],
          trimmed: dict[str, dt.datetime]) -> dict[str, str]:
    listed = [{"action": e.action, "at": iso_ms(e.at), "incident": e.incident, "holder": holders.get(e.key, "")}
              for e in entries]
    return {"applications": json.dumps(listed, separators=(",", ":")),
            "trimmed": json.dumps({k: iso_ms(v) for k, v in sorted(trimmed.items())}, separators=(",", ":"))}


def _contents(configmap: dict, target: str, namespace: str, name: str
              ) -> tuple[list[Application], dict[tuple[str, str, str], str], dict[str, dt.datetime]]:
    """(entries but drills, their holders by key, drop times) of a record; BackendError naming it if malformed."""
    where = f"the record of changes to {target} (ConfigMap {namespace}/{name})"
    annotations = (configmap.get("metadata") or {}).get("annotations") or {}
    if annotations.get(TARGET_ANNOTATION) != target:
        raise BackendError(f"{where} belongs to {annotations.get(TARGET_ANNOTATION)!r}, not {target}: two targets "
                           "share a name hash; set kubernetes.lock_namespace to another namespace")
    data = configmap.get("data") or {}
    try:
        raw_entries = json.loads(data.get("applications") or "[]")
        raw_trimmed = json.loads(data.get("trimmed") or "{}")
        entries = [Application(str(e["incident"]), str(e["action"]), parse_iso(e["at"])) for e in raw_entries]
        holders = {a.key: str(e.get("holder") or "") for a, e in zip(entries, raw_entries)}
        trimmed = {str(k): parse_iso(v) for k, v in raw_trimmed.items()}
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise BackendError(f"{where} cannot be read ({type(exc).__name__}: {exc}); it is written only by runbook: "
                           "restore it, or delete it to start a new record") from None
    if any(e.at.tzinfo is None for e in entries) or any(t.tzinfo is None for t in trimmed.values()):
        raise BackendError(f"{where} holds a time without a time zone; delete it to start a new record")
    kept = [e for e in entries if not e.incident.startswith(DRILL_PREFIX)]
    return sorted(kept, key=lambda e: e.at), holders, trimmed


def _hours(span: dt.timedelta) -> str:
    hours = span.total_seconds() / 3600
    return f"{hours:g} h"
