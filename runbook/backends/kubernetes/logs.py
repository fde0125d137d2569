"""Pod logs on the official client: the current or the previous container's, bounded in time and bytes.

A pod whose container never restarted has no previous log: the API says 400 "previous terminated
container ... not found", which is an answer (nothing to read), not a failure of the read. Where
the pod's status already says so (restart count 0, no last termination) the read is not made.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence

from runbook.backends.base import Pod, PodLog
from runbook.backends.kubernetes.api import KubeApi
from runbook.errors import InvalidInput

READS_AT_ONCE = 16  # pods' logs read side by side (the engine's fan-out pool, by default)


def _no_previous(exc: InvalidInput) -> bool:
    failure = getattr(exc, "failure", None)
    return failure is not None and failure.status == 400 and "previous terminated container" in failure.message


def _never_restarted(pod: Pod, container: str | None) -> bool:
    """The listed status shows no container before the running one (so no previous log to read)."""
    statuses = [c for c in pod.containers if container is None or c.name == container]
    if not statuses or (container is None and len(statuses) > 1):
        return False  # not reported yet, or the API picks the container: ask it
    return all(c.restart_count == 0 and c.last_termination_reason is None for c in statuses)


def read_pod_logs(api: KubeApi, namespace: str, pods: Sequence[Pod], *, since_seconds: int, cap: int,
                  tail_lines: int | None, limit_bytes: int | None, container: str | None,
                  which: Sequence[bool], timestamps: bool) -> list[PodLog]:
    """One `PodLog` per pod and log in `which` (previous or not), in that order and the pods' order,
    read with `read_namespaced_pod_log` (at most `cap` bytes each), up to READS_AT_ONCE at a time: a
    fleet's logs are one round trip deep, not one per pod."""

    def read(asked: tuple[Pod, bool]) -> PodLog:
        pod, previous = asked
        if pod.phase == "Pending" and not previous:
            return PodLog(pod.name, "")  # no container has started: nothing was logged yet
        if previous and _never_restarted(pod, container):
            # What the API's 400 would have said, one round trip sooner.
            return PodLog(pod.name, "", absent=True, previous=True)
        kind = "previous log" if previous else "log"
        try:
            data = api.call(f"read the {kind} of {namespace}/{pod.name}", api.core.read_namespaced_pod_log,
                            pod.name, namespace, container=container, since_seconds=since_seconds,
                            tail_lines=tail_lines, limit_bytes=limit_bytes, previous=previous,
                            timestamps=timestamps, max_bytes=cap + 1)
        except InvalidInput as exc:
            if previous and _no_previous(exc):
                return PodLog(pod.name, "", absent=True, previous=True)
            raise
        return PodLog(pod.name, data[:cap].decode("utf-8", errors="replace"), len(data) >= cap, previous=previous)

    asked = [(pod, previous) for previous in which for pod in pods]
    if len(asked) <= 1:
        return [read(one) for one in asked]
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(READS_AT_ONCE, len(asked)),
                                               thread_name_prefix="runbook-logs") as pool:
        return list(pool.map(read, asked))  # the first failure is raised, as a read one after another would
