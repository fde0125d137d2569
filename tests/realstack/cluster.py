"""The test API server holding a scenario's cluster: its nodes, workloads and pods, kept equal to a
simulated world that plays the scenario behind the real protocol.

Writes that arrive through the API (scale, a changed container argv, a deleted pod) are applied to
the world, and the world's pods (readiness over virtual time, restarts, replacements) are written
back; exec and logs are answered by the world. One lock, the store's, covers both, so no order of
calls can deadlock.
"""

from __future__ import annotations

import datetime as dt
import threading
from runbook.backends.kubernetes.autoscalers import PAUSED_REPLICAS, hpa_from, scaledobject_from
from runbook.backends.kubernetes.routes import CANARY, CANARY_WEIGHT, route_from
from runbook.sim.world import SimulatedWorld, _log_lines, log_window
from runbook.clock import FakeClock
from runbook.errors import RunbookError
from tests.standin.apiserver.errors import ApiError
from tests.standin.apiserver.kubelet import ExecAnswer, Kubelet
from tests.standin.apiserver.resources import BY_KIND
from tests.standin.apiserver.server import ApiServer

KINDS = {"statefulset": "StatefulSet", "deployment": "Deployment", "daemonset": "DaemonSet"}
AUTOSCALER_KINDS = {"hpa": "HorizontalPodAutoscaler", "scaledobject": "ScaledObject"}
ROUTE_KINDS = {"service": "Service", "ingress": "Ingress", "httproute": "HTTPRoute"}
EXEC_TIMEOUT = 30.0  # the exec websocket does not carry the caller's timeout; the client enforces its own


def _time(at: dt.datetime | None) -> str | None:
    return None if at is None else at.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ProjectingClock(FakeClock):
    """Virtual time that tells the cluster when it moved, so pods' readiness follows it."""

    def __init__(self, start: dt.datetime):
        super().__init__(start)
        self.moved: list = []

    def advance(self, seconds: float) -> None:
        super().advance(seconds)
        for listener in self.moved:
            listener()


class WorldKubelet(Kubelet):
    """Exec and logs answered by the simulated world's pods, at its virtual time."""

    def __init__(self, projection: "ProjectedCluster"):
        super().__init__()
        self.projection = projection

    def answer(self, pod: dict, container: str, argv: tuple[str, ...]) -> ExecAnswer:
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        with self.lock:
            self.execs.append((namespace, name, container, argv))
        world = self.projection.world
        with self.projection.lock:
            try:
                done = world.cluster.exec(namespace, name, container, list(argv), timeout=EXEC_TIMEOUT)
            except RunbookError as exc:
                return ExecAnswer(error=str(exc))
        self.projection.project()  # a kill restarts a container; the pod's status says so at once
        return ExecAnswer(stdout=done.stdout, stderr=done.stderr, exit_code=done.exit_code)

    def read_log(self, pod: dict, container: str | None, *, since_seconds: int | None, tail_lines: int | None,
                 limit_bytes: int | None, timestamps: bool, previous: bool = False) -> bytes:
        state = self.projection.world.state
        with self.projection.lock:
            target = state.pods.get((pod["metadata"]["namespace"], pod["metadata"]["name"]))
            if target is None:
                return b""
            name = container or target.containers[0].name
            c = target.container(name)
            now = state.now()
            window = log_window(c, now, since_seconds, previous=previous) if c is not None else (now, now)
            if window is None:  # as the kubelet answers for a container that never restarted
                raise ApiError.bad_request(f'previous terminated container "{name}" in pod '
                                           f'"{pod["metadata"]["name"]}" not found')
            lines = _log_lines(state, target, name, *window, timestamps=timestamps)
        if tail_lines is not None:
            lines = lines[-tail_lines:] if tail_lines else []
        data = "".join(line + "\n" for line in lines).encode()
        return data[:limit_bytes] if limit_bytes is not None else data


