"""The Kubernetes backend: `connect()` from the flags and the config file's `kubernetes:` section.

A kubeconfig context is used only when named (`--context`) or when it is the file's only one;
`--in-cluster` uses the pod's service account. Nothing is guessed, and the official client is
imported only once a cluster is actually configured.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pydantic

from runbook.config import Config
from runbook.errors import InvalidInput

if TYPE_CHECKING:
    from runbook.backends.kubernetes.cluster import KubernetesCluster

__all__ = ["KubernetesSection", "connect", "load_client_configuration"]

DEFAULT_KUBECONFIG = "~/.kube/config"
DEFAULT_NAMESPACE = "default"  # where a context names none, as kubectl
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class KubernetesSection(pydantic.BaseModel):
    """The `kubernetes:` section of the config file; flags override its connection fields."""

    model_config = pydantic.ConfigDict(extra="forbid")

    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool = False
    request_timeout: float = pydantic.Field(15.0, gt=0, le=300)  # seconds to wait for each answer
    connect_timeout: float = pydantic.Field(5.0, gt=0, le=60)
    retries: int = pydantic.Field(3, ge=0, le=10)  # of one request answered 429/5xx or not at all
    max_retry_wait: float = pydantic.Field(30.0, ge=0, le=600)  # seconds of backoff, in all, per request
    evict: bool = False  # delete pods through the Eviction API, which honours PodDisruptionBudgets
    lock_namespace: str | None = pydantic.Field(None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    lease_seconds: int = pydantic.Field(60, ge=10, le=3600)  # a target lock's Lease, renewed while held


def connect(config: Config, *, kubeconfig: str | None = None, context: str | None = None,
            in_cluster: bool = False) -> "KubernetesCluster | None":
    """The cluster named by the flags or the config file, or None when neither names one."""
    section = config.section_model("kubernetes", KubernetesSection)
    configured = "kubernetes" in (config.sections or {})
    kubeconfig = kubeconfig or section.kubeconfig
    context = context or section.context
    in_cluster = in_cluster or section.in_cluster
    if not (kubeconfig or context or in_cluster or configured):
        return None
    if in_cluster and (kubeconfig or context):
        raise InvalidInput("give --in-cluster or a kubeconfig context, not both (the config file's kubernetes: "
                           "section counts too)")
    configuration, chosen, namespace = load_client_configuration(kubeconfig=kubeconfig, context=context,
                                                                in_cluster=in_cluster)
    return build(configuration, section, context=chosen, namespace=namespace)


def build(configuration: Any, section: KubernetesSection, *, context: str = "",
          namespace: str = DEFAULT_NAMESPACE) -> "KubernetesCluster":
    from runbook.backends.kubernetes.api import KubeApi, Settings
    from runbook.backends.kubernetes.cluster import KubernetesCluster

    settings = Settings(connect_timeout=section.connect_timeout, request_timeout=section.request_timeout,
                        retries=section.retries, max_wait=section.max_retry_wait, evict=section.evict,
                        lock_namespace=section.lock_namespace, lease_seconds=section.lease_seconds)
    return KubernetesCluster(KubeApi(configuration, settings, context=context), settings=settings,
                             default_namespace=namespace)


def _contexts(files: list[str]) -> dict[str, str | None]:
    """Context names across the kubeconfig files, each with its namespace (None where it sets none),
    merged as kubectl does (first one wins).

    Read with runbook's own loader first: the client's plain safe_load would expand an alias
    bomb, and a key written twice would make it and us each pick one.
    """
    from runbook.files.yamlsource import load_yaml, read_yaml_text

    names: dict[str, str | None] = {}
    for file in files:
        try:
            text = read_yaml_text(Path(file).expanduser())
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"cannot read the kubeconfig {file}: {exc}") from None
        loaded = load_yaml(text, file=file, kind="kubeconfig")
        if loaded.problems:
            raise InvalidInput(f"the kubeconfig {file} is refused:\n"
                               + "\n".join(p.format(code=False) for p in sorted(loaded.problems)))
        doc = loaded.data or {}
        if not isinstance(doc, dict):
            raise InvalidInput(f"the kubeconfig {file} is not a mapping")
        for entry in doc.get("contexts") or []:
            if isinstance(entry, dict) and entry.get("name") and str(entry["name"]) not in names:
                context = entry.get("context")
                namespace = context.get("namespace") if isinstance(context, dict) else None
                names[str(entry["name"])] = str(namespace) if namespace else None
    return names


def _service_account_namespace(path: Path = SERVICE_ACCOUNT_NAMESPACE) -> str:
    """The pod's own namespace, as in-cluster clients (kubectl) default to; `default` where unreadable."""
    try:
        return path.read_text(encoding="utf-8").strip() or DEFAULT_NAMESPACE
    except OSError:
        return DEFAULT_NAMESPACE


def load_client_configuration(*, kubeconfig: str | None, context: str | None,
                              in_cluster: bool) -> tuple[Any, str, str]:
    """(a fresh `kubernetes.client.Configuration`, the context used, the namespace a command without -n
    means there, as kubectl reads it); the client's global default is untouched."""
    from kubernetes import client, config as kube_config

    configuration = client.Configuration()
    if in_cluster:
        try:
            kube_config.load_incluster_config(client_configuration=configuration)
        except kube_config.ConfigException as exc:
            raise InvalidInput(f"--in-cluster: {exc}; run runbook in a pod with a service account, or use "
                               "--kubeconfig and --context instead") from None
        configuration.retries = 0  # runbook retries itself, with Retry-After and a budget
        return configuration, "in-cluster", _service_account_namespace()
    path = kubeconfig or os.path.expanduser(DEFAULT_KUBECONFIG)
    files = [p for p in path.split(os.pathsep) if p]
    missing = [p for p in files if not Path(p).expanduser().is_file()]
    if missing or not files:
        raise InvalidInput(f"kubeconfig {', '.join(missing) or path} does not exist; give --kubeconfig (or "
                           "KUBECONFIG), or --in-cluster inside a pod")
    names = _contexts(files)
    if context is None:
        if len(names) != 1:
            listed = ", ".join(names) or "none"
            raise InvalidInput(f"the kubeconfig {path} has {len(names)} contexts ({listed}) and none was named: "
                               "pass --context NAME (or set kubernetes.context in the config file); runbook never "
                               "guesses which cluster to act on")
        context = next(iter(names))
    elif context not in names:
        raise InvalidInput(f"context {context!r} is not in the kubeconfig {path} (contexts: {', '.join(names) or 'none'})")
    try:
        kube_config.load_kube_config(config_file=path, context=context, client_configuration=configuration,
                                     persist_config=False)
    except (kube_config.ConfigException, OSError, ValueError) as exc:
        raise InvalidInput(f"cannot use context {context!r} of the kubeconfig {path}: {exc}") from None
    configuration.retries = 0  # runbook retries itself, with Retry-After and a budget
    return configuration, context, names[context] or DEFAULT_NAMESPACE
