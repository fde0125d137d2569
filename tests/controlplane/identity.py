"""runbook's identity on the control plane: `deploy/rbac.yaml` applied to a test's namespace (as a
user applies it to theirs), and a kubeconfig holding that service account's bound token.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml

from runbook.config import Config
from tests.controlplane.plane import ControlPlane

RBAC = Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml"


def rbac_documents(namespace: str, *, change_rules: Callable[[list[dict]], list[dict]] | None = None) -> list[dict]:
    """deploy/rbac.yaml with every `namespace: llm` made `namespace` (its header says to), and the
    cluster-scoped binding named for the namespace so that tests in parallel namespaces coexist."""
    docs = [d for d in yaml.safe_load_all(RBAC.read_text(encoding="utf-8")) if d]
    for doc in docs:
        if doc["metadata"].get("namespace") == "llm":
            doc["metadata"]["namespace"] = namespace
        for subject in doc.get("subjects") or []:
            if subject.get("namespace") == "llm":
                subject["namespace"] = namespace
        if doc["kind"] == "ClusterRoleBinding":
            doc["metadata"]["name"] = f"{doc['metadata']['name']}-{namespace}"
        if doc["kind"] == "Role" and change_rules is not None:
            doc["rules"] = change_rules(doc["rules"])
    return docs


def runbook_user(namespace: str) -> str:
    """The `runbook` service account's name as the apiserver authenticates (and audits) it."""
    return f"system:serviceaccount:{namespace}:runbook"


def runbook_kubeconfig(plane: ControlPlane, namespace: str, path: Path, **rbac) -> Path:
    """deploy/rbac.yaml applied in `namespace`, and a kubeconfig (context `runbook-test`) with the
    `runbook` service account's token."""
    plane.apply(*rbac_documents(namespace, **rbac))
    return plane.kubeconfig(path, token=plane.token(namespace, "runbook"), namespace=namespace)


def connect(kubeconfig: Path, **section):
    from runbook.backends.kubernetes.connect import connect as connect_cluster

    settings = {"request_timeout": 10, "connect_timeout": 5, "retries": 2, "max_retry_wait": 10} | section
    return connect_cluster(Config(None, {"kubernetes": settings}), kubeconfig=str(kubeconfig), context="runbook-test")
