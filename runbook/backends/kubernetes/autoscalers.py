"""HPAs (autoscaling/v2) and KEDA ScaledObjects (keda.sh/v1alpha1) on the official client: the
autoscalers whose scaleTargetRef is a workload, and holding one at a replica count (issue 16, item 8).

A change is a JSON merge patch carrying the resourceVersion its plan read. A 409 is read again:
where the bounds (or the pause) are still as planned, only a status write moved the version (the HPA
controller's, KEDA's) and the patch goes again at the version read; otherwise it is `StalePlan`. The
result is read back and compared with what was asked. A cluster without KEDA (no scaledobjects resource)
has no ScaledObjects; one that forbids reading autoscalers cannot tell whether a scale would stick.
"""

from __future__ import annotations

from typing import Any

from runbook.backends.base import Autoscaler
from runbook.backends.kubernetes.api import KubeApi
from runbook.errors import CommandFailed, Conflict, InvalidInput, NotFound, StalePlan

MERGE_PATCH = "application/merge-patch+json"
KEDA_GROUP, KEDA_VERSION, SCALEDOBJECTS = "keda.sh", "v1alpha1", "scaledobjects"
PAUSED_REPLICAS = "autoscaling.keda.sh/paused-replicas"
SAME_PLAN_ATTEMPTS = 5  # as cluster.py's: a status write racing each patch again is not an edit either
_KINDS = {"statefulset": "StatefulSet", "deployment": "Deployment"}


def _targets(ref: dict, kind: str, name: str) -> bool:
    """A scaleTargetRef naming this workload (KEDA's kind defaults to Deployment, as KEDA reads it)."""
    wanted = _KINDS.get(kind, "")
    return (ref.get("name") == name and (ref.get("kind") or "Deployment") == wanted
            and str(ref.get("apiVersion") or "apps/v1").startswith("apps/"))


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def hpa_from(obj: dict, target: str) -> Autoscaler:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    return Autoscaler("hpa", str(meta.get("name") or ""), str(meta.get("namespace") or ""), target,
                      min_replicas=_int(spec.get("minReplicas", 1)), max_replicas=_int(spec.get("maxReplicas")),
                      resource_version=str(meta.get("resourceVersion") or ""))


def scaledobject_from(obj: dict, target: str) -> Autoscaler:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    raw = (meta.get("annotations") or {}).get(PAUSED_REPLICAS)
    where = f"scaledobject/{meta.get('name')} in {meta.get('namespace')}"
    if raw is not None and not str(raw).isdigit():
        raise InvalidInput(f"{where}: {PAUSED_REPLICAS} is {raw!r}, not a whole number; fix or remove it by hand")
    return Autoscaler("scaledobject", str(meta.get("name") or ""), str(meta.get("namespace") or ""), target,
                      min_replicas=_int(spec.get("minReplicaCount", 0)), max_replicas=_int(spec.get("maxReplicaCount", 100)),
                      paused_replicas=None if raw is None else int(raw),
                      resource_version=str(meta.get("resourceVersion") or ""))


def _owned_by_scaledobject(obj: dict) -> bool:
    return any(ref.get("kind") == "ScaledObject" for ref in (obj.get("metadata") or {}).get("ownerReferences") or [])


def _same(a: Autoscaler, b: Autoscaler) -> bool:
    return (a.min_replicas, a.max_replicas, a.paused_replicas) == (b.min_replicas, b.max_replicas, b.paused_replicas)


