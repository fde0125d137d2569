"""Kubernetes objects (as the API's JSON) read into the plain values of `runbook.backends.base`.

Pure functions: no client, no I/O. Missing fields read as the API's defaults, never as health.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import Any

from runbook.backends.base import ContainerSpec, ContainerStatus, EnvVar, NodeInfo, Pod, Workload
from runbook.errors import InvalidInput

# A label key: optional DNS prefix and a name; a value: up to 63 of [A-Za-z0-9_.-], alphanumeric ends.
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def parse_time(text: Any) -> dt.datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def micro_time(at: dt.datetime) -> str:
    """A `MicroTime` as the API writes it: RFC 3339 with microseconds, in UTC."""
    return at.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def selector_text(selector: Mapping[str, str]) -> str:
    """`{app: vllm}` as `app=vllm`; an empty or malformed selector is refused, never "all pods"."""
    if not selector:
        raise InvalidInput("an empty label selector would match every pod in the namespace; give at least one key=value")
    for key, value in selector.items():
        if not _LABEL_KEY.match(str(key)) or not _LABEL_VALUE.match(str(value)):
            raise InvalidInput(f"{key}={value} is not a valid label selector term (keys and values are at most 63 "
                               "letters, digits, '-', '_' or '.')")
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


def _owner(meta: Mapping[str, Any]) -> str:
    refs = [r for r in meta.get("ownerReferences") or [] if r.get("controller")]
    if not refs:
        return ""
    kind, name = refs[0].get("kind", ""), refs[0].get("name", "")
    labels = meta.get("labels") or {}
    template_hash = labels.get("pod-template-hash")
    # A Deployment's pods belong to a ReplicaSet named `<deployment>-<pod-template-hash>`.
    if kind == "ReplicaSet" and template_hash and name.endswith(f"-{template_hash}"):
        return f"deployment/{name[: -len(template_hash) - 1]}"
    return f"{kind.lower()}/{name}"


def _condition(obj: Mapping[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in (obj.get("status") or {}).get("conditions") or [])


def _container_status(raw: Mapping[str, Any]) -> ContainerStatus:
    # The last termination: the previous run's (lastState), else the current one if it has ended.
    terminated = (raw.get("lastState") or {}).get("terminated") or (raw.get("state") or {}).get("terminated") or {}
    return ContainerStatus(name=str(raw.get("name", "")), ready=bool(raw.get("ready")),
                           restart_count=int(raw.get("restartCount") or 0), container_id=str(raw.get("containerID") or ""),
                           last_termination_reason=terminated.get("reason") or None,
                           last_termination_at=parse_time(terminated.get("finishedAt")))


def pod_from(obj: Mapping[str, Any]) -> Pod:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    return Pod(name=meta.get("name", ""), namespace=meta.get("namespace", ""), uid=meta.get("uid", ""),
               phase=status.get("phase") or "Unknown", ready=_condition(obj, "Ready"), node=spec.get("nodeName") or "",
               ip=status.get("podIP") or "", labels=dict(meta.get("labels") or {}),
               containers=tuple(_container_status(c) for c in status.get("containerStatuses") or []),
               owner=_owner(meta), deleting=meta.get("deletionTimestamp") is not None)


def workload_selector(kind: str, obj: Mapping[str, Any]) -> dict[str, str]:
    selector = (obj.get("spec") or {}).get("selector") or {}
    name = (obj.get("metadata") or {}).get("name", "")
    if selector.get("matchExpressions"):
        # Listing by matchLabels alone would select more pods than the workload owns.
        raise InvalidInput(f"{kind}/{name} selects its pods with matchExpressions, which runbook cannot follow "
                           "safely; give the step a `selector` instead")
    labels = dict(selector.get("matchLabels") or {})
    if not labels:
        raise InvalidInput(f"{kind}/{name} has no matchLabels selector")
    return labels


def _value_from(ref: Mapping[str, Any]) -> str:
    """Where a `valueFrom` points, in words; what it points at (a Secret's value) is never read."""
    for kind in ("configMapKeyRef", "secretKeyRef"):
        if kind in ref:
            key = ref.get(kind) or {}
            return f"{kind} {key.get('name', '')}/{key.get('key', '')}"
    if "fieldRef" in ref:
        return f"fieldRef {(ref.get('fieldRef') or {}).get('fieldPath', '')}"
    if "resourceFieldRef" in ref:
        field = ref.get("resourceFieldRef") or {}
        of = f" of {field['containerName']}" if field.get("containerName") else ""
        return f"resourceFieldRef {field.get('resource', '')}{of}"
    return " ".join(sorted(ref)) or "valueFrom"


def env_from(raw: Any) -> tuple[EnvVar, ...]:
    """A container's `env` list: written values as written (absent: ""), valueFrom as where it points."""
    return tuple(EnvVar(str(e.get("name", "")), None, _value_from(e["valueFrom"])) if e.get("valueFrom")
                 else EnvVar(str(e.get("name", "")), str(e.get("value") or ""))
                 for e in raw or [] if isinstance(e, Mapping))


def container_from(raw: Mapping[str, Any]) -> ContainerSpec:
    return ContainerSpec(raw.get("name", ""), tuple(raw.get("command") or ()), tuple(raw.get("args") or ()),
                         env_from(raw.get("env")))


def workload_from(kind: str, obj: Mapping[str, Any]) -> Workload:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    if kind == "daemonset":
        replicas, ready = int(status.get("desiredNumberScheduled") or 0), int(status.get("numberReady") or 0)
    else:
        replicas, ready = int(spec.get("replicas", 1)), int(status.get("readyReplicas") or 0)
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    return Workload(kind=kind, name=meta.get("name", ""), namespace=meta.get("namespace", ""), replicas=replicas,
                    ready_replicas=ready, selector=workload_selector(kind, obj),
                    resource_version=str(meta.get("resourceVersion") or ""),
                    containers=tuple(container_from(c) for c in containers),
                    labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
                    annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()})


def node_from(obj: Mapping[str, Any]) -> NodeInfo:
    return NodeInfo(name=(obj.get("metadata") or {}).get("name", ""), ready=_condition(obj, "Ready"),
                    unschedulable=bool((obj.get("spec") or {}).get("unschedulable")))


def exit_status(text: str) -> tuple[int | None, str]:
    """(exit code, why not) from the Status an exec sends on its error channel.

    Success → 0; NonZeroExitCode → its ExitCode cause; anything else (the command could not start,
    a cause that is no number) → None and the Status's message.
    """
    import json

    try:
        doc = json.loads(text)
    except ValueError:
        return None, f"unreadable exit status {text[:200]!r}"
    if not isinstance(doc, dict):
        return None, f"unreadable exit status {text[:200]!r}"
    if doc.get("status") == "Success":
        return 0, ""
    message = str(doc.get("message") or doc.get("reason") or "the command failed")
    if doc.get("reason") == "NonZeroExitCode":
        for cause in (doc.get("details") or {}).get("causes") or []:
            if cause.get("reason") == "ExitCode" and str(cause.get("message", "")).isdigit():
                return int(cause["message"]), ""
    return None, message
