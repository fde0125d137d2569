"""The built-in actions, one module per family; importing this package registers them all."""

from runbook.actions import flow, http, k8s, k8s_changes, k8s_kill, node, prom  # noqa: F401  (registration by import)