class Autoscalers:
    """The autoscalers of one cluster, over the official client's autoscaling/v2 and custom-object APIs."""

    def __init__(self, api: KubeApi):
        from kubernetes import client

        self.api = api
        self.hpas = client.AutoscalingV2Api(api.client)
        self.custom = client.CustomObjectsApi(api.client)

    def for_workload(self, namespace: str, kind: str, name: str) -> list[Autoscaler]:
        target = f"{kind}/{name}"
        found = []
        listed = self.api.call(f"list the HorizontalPodAutoscalers in {namespace}",
                               self.hpas.list_namespaced_horizontal_pod_autoscaler, namespace)
        for obj in listed.get("items") or []:
            if _targets((obj.get("spec") or {}).get("scaleTargetRef") or {}, kind, name) and \
                    not _owned_by_scaledobject(obj):
                found.append(hpa_from(obj, target))
        try:
            listed = self.api.call(f"list the KEDA ScaledObjects in {namespace}",
                                   self.custom.list_namespaced_custom_object, KEDA_GROUP, KEDA_VERSION, namespace,
                                   SCALEDOBJECTS)
        except NotFound:
            listed = {}  # KEDA is not installed: no ScaledObjects
        for obj in listed.get("items") or []:
            if _targets((obj.get("spec") or {}).get("scaleTargetRef") or {}, kind, name):
                found.append(scaledobject_from(obj, target))
        return sorted(found, key=lambda a: (a.kind, a.name))

    def _read(self, namespace: str, kind: str, name: str) -> dict:
        if kind == "hpa":
            return self.api.call(f"read hpa/{name} in {namespace}",
                                 self.hpas.read_namespaced_horizontal_pod_autoscaler, name, namespace)
        return self.api.call(f"read scaledobject/{name} in {namespace}", self.custom.get_namespaced_custom_object,
                             KEDA_GROUP, KEDA_VERSION, namespace, SCALEDOBJECTS, name)

    def set(self, namespace: str, kind: str, name: str, *, min_replicas: int | None = None,
            max_replicas: int | None = None, paused_replicas: int | None = None, dry_run: bool = False,
            expected: Autoscaler | None = None, resource_version: str | None = None) -> Autoscaler:
        if kind not in ("hpa", "scaledobject"):
            raise InvalidInput(f"unknown autoscaler kind {kind!r}; one of hpa, scaledobject")
        what = f"change {kind}/{name} in {namespace}"
        version = resource_version
        target = expected.target if expected is not None else ""
        if not version:
            current = (hpa_from if kind == "hpa" else scaledobject_from)(self._read(namespace, kind, name), target)
            if expected is not None and not _same(current, expected):
                raise StalePlan(f"{what}: it changed since this change was planned (now {current.shown()}, "
                                f"planned from {expected.shown()})")
            version = current.resource_version
        if kind == "hpa":
            if min_replicas is None or max_replicas is None or not 1 <= min_replicas <= max_replicas:
                raise InvalidInput(f"{what}: give 1 ≤ minReplicas ≤ maxReplicas (got {min_replicas}, {max_replicas})")
            body: dict = {"metadata": {"resourceVersion": version},
                          "spec": {"minReplicas": min_replicas, "maxReplicas": max_replicas}}
            patch: Any = (self.hpas.patch_namespaced_horizontal_pod_autoscaler, name, namespace)
        else:
            value = None if paused_replicas is None else str(int(paused_replicas))
            body = {"metadata": {"resourceVersion": version, "annotations": {PAUSED_REPLICAS: value}}}
            patch = (self.custom.patch_namespaced_custom_object, KEDA_GROUP, KEDA_VERSION, namespace, SCALEDOBJECTS,
                     name)
        for attempt in range(1, SAME_PLAN_ATTEMPTS + 1):
            try:
                result = self.api.call(what, *patch, body, dry_run="All" if dry_run else None,
                                       _content_type=MERGE_PATCH)
                break
            except Conflict as exc:
                now = (hpa_from if kind == "hpa" else scaledobject_from)(self._read(namespace, kind, name), target)
                asked = (now.min_replicas, now.max_replicas) == (min_replicas, max_replicas) if kind == "hpa" else \
                    now.paused_replicas == paused_replicas
                if getattr(exc, "attempts", 1) > 1 and asked and not dry_run:
                    return now  # our lost earlier attempt landed
                if expected is not None and _same(now, expected) and attempt < SAME_PLAN_ATTEMPTS:
                    # As planned: only the status moved the version (the HPA controller writes it as the
                    # replicas move, KEDA's operator likewise), so the patch goes again at the version read.
                    body["metadata"]["resourceVersion"] = now.resource_version
                    continue
                raise StalePlan(f"{what}: it changed since this change was planned (now {now.shown()})") from None
        got = (hpa_from if kind == "hpa" else scaledobject_from)(result, target)
        ok = (got.min_replicas, got.max_replicas) == (min_replicas, max_replicas) if kind == "hpa" else \
            got.paused_replicas == paused_replicas
        if not ok:
            verb = "would store" if dry_run else "stored"
            raise CommandFailed(f"{what}: the API server {verb} {got.shown()} instead of what was asked (an "
                                "admission webhook rewrote it?)")
        return got
