"""RBAC as the API server evaluates it, for one ServiceAccount, read from manifests.

The test server enforces `deploy/rbac.yaml` for runbook's identity, so a test passing proves
the Role grants enough; `grants()` lets a test prove it grants nothing unused.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml


@dataclasses.dataclass(frozen=True)
class Rule:
    namespace: str | None  # None: from a ClusterRole bound cluster-wide
    groups: frozenset[str]
    resources: frozenset[str]
    verbs: frozenset[str]
    names: frozenset[str] = frozenset()

    def allows(self, verb: str, group: str, resource: str, namespace: str | None, name: str | None) -> bool:
        return ((self.namespace is None or self.namespace == namespace)
                and ("*" in self.groups or group in self.groups)
                and ("*" in self.resources or resource in self.resources
                     or ("/" in resource and f"{resource.split('/')[0]}/*" in self.resources))
                and ("*" in self.verbs or verb in self.verbs)
                and (not self.names or name in self.names))


@dataclasses.dataclass(frozen=True)
class Policy:
    user: str
    rules: tuple[Rule, ...]

    def allows(self, verb: str, group: str, resource: str, namespace: str | None, name: str | None) -> bool:
        return any(rule.allows(verb, group, resource, namespace, name) for rule in self.rules)

    def grants(self) -> set[tuple[str, str, str]]:
        """Every (group, resource, verb) some rule grants."""
        return {(g, r, v) for rule in self.rules for g in rule.groups for r in rule.resources for v in rule.verbs}


def load_policy(path: Path, *, service_account: str, namespace: str) -> Policy:
    """The rules bound to `system:serviceaccount:<namespace>:<service_account>` by the manifests in `path`."""
    docs = [d for d in yaml.safe_load_all(Path(path).read_text(encoding="utf-8")) if d]
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d.get("rules") or []
             for d in docs if d.get("kind") in ("Role", "ClusterRole")}
    rules: list[Rule] = []
    for binding in docs:
        if binding.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        bound = any(s.get("kind") == "ServiceAccount" and s.get("name") == service_account
                    and s.get("namespace", binding["metadata"].get("namespace")) == namespace
                    for s in binding.get("subjects") or [])
        if not bound:
            continue
        ref = binding["roleRef"]
        scope = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        key = (ref["kind"], scope if ref["kind"] == "Role" else None, ref["name"])
        if key not in roles:
            raise ValueError(f"{binding['kind']} {binding['metadata']['name']} refers to a missing {ref['kind']} "
                             f"{ref['name']}")
        for r in roles[key]:
            rules.append(Rule(scope, frozenset(r.get("apiGroups") or []), frozenset(r.get("resources") or []),
                              frozenset(r.get("verbs") or []), frozenset(r.get("resourceNames") or [])))
    return Policy(f"system:serviceaccount:{namespace}:{service_account}", tuple(rules))
