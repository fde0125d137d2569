"""The objects the control-plane tests put in a namespace: the SOP's vLLM StatefulSet on GPUs, an
HPA on it, a PodDisruptionBudget, routes, and waits for the controllers to settle them.
"""

from __future__ import annotations

import json

from tests.controlplane.plane import ControlPlane, wait_for

VLLM_IMAGE = "docker.io/vllm/vllm-openai:v0.10.0"
VLLM_COMMAND = ["python3", "-m", "vllm.entrypoints.openai.api_server"]
VLLM_ARGS = ["--model", "meta-llama/Meta-Llama-3-8B-Instruct", "--max-model-len", "7372", "--port", "8000",
             "--gpu-memory-utilization=0.9"]


def vllm_statefulset(namespace: str, *, name: str = "vllm-server", replicas: int = 3,
                     args: list[str] | None = None, labels: dict | None = None) -> dict:
    labels = labels or {"app": name}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "namespace": namespace,
                                                                          "labels": dict(labels)},
            "spec": {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": dict(labels)},
                     "podManagementPolicy": "OrderedReady",
                     "updateStrategy": {"type": "RollingUpdate"},
                     "template": {"metadata": {"labels": dict(labels)}, "spec": {
                         "terminationGracePeriodSeconds": 5,
                         "containers": [{"name": "vllm", "image": VLLM_IMAGE, "command": list(VLLM_COMMAND),
                                         "args": list(args or VLLM_ARGS),
                                         "ports": [{"containerPort": 8000, "name": "http"}],
                                         "env": [{"name": "HF_HOME", "value": "/models"}],
                                         "resources": {"limits": {"nvidia.com/gpu": "1"},
                                                       "requests": {"nvidia.com/gpu": "1", "cpu": "4",
                                                                    "memory": "32Gi"}}}]}}}}


def deployment(namespace: str, name: str, *, replicas: int = 2, labels: dict | None = None,
               container: str = "main", image: str = "registry.example/app:1") -> dict:
    labels = labels or {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": dict(labels)},
                     "template": {"metadata": {"labels": dict(labels)}, "spec": {
                         "terminationGracePeriodSeconds": 5,
                         "containers": [{"name": container, "image": image}]}}}}


def hpa(namespace: str, target: str, *, minimum: int, maximum: int, name: str | None = None) -> dict:
    kind, workload = target.split("/")
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name or workload, "namespace": namespace},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": {"statefulset": "StatefulSet",
                                                                          "deployment": "Deployment"}[kind],
                                        "name": workload},
                     "minReplicas": minimum, "maxReplicas": maximum,
                     "metrics": [{"type": "Pods", "pods": {"metric": {"name": "vllm_num_requests_waiting"},
                                                           "target": {"type": "AverageValue", "averageValue": "5"}}}]}}


def pdb(namespace: str, name: str, labels: dict, *, min_available: int) -> dict:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": namespace},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": dict(labels)}}}


def ready_pods(plane: ControlPlane, namespace: str, labels: dict) -> list[dict]:
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    listed = plane.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json").stdout
    pods = json.loads(listed)["items"]
    return [p for p in pods if p["metadata"].get("deletionTimestamp") is None and any(
        c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]


def settled(plane: ControlPlane, namespace: str, kind: str, name: str, *, timeout: float = 90,
            want: int | None = None) -> dict:
    """The workload once its controller has caught up: every replica updated, ready, and no other pod
    (`want` pods: a DaemonSet's, one per node, are not in its spec)."""
    daemonset = kind == "daemonset"

    def check():
        obj = plane.get(kind, name, namespace=namespace)
        status, spec = obj.get("status") or {}, obj["spec"]
        wanted = want if want is not None else spec.get("replicas", 1)
        if status.get("observedGeneration") != obj["metadata"]["generation"]:
            return None
        if kind == "statefulset" and status.get("updateRevision") != status.get("currentRevision"):
            return None
        pods = plane.kubectl("get", "pods", "-n", namespace, "-l",
                             ",".join(f"{k}={v}" for k, v in spec["selector"]["matchLabels"].items()),
                             "-o", "name").stdout.split()
        ready = status.get("numberReady" if daemonset else "readyReplicas", 0)
        updated = status.get("updatedNumberScheduled" if daemonset else "updatedReplicas", wanted)
        if ready == wanted and updated == wanted and len(pods) == wanted:
            return obj
        return None

    try:
        return wait_for(f"{kind}/{name} in {namespace} settles", check, timeout=timeout, every=0.3)
    except TimeoutError as exc:
        pods = plane.kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False).stdout
        events = plane.kubectl("get", "events", "-n", namespace, check=False).stdout
        status = json.dumps((plane.get(kind, name, namespace=namespace) or {}).get("status"))
        raise TimeoutError(f"{exc}\nstatus: {status}\npods:\n{pods}\nevents:\n{events[-3000:]}") from None
