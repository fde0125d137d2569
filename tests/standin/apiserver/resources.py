"""The resources the test API server serves, and the discovery documents kubectl reads first.

Legacy (non-aggregated) discovery only: kubectl falls back to it when `/api` answers plain JSON.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    verbs: tuple[str, ...]
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


_RW = ("create", "delete", "get", "list", "patch", "update")

RESOURCES = (
    Resource("", "v1", "pods", "Pod", True, _RW, ("po",), ("log", "exec", "eviction", "status")),
    Resource("", "v1", "nodes", "Node", False, _RW, ("no",), ("status",)),
    Resource("", "v1", "events", "Event", True, _RW, ("ev",)),
    Resource("", "v1", "services", "Service", True, _RW, ("svc",)),
    Resource("", "v1", "namespaces", "Namespace", False, _RW, ("ns",)),
    Resource("", "v1", "configmaps", "ConfigMap", True, _RW, ("cm",)),
    Resource("apps", "v1", "statefulsets", "StatefulSet", True, _RW, ("sts",), ("scale", "status")),
    Resource("apps", "v1", "deployments", "Deployment", True, _RW, ("deploy",), ("scale", "status")),
    Resource("apps", "v1", "daemonsets", "DaemonSet", True, _RW, ("ds",), ("status",)),
    Resource("coordination.k8s.io", "v1", "leases", "Lease", True, _RW),
    Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, _RW, ("pdb",)),
    # Routes a canary rollback moves (issue 16, item 3): ingress-nginx canaries and Gateway API routes.
    Resource("networking.k8s.io", "v1", "ingresses", "Ingress", True, _RW, ("ing",)),
    Resource("gateway.networking.k8s.io", "v1", "httproutes", "HTTPRoute", True, _RW),
    # What else scales a workload (issue 16, item 8): HPAs and KEDA's ScaledObject custom resource.
    Resource("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", True, _RW, ("hpa",),
             ("status",)),
    Resource("keda.sh", "v1alpha1", "scaledobjects", "ScaledObject", True, _RW, ("so",), ("status",)),
)

BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}
BY_KIND = {r.kind: r for r in RESOURCES}

# What a subresource is, as discovery describes it (kind, verbs).
_SUBRESOURCES = {
    "log": ("Pod", ("get",)),
    "exec": ("PodExecOptions", ("create", "get")),
    "eviction": ("Eviction", ("create",)),
    "status": (None, ("get", "patch", "update")),
    "scale": ("Scale", ("get", "patch", "update")),
}


def api_versions(host: str) -> dict:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}]}


def api_group_list() -> dict:
    groups = sorted({(r.group, r.version) for r in RESOURCES if r.group})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
         "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v}} for g, v in groups]}


def api_group(group: str) -> dict | None:
    versions = sorted({r.version for r in RESOURCES if r.group == group})
    if not versions:
        return None
    listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": listed, "preferredVersion": listed[0]}


def resource_list(group: str, version: str) -> dict | None:
    chosen = [r for r in RESOURCES if r.group == group and r.version == version]
    if not chosen:
        return None
    items = []
    for r in chosen:
        items.append({"name": r.plural, "singularName": r.kind.lower(), "namespaced": r.namespaced, "kind": r.kind,
                      "verbs": list(r.verbs) + ["deletecollection", "watch"], "shortNames": list(r.short_names)}
                     | ({"categories": ["all"]} if r.kind in ("Pod", "StatefulSet", "Deployment", "DaemonSet") else {}))
        for sub in r.subresources:
            kind, verbs = _SUBRESOURCES[sub]
            entry = {"name": f"{r.plural}/{sub}", "singularName": "", "namespaced": r.namespaced,
                     "kind": kind or r.kind, "verbs": list(verbs)}
            if sub == "scale":
                entry |= {"group": "autoscaling", "version": "v1"}
            if sub == "eviction":
                entry |= {"group": "policy", "version": "v1"}
            items.append(entry)
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}" if group else version,
            "resources": items}


VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-runbook-test", "gitCommit": "0" * 40,
           "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23", "compiler": "gc",
           "platform": "linux/amd64"}