class ProjectedCluster:
    """`world`'s cluster on `server` (emptied first); `detach()` gives the server back as it was."""

    def __init__(self, server: ApiServer, world: SimulatedWorld, clock: ProjectingClock | None = None):
        self.server, self.world = server, world
        server.reset()
        self.store = server.state.store
        self.lock: threading.RLock = self.store.lock
        # The server's own controllers would make pods of their own; this cluster's pods are the world's.
        self.store.after_write.remove(server.state.controllers._on_write)
        self.store.after_write.append(self._on_write)
        server.state.kubelet = WorldKubelet(self)
        self._busy = False
        self.uids: dict[tuple[str, str, str], str] = {}
        if clock is not None:  # on wall time, pods are written back after each write and exec only
            clock.moved.append(self.project)
        self._seed()

    def detach(self) -> None:
        self.store.after_write.remove(self._on_write)
        self.server.reset()

    # -- seeding -----------------------------------------------------------------------------

    def _seed(self) -> None:
        state = self.world.state
        with self.lock:
            self._busy = True
            try:
                namespaces = {w.namespace for w in state.workloads.values()} | {p.namespace for p in state.pods.values()}
                for ns in sorted(namespaces):
                    self.store.create(BY_KIND["Namespace"], None, {"metadata": {"name": ns}})
                for node in state.nodes.values():
                    self.store.create(BY_KIND["Node"], None, {
                        "metadata": {"name": node.name, "labels": {"nvidia.com/gpu.present": "true"}},
                        "spec": {"unschedulable": True} if node.unschedulable else {},
                        "status": {"conditions": [{"type": "Ready", "status": "True" if node.ready else "False"}]}})
                for w in state.workloads.values():
                    kind = KINDS[w.spec.kind]
                    spec: dict = {"selector": {"matchLabels": dict(w.spec.selector)},
                                  "template": {"metadata": {"labels": {**w.spec.labels, **w.spec.selector}},
                                               "spec": {"containers": self._containers(w)}}}
                    if kind != "DaemonSet":
                        spec["replicas"] = w.replicas
                    if kind == "StatefulSet":
                        spec["serviceName"] = w.spec.name
                    made = self.store.create(BY_KIND[kind], w.namespace, {
                        "metadata": {"name": w.spec.name, "labels": dict(w.spec.labels),
                                     **({"annotations": dict(w.spec.annotations)} if w.spec.annotations else {})},
                        "spec": spec})
                    self.uids[(w.namespace, kind, w.spec.name)] = made["metadata"]["uid"]
                for route in self.world.cluster.routes.routes.values():
                    self.store.create(BY_KIND[ROUTE_KINDS[route.kind]], route.namespace, route_object(route))
                for scaler in self.world.cluster.autoscalers_of.items.values():
                    self.store.create(BY_KIND[AUTOSCALER_KINDS[scaler.kind]], scaler.namespace,
                                      autoscaler_object(scaler))
            finally:
                self._busy = False
        self.project()

    @staticmethod
    def _containers(w) -> list[dict]:
        out = []
        for name, (command, args) in w.containers.items():
            c: dict = {"name": name, "image": "docker.io/vllm/vllm-openai:v0.10.0"}
            if command:
                c["command"] = list(command)
            if args:
                c["args"] = list(args)
            out.append(c)
        return out

    # -- writes through the API move the world ----------------------------------------------------

    def _on_write(self, res, namespace: str, name: str) -> None:
        if self._busy:
            return
        state = self.world.state
        with self.lock:
            if res.kind in KINDS.values():
                obj = self.store.find(res, namespace, name)
                w = state.workload(namespace, res.kind.lower(), name)
                if obj is None or w is None:
                    return
                replicas = obj["spec"].get("replicas")
                if replicas is not None and replicas != w.replicas:
                    self.world.cluster.scale(namespace, w.spec.kind, name, int(replicas))
                for c in obj["spec"]["template"]["spec"].get("containers", []):
                    if c["name"] in w.containers:
                        command, args = tuple(c.get("command") or ()), tuple(c.get("args") or ())
                        if (command, args) != w.containers[c["name"]]:
                            self.world.cluster.set_container_argv(namespace, w.spec.kind, name, c["name"],
                                                                  command=command, args=args)
            elif res.kind in ROUTE_KINDS.values():
                obj = self.store.find(res, namespace, name)
                kind = next(k for k, v in ROUTE_KINDS.items() if v == res.kind)
                if obj is None or (namespace, kind, name) not in self.world.cluster.routes.routes:
                    return
                seen = route_from(kind, obj)
                held = self.world.cluster.routes.routes[(namespace, kind, name)]
                if kind == "service" and dict(seen.selector) != dict(held.selector):
                    self.world.cluster.set_route(namespace, kind, name, selector=dict(seen.selector))
                elif kind != "service" and dict(seen.weights) != dict(held.weights):
                    self.world.cluster.set_route(namespace, kind, name, weights=dict(seen.weights))
            elif res.kind in AUTOSCALER_KINDS.values():
                obj = self.store.find(res, namespace, name)
                kind = next(k for k, v in AUTOSCALER_KINDS.items() if v == res.kind)
                held = self.world.cluster.autoscalers_of.items.get((namespace, kind, name))
                if obj is None or held is None:
                    return
                seen = hpa_from(obj, held.target) if kind == "hpa" else scaledobject_from(obj, held.target)
                if (seen.min_replicas, seen.max_replicas, seen.paused_replicas) != \
                        (held.min_replicas, held.max_replicas, held.paused_replicas):
                    change = ({"min_replicas": seen.min_replicas, "max_replicas": seen.max_replicas} if kind == "hpa"
                              else {"paused_replicas": seen.paused_replicas})
                    self.world.cluster.set_autoscaler(namespace, kind, name, **change)
            elif res.kind == "Pod":
                pod = state.pods.get((namespace, name))
                if pod is not None and self.store.find(res, namespace, name) is None:
                    self.world.cluster.delete_pod(namespace, name, uid=pod.uid)
            else:
                return
        self.project()

    # -- the world's pods written back ------------------------------------------------------------

    def project(self) -> None:
        state = self.world.state
        pods_res = BY_KIND["Pod"]
        with self.lock:
            if self._busy:
                return
            self._busy = True
            try:
                now = state.tick()
                wanted = {}
                for p in state.pods.values():
                    wanted[(p.namespace, p.name)] = p
                for obj in self.store.list(pods_res, None)[0]:
                    key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
                    p = wanted.get(key)
                    if p is None or obj["metadata"]["uid"] != p.uid:
                        self.store.delete(pods_res, *key)
                for key, p in sorted(wanted.items()):
                    obj = self._pod_object(p, now)
                    current = self.store.find(pods_res, *key)
                    if current is None:
                        self.store.create(pods_res, p.namespace, obj)
                        stored = self.store.objects[self.store._key(pods_res, p.namespace, p.name)]
                        stored["metadata"]["uid"] = p.uid  # the world's uid, so a delete precondition reaches it
                        stored["metadata"]["creationTimestamp"] = _time(p.created_at)
                    elif current["spec"] != obj["spec"] or current["metadata"]["labels"] != obj["metadata"]["labels"]:
                        current["spec"], current["metadata"]["labels"] = obj["spec"], obj["metadata"]["labels"]
                        self.store.update(pods_res, p.namespace, p.name, current, keep_status=True)
                    self.store.put_status(pods_res, p.namespace, p.name, self._pod_status(p, now))
                for (ns, kind, name), w in state.workloads.items():
                    self._workload_status(KINDS[kind], ns, name, w, now)
            finally:
                self._busy = False

    def _pod_object(self, p, now: dt.datetime) -> dict:
        labels = dict(p.labels)
        refs = []
        if p.owner:
            kind, _, owner = p.owner.partition("/")
            uid = self.uids.get((p.namespace, KINDS.get(kind, ""), owner), "")
            if kind == "deployment":
                # A Deployment's pods belong to a ReplicaSet `<deployment>-<pod-template-hash>`.
                suffix = labels.get("pod-template-hash") or p.name.removeprefix(owner + "-").split("-")[0]
                labels["pod-template-hash"] = suffix
                refs.append({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{owner}-{suffix}",
                             "uid": uid, "controller": True, "blockOwnerDeletion": True})
            else:
                refs.append({"apiVersion": "apps/v1", "kind": KINDS.get(kind, kind), "name": owner, "uid": uid,
                             "controller": True, "blockOwnerDeletion": True})
        containers = []
        for c in p.containers:
            spec: dict = {"name": c.name, "image": "docker.io/vllm/vllm-openai:v0.10.0"}
            if p.workload is not None and c.name in p.workload.containers:
                command, args = p.workload.containers[c.name]
                spec |= ({"command": list(command)} if command else {}) | ({"args": list(args)} if args else {})
            containers.append(spec)
        return {"metadata": {"name": p.name, "namespace": p.namespace, "labels": labels, "ownerReferences": refs},
                "spec": {"nodeName": p.node, "containers": containers}}

    @staticmethod
    def _pod_status(p, now: dt.datetime) -> dict:
        pod = p.to_pod(now)
        ready = "True" if pod.ready else "False"
        statuses = []
        for c, seen in zip(p.containers, pod.containers):
            status: dict = {"name": c.name, "ready": seen.ready, "restartCount": seen.restart_count,
                            "started": pod.phase == "Running", "image": "docker.io/vllm/vllm-openai:v0.10.0",
                            "imageID": "sha256:" + "0" * 64, "containerID": seen.container_id,
                            "state": {"running": {"startedAt": _time(c.started_at)}}
                            if pod.phase == "Running" else {"waiting": {"reason": "ContainerCreating"}},
                            "lastState": {}}
            if c.last_termination:
                reason, at, code = c.last_termination
                status["lastState"] = {"terminated": {"reason": reason, "exitCode": code, "finishedAt": _time(at)}}
            statuses.append(status)
        started = _time(p.created_at)
        return {"phase": pod.phase, "startTime": started, "hostIP": "198.51.100.10", "podIP": pod.ip,
                "podIPs": [{"ip": pod.ip}] if pod.ip else [], "qosClass": "Burstable",
                "conditions": [{"type": t, "status": "True" if t in ("PodScheduled", "Initialized") else ready,
                                "lastProbeTime": None, "lastTransitionTime": started}
                               for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
                "containerStatuses": statuses}

    def _workload_status(self, kind: str, namespace: str, name: str, w, now: dt.datetime) -> None:
        res = BY_KIND[kind]
        obj = self.store.find(res, namespace, name)
        if obj is None:
            return
        seen = w.to_workload(now)
        if kind != "DaemonSet" and obj["spec"].get("replicas") != w.replicas:
            # The world's autoscaler scaled it (issue 16, item 8): as the real one's write through the API.
            obj["spec"]["replicas"] = w.replicas
            obj = self.store.update(res, namespace, name, obj, keep_status=True)
        generation = obj["metadata"].get("generation", 1)
        if kind == "DaemonSet":
            status = {"desiredNumberScheduled": len(w.pods), "currentNumberScheduled": len(w.pods),
                      "numberReady": seen.ready_replicas, "numberAvailable": seen.ready_replicas,
                      "updatedNumberScheduled": len(w.pods), "numberMisscheduled": 0, "observedGeneration": generation}
        else:
            status = {"replicas": len(w.pods), "readyReplicas": seen.ready_replicas,
                      "availableReplicas": seen.ready_replicas, "updatedReplicas": len(w.pods),
                      "observedGeneration": generation}
        self.store.put_status(res, namespace, name, status)


def route_object(route) -> dict:
    """A scenario's route as the API serves it: a Service selecting pods, a canary Ingress of
    ingress-nginx sending its weight to one backend, an HTTPRoute with one rule of weighted backends."""
    meta = {"name": route.name}
    if route.kind == "service":
        return {"metadata": meta, "spec": {"selector": dict(route.selector), "type": "ClusterIP",
                                           "ports": [{"name": "http", "port": 8000, "targetPort": 8000}]}}
    if route.kind == "ingress":
        ((backend, weight),) = route.weights.items()
        return {"metadata": {**meta, "annotations": {"kubernetes.io/ingress.class": "nginx", CANARY: "true",
                                                     CANARY_WEIGHT: str(weight)}},
                "spec": {"ingressClassName": "nginx", "rules": [{"host": "llm.example.com", "http": {"paths": [
                    {"path": "/", "pathType": "Prefix",
                     "backend": {"service": {"name": backend, "port": {"number": 8000}}}}]}}]}}
    return {"metadata": meta, "spec": {"parentRefs": [{"name": "llm-gateway"}], "rules": [{
        "matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
        "backendRefs": [{"name": backend, "port": 8000, "weight": weight} for backend, weight in route.weights.items()]}]}}


def autoscaler_object(scaler) -> dict:
    """A scenario's autoscaler as the API serves it: an autoscaling/v2 HPA on waiting requests, or a
    KEDA ScaledObject with a Prometheus trigger (issue 16, item 8)."""
    kind, name = scaler.target.split("/")
    ref = {"apiVersion": "apps/v1", "kind": KINDS[kind], "name": name}
    if scaler.kind == "hpa":
        return {"metadata": {"name": scaler.name}, "spec": {
            "scaleTargetRef": ref, "minReplicas": scaler.min_replicas, "maxReplicas": scaler.max_replicas,
            "metrics": [{"type": "Pods", "pods": {"metric": {"name": "vllm_num_requests_waiting"},
                                                  "target": {"type": "AverageValue", "averageValue": "5"}}}]}}
    meta: dict = {"name": scaler.name}
    if scaler.paused_replicas is not None:
        meta["annotations"] = {PAUSED_REPLICAS: str(scaler.paused_replicas)}
    return {"metadata": meta, "spec": {
        "scaleTargetRef": ref, "minReplicaCount": scaler.min_replicas, "maxReplicaCount": scaler.max_replicas,
        "triggers": [{"type": "prometheus", "metadata": {
            "serverAddress": "http://prometheus-k8s.monitoring.svc:9090", "threshold": "5",
            "query": "sum(vllm:num_requests_waiting)"}}]}}
