"""Target locks as `coordination.k8s.io/v1` Leases: the lock that holds across machines.

Creating the target's Lease takes the lock; a 409 means someone holds it, and the refusal names
them. A thread renews the Lease while the lock is held; release deletes it with a resourceVersion
precondition. A Lease whose holder stopped renewing (it crashed) is taken over by a conditional
update. Leases do not fence: the actions re-check their targets (uid, resourceVersion) anyway.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import logging
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from runbook.backends.kubernetes.objects import micro_time, parse_time
from runbook.errors import BackendError, Conflict, NotFound, Refused
from runbook.record.locks import HeldLock

log = logging.getLogger(__name__)
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def lease_name(target: str) -> str:
    """A valid, stable Lease name for a target: readable prefix, hash for uniqueness."""
    readable = re.sub(r"[^a-z0-9]+", "-", target.lower()).strip("-")[:40].strip("-")
    return f"runbook-{readable}-{hashlib.sha256(target.encode()).hexdigest()[:10]}".replace("--", "-")


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class LeaseLocks:
    """`Locks` (runbook.record.locks) on a Kubernetes cluster's Leases."""

    def __init__(self, cluster: Any, *, namespace: str | None = None, duration_seconds: int | None = None,
                 skew_seconds: float = 5.0, now: Callable[[], dt.datetime] = _utcnow):
        self.api = cluster.api
        self.namespace = namespace or cluster.settings.lock_namespace
        self.duration = int(duration_seconds or cluster.settings.lease_seconds)
        self.skew = skew_seconds  # how far another machine's clock may be off before its Lease counts as expired
        self.now = now

    def _namespace(self, target: str, given: str | None = None) -> str:
        if self.namespace:
            return self.namespace
        if given:
            return given  # the namespace the change is made in (a node's serving pods, say)
        first = target.split("/", 1)[0]
        if not _LABEL.match(first) or first == "node":
            raise Refused("lock", f"cannot tell which namespace holds the lock for {target}; set "
                                  "kubernetes.lock_namespace in the config file")
        return first

    @contextlib.contextmanager
    def hold(self, target: str, *, holder: str, namespace: str | None = None) -> Iterator[HeldLock]:
        namespace, name = self._namespace(target, namespace), lease_name(target)
        identity = f"{holder} ({socket.gethostname()} pid {os.getpid()} {secrets.token_hex(3)})"
        try:
            lease = self._acquire(namespace, name, target, identity)
        except BackendError as exc:
            raise Refused("lock", f"cannot take the Lease {namespace}/{name} for {target}: {exc}; refusing to act "
                                  "without the lock") from None
        renewer = _Renewer(self, namespace, name, identity, lease)
        renewer.start()
        try:
            yield HeldLock(renewer.lost_reason)
        finally:
            renewer.stop()
            self._release(namespace, name, renewer)

    def _body(self, namespace: str, name: str, target: str, identity: str) -> dict:
        at = micro_time(self.now())
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": namespace,
                             "labels": {"app.kubernetes.io/managed-by": "runbook"},
                             "annotations": {"runbook/target": target}},
                "spec": {"holderIdentity": identity, "leaseDurationSeconds": self.duration, "acquireTime": at,
                         "renewTime": at, "leaseTransitions": 0}}

    def _acquire(self, namespace: str, name: str, target: str, identity: str) -> dict:
        coordination = self.api.coordination
        for _ in range(3):
            try:
                return self.api.call(f"take the lock on {target}", coordination.create_namespaced_lease, namespace,
                                     self._body(namespace, name, target, identity))
            except Conflict:
                pass  # AlreadyExists: read who holds it
            try:
                current = self.api.call(f"read the lock on {target}", coordination.read_namespaced_lease, name, namespace)
            except NotFound:
                continue  # released in between: try to create it again
            spec = current.get("spec") or {}
            held_by = spec.get("holderIdentity") or ""
            if held_by == identity:
                return current  # our own create, whose answer was lost and retried
            renewed = parse_time(spec.get("renewTime") or spec.get("acquireTime"))
            duration = int(spec.get("leaseDurationSeconds") or self.duration)
            now = self.now()
            if held_by and renewed is not None and now <= renewed + dt.timedelta(seconds=duration + self.skew):
                age = max((now - renewed).total_seconds(), 0.0)
                raise Refused("lock", f"{target} is locked by {held_by} (Lease {namespace}/{name}, renewed "
                                      f"{age:.0f}s ago, valid {duration}s after each renewal); wait for that run "
                                      "to finish")
            # Expired or released: take it over, conditional on the resourceVersion just read.
            at = micro_time(now)
            current["spec"] = {**spec, "holderIdentity": identity, "leaseDurationSeconds": self.duration,
                               "acquireTime": at, "renewTime": at,
                               "leaseTransitions": int(spec.get("leaseTransitions") or 0) + 1}
            try:
                taken = self.api.call(f"take over the expired lock on {target}", coordination.replace_namespaced_lease,
                                      name, namespace, current)
                log.warning("took over the expired Lease %s/%s from %s", namespace, name, held_by or "nobody")
                return taken
            except Conflict:
                continue  # someone else took it first: read who
        raise Refused("lock", f"the Lease {namespace}/{name} for {target} kept changing hands; try again")

    def _release(self, namespace: str, name: str, renewer: "_Renewer") -> None:
        if renewer.lost:
            return  # someone else holds it now: theirs to release
        version = (renewer.latest.get("metadata") or {}).get("resourceVersion")
        try:
            self.api.call(f"release the lock {namespace}/{name}", self.api.coordination.delete_namespaced_lease, name,
                          namespace, body={"preconditions": {"resourceVersion": version}})
        except (Conflict, NotFound):
            pass  # changed hands or already gone: nothing of ours to release
        except BackendError as exc:
            log.warning("could not release the Lease %s/%s (it expires by itself in %ss): %s", namespace, name,
                        self.duration, exc)


