"""`Cluster` on the official Kubernetes client: pods, workloads, scale, args, deletes, exec, logs.

Every change is conditional: scale and args patches carry the resourceVersion their plan was
computed from, and pod deletes carry the inspected pod's uid. A 409 is read again: where what the
plan rests on (the replicas, the container) is still as planned, only something else moved the
version (a controller writing the status as it rolls or scales, an annotation) and the patch is
sent again at the version just read; otherwise it is `StalePlan`, for the engine to plan again.
`dry_run` is the server-side `dryRun=All`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from runbook.backends.base import CommandResult, ContainerSpec, NodeInfo, Pod, PodLog, Workload, logs_asked
from runbook.backends.kubernetes.api import ApiFailure, KubeApi, Settings
from runbook.backends.kubernetes.pod_exec import Executor
from runbook.backends.kubernetes.logs import read_pod_logs
from runbook.backends.kubernetes.objects import node_from, pod_from, selector_text, workload_from
from runbook.errors import BackendUnavailable, CommandFailed, Conflict, InvalidInput, NotFound, Refused, StalePlan

PAGE = 500  # pods per list request
MAX_LOG_BYTES = 64 * 1024 * 1024  # per pod, when the caller sets no limit
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
_METHODS = {"statefulset": "stateful_set", "deployment": "deployment", "daemonset": "daemon_set"}
# Patches sent again at a fresh version when the 409 came from a change the plan does not rest on
# (a controller's status writes while pods come and go); past that, the plan is stale after all.
SAME_PLAN_ATTEMPTS = 5


def _env_note(spec: ContainerSpec, other: ContainerSpec | None) -> str:
    """The env vars that differ from `other`, by name only: their values may be secrets."""
    if other is None or spec.env == other.env:
        return ""
    names = sorted({v.name for v in set(spec.env) ^ set(other.env)})
    return f", env {', '.join(names)} differing"


def _blocked_by_pdb(failure: ApiFailure) -> bool:
    return failure.status == 429 and (any(c.get("reason") == "DisruptionBudget" for c in failure.causes)
                                      or "disruption budget" in failure.message.lower())


class KubernetesCluster:
    def __init__(self, api: KubeApi, *, settings: Settings, default_namespace: str = "default"):
        self.api = api
        self.settings = settings
        # What a command given no namespace means, as kubectl reads it: the context's, else "default".
        self.default_namespace = default_namespace
        self.executor = Executor(api.configuration, host=api.host)

    def describe(self) -> str:
        """Which cluster this is, for the start-up log and the journal."""
        return self.api.describe()

    def _apps(self, verb: str, kind: str, suffix: str = "") -> Any:
        if kind not in _METHODS:
            raise InvalidInput(f"unknown workload kind {kind!r}; one of {', '.join(_METHODS)}")
        return getattr(self.api.apps, f"{verb}_namespaced_{_METHODS[kind]}{suffix}")

    # -- reads ------------------------------------------------------------------------------

    def list_pods(self, namespace: str, selector: Mapping[str, str]) -> list[Pod]:
        text = selector_text(selector)
        items: list[dict] = []
        token = None
        while True:
            extra = {"_continue": token} if token else {}
            page = self.api.call(f"list pods {text} in {namespace}", self.api.core.list_namespaced_pod, namespace,
                                 label_selector=text, limit=PAGE, **extra)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return [pod_from(item) for item in items]

    def _read_workload(self, namespace: str, kind: str, name: str) -> dict:
        return self.api.call(f"read {kind}/{name} in {namespace}", self._apps("read", kind), name, namespace)

    def get_workload(self, namespace: str, kind: str, name: str) -> Workload:
        return workload_from(kind, self._read_workload(namespace, kind, name))

    def get_node(self, name: str) -> NodeInfo:
        return node_from(self.api.call(f"read node {name}", self.api.core.read_node, name))

    # -- changes ----------------------------------------------------------------------------

    def scale(self, namespace: str, kind: str, name: str, replicas: int, *, dry_run: bool = False,
              expected_replicas: int | None = None, resource_version: str | None = None) -> Workload:
        """Set replicas through the scale subresource, conditional on the plan's baseline.

        The patch carries `resource_version` (the version the plan read) or, without one, the
        version read just before; a workload no longer at `expected_replicas` is not touched.
        A 409 means the workload changed since: `StalePlan`, for the engine to plan again —
        unless a lost earlier attempt of this very call already set the replicas asked for.
        """
        if kind == "daemonset":
            raise InvalidInput(f"daemonset/{name}: a DaemonSet has no replica count to scale")
        if replicas < 0:
            raise InvalidInput(f"cannot scale {kind}/{name} to {replicas} replicas")
        what = f"scale {kind}/{name} in {namespace} to {replicas}"
        read, patch = self._apps("read", kind, "_scale"), self._apps("patch", kind, "_scale")
        version = resource_version
        if not version:
            current = self.api.call(f"read the scale of {kind}/{name} in {namespace}", read, name, namespace)
            now = int((current.get("spec") or {}).get("replicas") or 0)
            if expected_replicas is not None and now != expected_replicas:
                raise StalePlan(f"{what}: {kind}/{name} now has {now} replicas, not the {expected_replicas} this "
                                "change was planned from (someone else scaled it)")
            version = (current.get("metadata") or {}).get("resourceVersion")
        for attempt in range(1, SAME_PLAN_ATTEMPTS + 1):
            body = {"metadata": {"resourceVersion": version}, "spec": {"replicas": replicas}}
            try:
                result = self.api.call(what, patch, name, namespace, body, dry_run="All" if dry_run else None,
                                       _content_type=MERGE_PATCH)
                break
            except Conflict as exc:
                current = self.api.call(f"read the scale of {kind}/{name} in {namespace}", read, name, namespace)
                now = int((current.get("spec") or {}).get("replicas") or 0)
                if getattr(exc, "attempts", 1) > 1 and now == replicas and not dry_run:
                    return self.get_workload(namespace, kind, name)  # our lost earlier attempt landed
                fresh = (current.get("metadata") or {}).get("resourceVersion")
                if expected_replicas is not None and now == expected_replicas and attempt < SAME_PLAN_ATTEMPTS:
                    version = fresh  # still at the planned replicas: only the status (or metadata) moved
                    continue
                raise StalePlan(f"{what}: {kind}/{name} changed since this change was planned (it has {now} "
                                f"replicas now, version {fresh} instead of {version})") from None
        workload = self.get_workload(namespace, kind, name)
        if dry_run:
            return dataclasses.replace(workload, replicas=int((result.get("spec") or {}).get("replicas", replicas)))
        return workload

    def set_container_argv(self, namespace: str, kind: str, name: str, container: str, *,
                           command: Sequence[str] | None, args: Sequence[str] | None, dry_run: bool = False,
                           expected: ContainerSpec | None = None, resource_version: str | None = None,
                           env: Mapping[str, str] | None = None) -> Workload:
        """Replace exactly this container's command and/or args, set the values of the env vars in
        `env`, and nothing else.

        A strategic merge patch merges `containers` by name, replaces the `args` list whole and merges
        `env` by name, so the other containers, fields and env entries stay as they are. Conditional as
        `scale` is, the baseline being the container as planned (`expected`: command, args and env)
        and the plan's version. An env var must already be there with a written value.
        """
        if command is None and args is None and not env:
            return self.get_workload(namespace, kind, name)
        what = f"set the command line of {kind}/{name}/{container} in {namespace}"
        patch = self._apps("patch", kind)
        version = resource_version
        wanted = None
        baseline = expected  # the container a 409 is judged against
        if not version:
            current = self._read_workload(namespace, kind, name)
            spec = workload_from(kind, current).container(container)
            # Unplanned, the container read here is the baseline: a controller's status write between
            # this read and the patch (a new Deployment's, at once) is no change to it.
            baseline = expected or spec
            if expected is not None and (spec.command, spec.args, spec.env) != (expected.command, expected.args,
                                                                                expected.env):
                raise StalePlan(f"{what}: the container's command line changed since this change was planned "
                                f"(now {' '.join(spec.command + spec.args)}{_env_note(spec, expected)})")
            version = (current.get("metadata") or {}).get("resourceVersion")
            wanted = spec.with_env_values(env or {})  # InvalidInput: not there, or set from elsewhere
        elif env:
            if expected is None:
                raise InvalidInput(f"{what}: setting env vars at a resourceVersion needs the planned container")
            wanted = expected.with_env_values(env)
        entry: dict[str, Any] = {"name": container}
        if command is not None:
            entry["command"] = list(command)
        if args is not None:
            entry["args"] = list(args)
        if env:
            entry["env"] = [{"name": key, "value": value} for key, value in env.items()]
        body = {"metadata": {"resourceVersion": version}, "spec": {"template": {"spec": {"containers": [entry]}}}}

        def as_asked(spec: ContainerSpec) -> bool:
            return ((command is None or spec.command == tuple(command)) and (args is None or spec.args == tuple(args))
                    and (not env or (wanted is not None and spec.env == wanted.env)))

        for attempt in range(1, SAME_PLAN_ATTEMPTS + 1):
            try:
                result = self.api.call(what, patch, name, namespace, body, dry_run="All" if dry_run else None,
                                       _content_type=STRATEGIC_PATCH)
                break
            except Conflict as exc:
                workload = workload_from(kind, self._read_workload(namespace, kind, name))
                spec = workload.container(container)
                if getattr(exc, "attempts", 1) > 1 and as_asked(spec) and not dry_run:
                    return workload  # our lost earlier attempt landed
                if baseline is not None and attempt < SAME_PLAN_ATTEMPTS and \
                        (spec.command, spec.args, spec.env) == (baseline.command, baseline.args, baseline.env):
                    # The container is as planned: only the status (or another field) moved the version.
                    body["metadata"]["resourceVersion"] = workload.resource_version
                    continue
                raise StalePlan(f"{what}: {kind}/{name} changed since this change was planned (the container's "
                                f"command line is now {' '.join(spec.command + spec.args)}"
                                f"{_env_note(spec, expected)})") from None
        try:
            workload = workload_from(kind, result)
            got = workload.container(container)
        except (InvalidInput, NotFound) as exc:
            raise CommandFailed(f"{what}: the API server's answer cannot be read back ({exc})") from None
        if not as_asked(got):
            verb = "would store" if dry_run else "stored"
            # A change was (or would be) stored, but not the one planned: a backend failure, never bad input.
            raise CommandFailed(f"{what}: the API server {verb} {' '.join(got.command + got.args)}"
                                f"{_env_note(got, wanted)} instead of the command line asked for (an admission "
                                "webhook rewrote it?)")
        return workload

    def delete_pod(self, namespace: str, name: str, *, uid: str, dry_run: bool = False,
                   evict: bool | None = None) -> None:
        """Delete the pod only while it is still the one inspected (uid precondition).

        With `evict` (default: the `kubernetes.evict` setting) through the Eviction API instead,
        which honours PodDisruptionBudgets. A retry after a lost response that meets the
        replacement (409) or nothing (404) knows the first attempt did the deletion.
        """
        if not uid:
            raise InvalidInput(f"deleting pod {namespace}/{name} needs the inspected pod's uid")
        if self.settings.evict if evict is None else evict:
            return self.evict_pod(namespace, name, uid=uid, dry_run=dry_run)
        what = f"delete pod {namespace}/{name}"
        body = {"preconditions": {"uid": uid}}
        try:
            self.api.call(what, self.api.core.delete_namespaced_pod, name, namespace, body=body,
                          dry_run="All" if dry_run else None)
        except (Conflict, NotFound) as exc:
            self._settle(exc, namespace, name, uid)

    def evict_pod(self, namespace: str, name: str, *, uid: str, dry_run: bool = False) -> None:
        what = f"evict pod {namespace}/{name}"
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace},
                "deleteOptions": {"preconditions": {"uid": uid}}}
        try:
            self.api.call(what, self.api.core.create_namespaced_pod_eviction, name, namespace, body,
                          dry_run="All" if dry_run else None, retry=lambda failure: not _blocked_by_pdb(failure))
        except (Conflict, NotFound) as exc:
            self._settle(exc, namespace, name, uid)
        except BackendUnavailable as exc:
            failure = getattr(exc, "failure", None)
            if failure is not None and _blocked_by_pdb(failure):
                why = "; ".join(c.get("message", "") for c in failure.causes if c.get("message")) or failure.message
                raise Refused("pdb", f"evicting {namespace}/{name} would violate its PodDisruptionBudget ({why}); "
                                     "wait until more pods are ready, or escalate") from None
            raise

    @staticmethod
    def _settle(exc: Exception, namespace: str, name: str, uid: str) -> None:
        """A delete answered 409 or 404: done by an earlier attempt of this call, or refused."""
        retried = getattr(exc, "attempts", 1) > 1
        if retried:
            return  # the lost first attempt deleted it; a replacement with a new uid is spared
        if isinstance(exc, NotFound):
            raise NotFound(f"pod {namespace}/{name} no longer exists (already deleted?)") from None
        raise Conflict(f"pod {namespace}/{name} is no longer the pod that was inspected (uid {uid}): it was "
                       f"replaced, and the replacement is not deleted ({exc})") from None

    # -- traffic routes (issue 16, item 3) ----------------------------------------------------

    def _routes(self) -> Any:
        from runbook.backends.kubernetes.routes import Routes

        if getattr(self, "_route_api", None) is None:
            self._route_api = Routes(self.api)
        return self._route_api

    def get_route(self, namespace: str, kind: str, name: str) -> Any:
        return self._routes().get(namespace, kind, name)

    def set_route(self, namespace: str, kind: str, name: str, **change: Any) -> Any:
        return self._routes().set(namespace, kind, name, **change)

    # -- autoscalers (issue 16, item 8) --------------------------------------------------------

    def _autoscalers(self) -> Any:
        from runbook.backends.kubernetes.autoscalers import Autoscalers

        if getattr(self, "_autoscaler_api", None) is None:
            self._autoscaler_api = Autoscalers(self.api)
        return self._autoscaler_api

    def autoscalers(self, namespace: str, kind: str, name: str) -> Any:
        return self._autoscalers().for_workload(namespace, kind, name)

    def set_autoscaler(self, namespace: str, kind: str, name: str, **change: Any) -> Any:
        return self._autoscalers().set(namespace, kind, name, **change)

    # -- looking inside ---------------------------------------------------------------------

    def exec(self, namespace: str, pod: str, container: str, argv: Sequence[str], *, timeout: float) -> CommandResult:
        if not argv:
            raise InvalidInput("exec needs a command (an argv list)")
        # No `GET pod` first: the exec's own refusal says the same (404: no such pod; 400: no such
        # container, or none running), and a read first would double the round trips per pod.
        return self.executor.run(namespace, pod, container, argv, timeout=timeout)

    def logs(self, namespace: str, selector: Mapping[str, str], *, since_seconds: int, tail_lines: int | None = None,
             limit_bytes: int | None = None, container: str | None = None, previous: bool = False,
             timestamps: bool = False, with_previous: bool = False) -> list[PodLog]:
        if since_seconds <= 0:
            raise InvalidInput(f"since_seconds must be positive, got {since_seconds}")
        cap = limit_bytes if limit_bytes is not None else MAX_LOG_BYTES
        return read_pod_logs(self.api, namespace, self.list_pods(namespace, selector), since_seconds=since_seconds,
                             cap=cap, tail_lines=tail_lines, limit_bytes=limit_bytes, container=container,
                             which=logs_asked(previous, with_previous), timestamps=timestamps)

    def close(self) -> None:
        self.executor.close()
        self.api.close()
