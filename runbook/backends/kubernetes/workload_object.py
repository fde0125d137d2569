"""One workload as the API returns it (pod template, nodeSelector, resources), for readers that need more
than `Workload` carries: `runbook advise` lints its vLLM command line. A read, never a change."""

from __future__ import annotations

import re
from typing import Any

from runbook.errors import InvalidInput

# kubectl's names for the kinds, and the AppsV1Api method that reads each.
_READ = {"statefulset": "read_namespaced_stateful_set", "sts": "read_namespaced_stateful_set",
         "deployment": "read_namespaced_deployment", "deploy": "read_namespaced_deployment",
         "daemonset": "read_namespaced_daemon_set", "ds": "read_namespaced_daemon_set"}
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
KINDS = {"read_namespaced_stateful_set": "StatefulSet", "read_namespaced_deployment": "Deployment",
         "read_namespaced_daemon_set": "DaemonSet"}


def parse_ref(ref: str) -> tuple[str, str]:
    """`statefulset/vllm-server` → ("statefulset", "vllm-server"); the kind as kubectl spells it."""
    kind, slash, name = ref.partition("/")
    kind = kind.lower().removesuffix("s") if kind.lower() not in _READ else kind.lower()
    if not slash or kind not in _READ or not name:
        raise InvalidInput(f"{ref!r} is not a workload: give KIND/NAME, e.g. statefulset/vllm-server or "
                           "deployment/vllm (kinds: statefulset, deployment, daemonset)")
    if not _NAME.fullmatch(name):
        raise InvalidInput(f"{name!r} is not a Kubernetes object name (lowercase letters, digits, '-' and '.')")
    return kind, name


def read_workload_object(cluster: Any, namespace: str, ref: str) -> dict[str, Any]:
    """The workload's object as JSON, `kind` filled in (the typed client's JSON may leave it out)."""
    kind, name = parse_ref(ref)
    if not _NAME.fullmatch(namespace) or len(namespace) > 63:
        raise InvalidInput(f"-n {namespace!r} is not a namespace name (lowercase letters, digits and '-')")
    method = _READ[kind]
    obj = cluster.api.call(f"read {kind}/{name} in {namespace}", getattr(cluster.api.apps, method), name, namespace)
    obj.setdefault("kind", KINDS[method])
    return obj