class _Renewer:
    """Renews a held Lease every third of its duration until stopped."""

    def __init__(self, locks: LeaseLocks, namespace: str, name: str, identity: str, lease: dict):
        self.locks, self.namespace, self.name, self.identity = locks, namespace, name, identity
        self.latest = lease
        self.lost = False
        self.lost_to = ""
        self.renewed_at = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"renew lease {namespace}/{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def lost_reason(self) -> str | None:
        """Why the Lease may no longer be ours: taken over, or not renewed for longer than it lasts."""
        if self.lost:
            return f"the Lease {self.namespace}/{self.name} was taken over by {self.lost_to or 'another holder'}"
        silent = time.monotonic() - self.renewed_at
        if silent > self.locks.duration:
            return (f"the Lease {self.namespace}/{self.name} could not be renewed for {silent:.0f}s, longer than its "
                    f"{self.locks.duration}s: another runbook may hold it now")
        return None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.locks.api.settings.request_timeout + 5)

    def _run(self) -> None:
        api = self.locks.api
        while not self._stop.wait(self.locks.duration / 3):
            lease = dict(self.latest)
            lease["spec"] = {**(lease.get("spec") or {}), "renewTime": micro_time(self.locks.now())}
            try:
                self.latest = api.call(f"renew the Lease {self.namespace}/{self.name}",
                                       api.coordination.replace_namespaced_lease, self.name, self.namespace, lease)
                self.renewed_at = time.monotonic()
            except Conflict:
                try:
                    current = api.call(f"read the Lease {self.namespace}/{self.name}",
                                       api.coordination.read_namespaced_lease, self.name, self.namespace)
                except BackendError:
                    continue
                if (current.get("spec") or {}).get("holderIdentity") != self.identity:
                    self.lost_to = str((current.get("spec") or {}).get("holderIdentity") or "")
                    self.lost = True
                    log.error("lost the Lease %s/%s to %s while holding it", self.namespace, self.name,
                              (current.get("spec") or {}).get("holderIdentity"))
                    return
                self.latest = current
            except BackendError as exc:
                log.warning("could not renew the Lease %s/%s: %s", self.namespace, self.name, exc)

