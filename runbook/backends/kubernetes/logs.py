"""Pod logs on the official client: the current or the previous container's, bounded in time and bytes.

A pod whose container never restarted has no previous log: the API says 400 "previous terminated
container ... not found", which is an answer (nothing to read), not a failure of the read.
"""

from __future__ import annotations

from collections.abc import Sequence

from runbook.backends.base import Pod, PodLog
from runbook.backends.kubernetes.api import KubeApi
from runbook.errors import InvalidInput


def _no_previous(exc: InvalidInput) -> bool:
    failure = getattr(exc, "failure", None)
    return failure is not None and failure.status == 400 and "previous terminated container" in failure.message


def read_pod_logs(api: KubeApi, namespace: str, pods: Sequence[Pod], *, since_seconds: int, cap: int,
                  tail_lines: int | None, limit_bytes: int | None, container: str | None,
                  previous: bool, timestamps: bool) -> list[PodLog]:
    """One `PodLog` per pod, read with `read_namespaced_pod_log` (at most `cap` bytes each)."""
    found = []
    for pod in pods:
        if pod.phase == "Pending" and not previous:
            found.append(PodLog(pod.name, ""))  # no container has started: nothing was logged yet
            continue
        which = "previous log" if previous else "log"
        try:
            data = api.call(f"read the {which} of {namespace}/{pod.name}", api.core.read_namespaced_pod_log,
                            pod.name, namespace, container=container, since_seconds=since_seconds,
                            tail_lines=tail_lines, limit_bytes=limit_bytes, previous=previous,
                            timestamps=timestamps, max_bytes=cap + 1)
        except InvalidInput as exc:
            if previous and _no_previous(exc):
                found.append(PodLog(pod.name, "", absent=True))
                continue
            raise
        truncated = len(data) >= cap
        found.append(PodLog(pod.name, data[:cap].decode("utf-8", errors="replace"), truncated))
    return found
