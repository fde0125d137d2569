"""The built-in actions, one module per family; `load_builtin()` registers them all.

The composition roots (the CLI, the webhook, the drill) call it: the registry never imports the
actions, the actions import the registry and register themselves with its decorator.
"""

from __future__ import annotations

from runbook.model.registry import BUILTIN, Registry


def load_builtin() -> Registry:
    """The registry of every built-in action, each family registered by importing its module once."""
    from runbook.actions import compose, flow, http, k8s, k8s_changes, k8s_kill, node, prom  # noqa: F401  (registration)
    from runbook.actions import k8s_route, prom_versions  # noqa: F401  (registration; issue 16, item 3)
    from runbook.actions import k8s_logs  # noqa: F401  (registration; issue 16, items 2 and 7)
    from runbook.actions import kv_memory  # noqa: F401  (registration; issue 16, item 2: latency-creep)
    from runbook.actions import k8s_restore  # noqa: F401  (registration; issue 34: capacity comes back)

    return BUILTIN
