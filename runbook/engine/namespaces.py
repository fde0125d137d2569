"""Where a run may change things: the namespace allow-list, checked at intake and on every plan.

A namespace from an alert label (`kube-system`) must never widen what a playbook touches: only
the config's `kubernetes.namespaces`, or else the playbook's own default `namespace`, allows it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from runbook.errors import Refused


def allowed_namespaces(playbook_params: Mapping[str, Any], configured: Collection[str] | None, *,
                       literal: Collection[str] = ()) -> frozenset[str]:
    """The configured list when there is one, else what the playbook itself names.

    That is its default `namespace` param and any `namespace:` written literally in a step (`literal`).
    """
    if configured is not None:
        return frozenset(str(n) for n in configured)
    default = playbook_params.get("namespace")
    named = {default} if isinstance(default, str) and default and "{" not in default else set()
    return frozenset(named | {n for n in literal if n and "{" not in n})


def playbook_literals(steps: Collection[Any]) -> list[str]:
    """The namespaces a playbook's steps name literally (`with: {namespace: llm}`), templates left out."""
    return [value for step in steps if isinstance(value := (step.with_ or {}).get("namespace"), str)]


def check_namespace(namespace: str, allowed: frozenset[str], *, source: str) -> None:
    """Refuse `namespace` unless allowed, naming where it came from and how to allow it."""
    if namespace in allowed:
        return
    known = ", ".join(sorted(allowed)) or "none"
    raise Refused("namespace", f"namespace {namespace!r} (from {source}) is not one runbook may change "
                               f"(allowed: {known}); to allow it, add it to `kubernetes.namespaces` in the config file")


def check_run_namespace(playbook_params: Mapping[str, Any], params: Mapping[str, Any],
                        configured: Collection[str] | None, *, sources: Mapping[str, str]) -> None:
    """Before a run starts: the namespace it will act in (its params, else the playbook's default) is allowed.

    `sources` says where each param came from ("alert label namespace", "--param namespace"), for the message.
    """
    namespace = params.get("namespace", playbook_params.get("namespace"))
    if namespace is None:
        return
    source = sources.get("namespace", "the playbook's default namespace param")
    check_namespace(str(namespace), allowed_namespaces(playbook_params, configured), source=source)
