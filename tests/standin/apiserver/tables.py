"""Server-side printing: the `meta.k8s.io/v1` Table that `kubectl get` asks for and prints.

kubectl has no client-side printers for built-in types any more; it shows these rows as sent.
"""

from __future__ import annotations

import datetime as dt

from tests.standin.apiserver.controllers import is_ready
from tests.standin.apiserver.store import now_utc


def _age(obj: dict) -> str:
    created = obj["metadata"].get("creationTimestamp")
    if not created:
        return "<unknown>"
    seconds = int((now_utc() - dt.datetime.fromisoformat(created.replace("Z", "+00:00"))).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _column(name: str, kind: str = "string", priority: int = 0, fmt: str = "") -> dict:
    return {"name": name, "type": kind, "format": fmt, "description": name, "priority": priority}


def _pod_row(pod: dict) -> list:
    statuses = pod.get("status", {}).get("containerStatuses", [])
    ready = sum(1 for c in statuses if c.get("ready"))
    phase = pod.get("status", {}).get("phase", "Pending")
    status = "Terminating" if pod["metadata"].get("deletionTimestamp") else phase
    return [pod["metadata"]["name"], f"{ready}/{len(pod['spec'].get('containers', []))}", status,
            sum(c.get("restartCount", 0) for c in statuses), _age(pod), pod.get("status", {}).get("podIP", "<none>"),
            pod["spec"].get("nodeName", "<none>")]


def _workload_row(obj: dict) -> list:
    status = obj.get("status", {})
    if obj["kind"] == "DaemonSet":
        return [obj["metadata"]["name"], status.get("desiredNumberScheduled", 0), status.get("numberReady", 0), _age(obj)]
    return [obj["metadata"]["name"], f"{status.get('readyReplicas', 0)}/{obj['spec'].get('replicas', 1)}", _age(obj)]


def table(kind: str, items: list[dict], revision: str, include: str) -> dict:
    if kind == "Pod":
        columns = [_column("Name", fmt="name"), _column("Ready"), _column("Status"), _column("Restarts", "integer"),
                   _column("Age"), _column("IP", priority=1), _column("Node", priority=1)]
        cells = [_pod_row(p) for p in items]
    elif kind == "DaemonSet":
        columns = [_column("Name", fmt="name"), _column("Desired", "integer"), _column("Ready", "integer"), _column("Age")]
        cells = [_workload_row(o) for o in items]
    elif kind in ("StatefulSet", "Deployment"):
        columns = [_column("Name", fmt="name"), _column("Ready"), _column("Age")]
        cells = [_workload_row(o) for o in items]
    elif kind == "Node":
        columns = [_column("Name", fmt="name"), _column("Status"), _column("Age")]
        cells = [[n["metadata"]["name"], ("Ready" if is_ready(n) else "NotReady")
                  + (",SchedulingDisabled" if n.get("spec", {}).get("unschedulable") else ""), _age(n)] for n in items]
    elif kind == "ConfigMap":
        columns = [_column("Name", fmt="name"), _column("Data", "integer"), _column("Age")]
        cells = [[o["metadata"]["name"], len(o.get("data") or {}) + len(o.get("binaryData") or {}), _age(o)]
                 for o in items]
    elif kind == "HorizontalPodAutoscaler":
        columns = [_column("Name", fmt="name"), _column("Reference"), _column("MinPods", "integer"),
                   _column("MaxPods", "integer"), _column("Replicas", "integer"), _column("Age")]
        cells = [[o["metadata"]["name"], "{kind}/{name}".format(**o["spec"]["scaleTargetRef"]),
                  o["spec"].get("minReplicas", 1), o["spec"]["maxReplicas"],
                  (o.get("status") or {}).get("currentReplicas", 0), _age(o)] for o in items]
    else:
        columns = [_column("Name", fmt="name"), _column("Age")]
        cells = [[o["metadata"]["name"], _age(o)] for o in items]
    rows = []
    for obj, row in zip(items, cells):
        entry: dict = {"cells": row}
        if include == "Object":
            entry["object"] = obj
        elif include != "None":
            entry["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                               "metadata": obj["metadata"]}
        rows.append(entry)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": revision},
            "columnDefinitions": columns, "rows": rows}
