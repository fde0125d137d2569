"""A tiny control plane: StatefulSet, Deployment and DaemonSet controllers and a pretend kubelet.

After every write the workloads' pods are made to match their spec at once: a deleted
StatefulSet pod comes back with the same name and a new uid (the hazard of retried deletes), a
changed template replaces the pods, and statuses (ready replicas…) follow the pods' readiness.
"""

from __future__ import annotations

import copy
import hashlib
import json
import uuid
from collections.abc import Callable

from tests.standin.apiserver.resources import BY_KIND, Resource
from tests.standin.apiserver.store import Store, now_utc, rfc3339

PODS, NODES = BY_KIND["Pod"], BY_KIND["Node"]
WORKLOADS = ("StatefulSet", "Deployment", "DaemonSet")


def template_hash(template: dict) -> str:
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def pod_status(pod: dict, *, ready: bool, ip: str, restarts: dict[str, int] | None = None,
               last_terminated: dict[str, dict] | None = None, phase: str = "Running") -> dict:
    """A pod status as the kubelet reports it; `last_terminated` maps container → lastState.terminated."""
    started = pod["metadata"].get("creationTimestamp") or rfc3339(now_utc())
    condition = "True" if ready else "False"
    statuses = []
    for index, container in enumerate(pod["spec"].get("containers", [])):
        name = container["name"]
        status = {"name": name, "ready": ready, "restartCount": (restarts or {}).get(name, 0), "started": True,
                  "image": container.get("image", "registry.example/vllm:test"), "imageID": "sha256:" + "0" * 64,
                  "containerID": "containerd://" + hashlib.sha256(f"{pod['metadata']['uid']}/{index}".encode()).hexdigest(),
                  "state": {"running": {"startedAt": started}}, "lastState": {}}
        if last_terminated and name in last_terminated:
            status["lastState"] = {"terminated": last_terminated[name]}
        statuses.append(status)
    return {"phase": phase, "startTime": started, "hostIP": "198.51.100.10", "podIP": ip, "podIPs": [{"ip": ip}],
            "qosClass": "Burstable",
            "conditions": [{"type": t, "status": "True" if t in ("PodScheduled", "Initialized") else condition,
                            "lastProbeTime": None, "lastTransitionTime": started}
                           for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": statuses}


def is_ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in pod.get("status", {}).get("conditions", []))


class Controllers:
    def __init__(self, store: Store, *, starts_ready: Callable[[str, str], bool] = lambda ns, name: True):
        self.store = store
        self.starts_ready = starts_ready  # readiness of a newly created pod, by namespace and name
        self._busy = False
        self._addresses = 0
        store.after_write.append(self._on_write)

    def _on_write(self, res: Resource, namespace: str, name: str) -> None:
        if not self._busy and (res.kind in WORKLOADS or res.kind in ("Pod", "Node")):
            self.reconcile()

    def reconcile(self) -> None:
        self._busy = True
        try:
            with self.store.lock:
                for kind in WORKLOADS:
                    res = BY_KIND[kind]
                    for obj in self.store.list(res, None)[0]:
                        self._reconcile(res, obj)
        finally:
            self._busy = False

    def _nodes(self) -> list[str]:
        nodes = [n["metadata"]["name"] for n in self.store.list(NODES, None)[0] if not n.get("spec", {}).get("unschedulable")]
        return nodes or ["gpu-node-1"]

    def _owned(self, obj: dict) -> list[dict]:
        uid = obj["metadata"]["uid"]
        pods = self.store.list(PODS, obj["metadata"]["namespace"])[0]
        return [p for p in pods if any(ref.get("uid") == uid for ref in p["metadata"].get("ownerReferences", []))]

    def _reconcile(self, res: Resource, obj: dict) -> None:
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        template = obj["spec"]["template"]
        revision = template_hash(template)
        nodes = self._nodes()
        owned = self._owned(obj)
        # A changed template replaces every pod made from the old one (a rollout, done at once).
        for pod in owned:
            if pod["metadata"]["labels"].get("runbook-test/revision") != revision:
                self.store.delete(PODS, namespace, pod["metadata"]["name"])
        owned = self._owned(obj)
        if res.kind == "StatefulSet":
            wanted = [f"{name}-{i}" for i in range(int(obj["spec"].get("replicas", 1)))]
            have = {p["metadata"]["name"] for p in owned}
            for pod in owned:
                if pod["metadata"]["name"] not in wanted:
                    self.store.delete(PODS, namespace, pod["metadata"]["name"])
            for i, pod_name in enumerate(wanted):
                if pod_name not in have:
                    self._create_pod(res, obj, pod_name, nodes[i % len(nodes)], revision,
                                     {"statefulset.kubernetes.io/pod-name": pod_name,
                                      "apps.kubernetes.io/pod-index": str(i),
                                      "controller-revision-hash": f"{name}-{revision}"})
        elif res.kind == "Deployment":
            replicas = int(obj["spec"].get("replicas", 1))
            for pod in sorted(owned, key=lambda p: p["metadata"]["name"])[replicas:]:
                self.store.delete(PODS, namespace, pod["metadata"]["name"])
            for i in range(len(owned), replicas):
                self._create_pod(res, obj, self._fresh(namespace, f"{name}-{revision}-"), nodes[i % len(nodes)],
                                 revision, {"pod-template-hash": revision}, owner_name=f"{name}-{revision}",
                                 owner_kind="ReplicaSet")
        else:  # DaemonSet: one pod per node, cordoned ones too (its controller tolerates unschedulable)
            on = {p["spec"].get("nodeName") for p in owned}
            for node in [n["metadata"]["name"] for n in self.store.list(NODES, None)[0]] or nodes:
                if node not in on:
                    self._create_pod(res, obj, self._fresh(namespace, f"{name}-"), node, revision,
                                     {"controller-revision-hash": revision})
        self._write_status(res, obj, self._owned(obj))

    def _fresh(self, namespace: str, prefix: str) -> str:
        """A pod name made of `prefix` and a random suffix that no pod has yet."""
        while True:
            name = prefix + uuid.uuid4().hex[:5]
            if self.store.find(PODS, namespace, name) is None:
                return name

    def _create_pod(self, res: Resource, obj: dict, pod_name: str, node: str, revision: str, labels: dict,
                    *, owner_name: str | None = None, owner_kind: str | None = None) -> None:
        template = copy.deepcopy(obj["spec"]["template"])
        meta = template.get("metadata", {})
        pod = {"metadata": {"name": pod_name, "labels": {**meta.get("labels", {}), **labels,
                                                         "runbook-test/revision": revision},
                            "annotations": dict(meta.get("annotations", {})),
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner_kind or res.kind,
                                                 "name": owner_name or obj["metadata"]["name"],
                                                 # ReplicaSets are not modelled: the Deployment's uid stands in.
                                                 "uid": obj["metadata"]["uid"], "controller": True,
                                                 "blockOwnerDeletion": True}]},
               "spec": {**template.get("spec", {}), "nodeName": node}}
        namespace = obj["metadata"]["namespace"]
        created = self.store.create(PODS, namespace, pod)
        # Unique addresses from the benchmarking range 198.18.0.0/15: nothing is ever sent to them.
        self._addresses += 1
        ip = f"198.18.{self._addresses // 250}.{self._addresses % 250 + 2}"
        created["status"] = pod_status(created, ready=self.starts_ready(namespace, pod_name), ip=ip)
        self.store.put_status(PODS, namespace, pod_name, created["status"])

    def _write_status(self, res: Resource, obj: dict, pods: list[dict]) -> None:
        ready = sum(1 for p in pods if is_ready(p))
        generation = obj["metadata"].get("generation", 1)
        if res.kind == "DaemonSet":
            status = {"desiredNumberScheduled": len(pods), "currentNumberScheduled": len(pods), "numberReady": ready,
                      "numberAvailable": ready, "updatedNumberScheduled": len(pods), "numberMisscheduled": 0,
                      "observedGeneration": generation}
        else:
            status = {"replicas": len(pods), "readyReplicas": ready, "availableReplicas": ready,
                      "updatedReplicas": len(pods), "observedGeneration": generation}
            if res.kind == "StatefulSet":
                status |= {"currentReplicas": len(pods), "currentRevision": obj["metadata"]["name"],
                           "updateRevision": obj["metadata"]["name"]}
        self.store.put_status(res, obj["metadata"]["namespace"], obj["metadata"]["name"], status)
