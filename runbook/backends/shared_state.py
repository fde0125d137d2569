"""Where a world keeps the locks and the history its guards count: the cluster's, or this machine's.

With a Kubernetes cluster, a Lease per target and the cluster's ledger of applied changes hold
across machines and replicas; without one, a local flock and the local journals do.
"""

from __future__ import annotations

from pathlib import Path

from runbook.backends.base import World
from runbook.record.journal import History
from runbook.record.locks import LocalLocks


def target_locks(world: World, state: Path):
    """A Lease per target when a Kubernetes cluster is configured (holds across machines), else a local flock."""
    from runbook.backends.kubernetes.cluster import KubernetesCluster
    from runbook.backends.kubernetes.leases import LeaseLocks

    if isinstance(world.cluster, KubernetesCluster):
        return LeaseLocks(world.cluster)
    return LocalLocks(state)


def history_for(world: World, state: Path) -> History:
    """What cooldowns and budgets count: with a Kubernetes cluster, the local journals and the cluster's
    record of applied changes (shared by every instance), else the local journals alone."""
    from runbook.backends.kubernetes.cluster import KubernetesCluster
    from runbook.backends.kubernetes.ledger import AppliedLedger
    from runbook.record.history import SharedHistory

    if isinstance(world.cluster, KubernetesCluster):
        return SharedHistory(state, AppliedLedger(world.cluster))
    return History(state)
