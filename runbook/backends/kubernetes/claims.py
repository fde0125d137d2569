"""Dedupe claims shared by webhook replicas, as Leases in the Kubernetes API (`--coordination kubernetes`).

`local` (the default): one server; its SQLite store alone decides what is new and the worker
runs one incident at a time. `kubernetes`: replicas behind one Service share the API server.

- Each dedupe key (and each incident that would start a run) is *claimed* by creating a Lease
  named from a hash of the key: create-only, so a 409 AlreadyExists means a replica has it.
- The claim is created `claimed` (holder, renewTime) before the delivery is processed, and
  turned `committed` (naming the incident) just before the local commit, inside the store's
  transaction; if anything fails first the claim is deleted and the sender gets a 503 to retry.
- A claim that is `committed` by another replica is a duplicate. A `claimed` one is in flight
  elsewhere (503, retry later), unless it has not been renewed for `claim_seconds`: its replica
  died before committing anything, and the claim is taken over by a conditional update.
- A claim held by this replica's own identity is this replica's to redo: its local store, which
  said the key is new, is the truth for it (a commit that failed after the claim was committed).
- Each run holds the incident's Lease lock (`runbook.backends.kubernetes.leases.LeaseLocks`), so one
  replica runs an incident at a time even when both know it.

Claims are forgotten with the local dedupe keys (after `dedupe_retention`), by each replica.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from collections.abc import Callable
from typing import Any, ContextManager

from runbook.backends.coordination import Claim, Verdict
from runbook.backends.kubernetes.leases import LeaseLocks
from runbook.backends.kubernetes.objects import micro_time, parse_time
from runbook.errors import BackendError, ClaimedElsewhere, Conflict, CoordinationUnavailable, NotFound

log = logging.getLogger("runbook.webhook")
MANAGED = {"app.kubernetes.io/managed-by": "runbook", "runbook/role": "webhook-dedupe"}
CLAIMED, COMMITTED = "claimed", "committed"


def claim_name(key: str) -> str:
    return f"runbook-seen-{hashlib.sha256(key.encode('utf-8')).hexdigest()[:48]}"


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class KubernetesCoordination:
    """Claims and incident locks as Leases in one namespace, shared by every replica."""

    kind = "kubernetes"

    def __init__(self, cluster: Any, *, namespace: str, identity: str, claim_seconds: int = 60,
                 lock_seconds: int | None = None, now: Callable[[], dt.datetime] = _utcnow):
        self.cluster, self.api = cluster, cluster.api
        self.namespace, self.identity, self.claim_seconds, self.now = namespace, identity, int(claim_seconds), now
        self.locks = LeaseLocks(cluster, namespace=namespace, duration_seconds=lock_seconds)

    # -- dedupe claims ---------------------------------------------------------------------

    def _body(self, key: str, name: str) -> dict[str, Any]:
        at = micro_time(self.now())
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": self.namespace, "labels": dict(MANAGED),
                             "annotations": {"runbook/key": key[:2000], "runbook/state": CLAIMED}},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self.claim_seconds,
                         "acquireTime": at, "renewTime": at, "leaseTransitions": 0}}

    def _call(self, what: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return self.api.call(what, method, *args, **kwargs)
        except (Conflict, NotFound):
            raise
        except BackendError as exc:
            raise CoordinationUnavailable(f"cannot reach the shared dedupe state: {exc}") from None

    def claim(self, key: str) -> tuple[Verdict, Claim | None, str | None]:
        """("new", claim, None) to go ahead; ("duplicate", None, incident) or ("busy", None, holder)."""
        name, leases = claim_name(key), self.api.coordination
        for _ in range(3):
            try:
                made = self._call(f"claim {key!r}", leases.create_namespaced_lease, self.namespace,
                                  self._body(key, name))
                return "new", Claim(key, name, made), None
            except Conflict:
                pass
            try:
                current = self._call(f"read the claim on {key!r}", leases.read_namespaced_lease, name, self.namespace)
            except NotFound:
                continue  # released in between: claim it again
            meta, spec = current.get("metadata") or {}, current.get("spec") or {}
            notes = meta.get("annotations") or {}
            holder = spec.get("holderIdentity") or ""
            if holder != self.identity:
                if notes.get("runbook/state") == COMMITTED:
                    return "duplicate", None, notes.get("runbook/incident") or None
                renewed = parse_time(spec.get("renewTime") or spec.get("acquireTime"))
                duration = int(spec.get("leaseDurationSeconds") or self.claim_seconds)
                if renewed is not None and self.now() <= renewed + dt.timedelta(seconds=duration):
                    return "busy", None, holder
                log.warning("taking over the claim on %r that %s left unfinished", key, holder or "nobody")
            # Ours from an earlier attempt, or abandoned: take it, conditional on what was just read.
            at = micro_time(self.now())
            current["metadata"] = {**meta, "annotations": {**notes, "runbook/key": key[:2000], "runbook/state": CLAIMED}}
            current["spec"] = {**spec, "holderIdentity": self.identity, "leaseDurationSeconds": self.claim_seconds,
                               "acquireTime": at, "renewTime": at,
                               "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (holder != self.identity)}
            try:
                taken = self._call(f"take over the claim on {key!r}", leases.replace_namespaced_lease, name,
                                   self.namespace, current)
                return "new", Claim(key, name, taken), None
            except (Conflict, NotFound):
                continue
        return "busy", None, "another replica"

    def commit(self, claim: Claim, incident: str | None) -> None:
        """Mark the claim done; a Conflict means it was taken over (we were too slow): nothing is kept."""
        lease = dict(claim.lease)
        meta = dict(lease.get("metadata") or {})
        meta["annotations"] = {**(meta.get("annotations") or {}), "runbook/state": COMMITTED,
                               "runbook/incident": incident or ""}
        lease["metadata"] = meta
        lease["spec"] = {**(lease.get("spec") or {}), "renewTime": micro_time(self.now())}
        try:
            claim.lease = self._call(f"commit the claim on {claim.key!r}", self.api.coordination.replace_namespaced_lease,
                                     claim.name, self.namespace, lease)
        except (Conflict, NotFound) as exc:
            raise ClaimedElsewhere(f"the claim on {claim.key!r} was taken over before it was committed: {exc}") from None

    def release(self, claim: Claim) -> None:
        version = (claim.lease.get("metadata") or {}).get("resourceVersion")
        try:
            self.api.call(f"release the claim on {claim.key!r}", self.api.coordination.delete_namespaced_lease,
                          claim.name, self.namespace, body={"preconditions": {"resourceVersion": version}})
        except (Conflict, NotFound):
            pass
        except BackendError as exc:  # it is ours: the next attempt here takes it again; elsewhere, after it ages
            log.warning("could not release the claim on %r: %s", claim.key, exc)

    def forget(self, keys: list[str]) -> None:
        for key in keys:
            try:
                self.api.call(f"forget the claim on {key!r}", self.api.coordination.delete_namespaced_lease,
                              claim_name(key), self.namespace)
            except NotFound:
                pass
            except BackendError as exc:
                log.warning("could not delete the old claim on %r: %s", key, exc)
                return  # the API is struggling: the next purge tries again

    # -- one run per incident --------------------------------------------------------------

    def incident_lock(self, incident: str, holder: str) -> ContextManager[None]:
        return self.locks.hold(f"incident/{incident}", holder=holder)

    def problems(self) -> list[str]:
        try:
            self.api.call("read a dedupe claim", self.api.coordination.read_namespaced_lease,
                          claim_name("readyz"), self.namespace)
        except NotFound:
            return []
        except BackendError as exc:
            return [f"the shared dedupe state (Leases in {self.namespace}) cannot be read: {exc}"]
        return []
