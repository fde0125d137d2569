"""The cluster most tests start from: namespace `llm`, three GPU nodes, the vLLM StatefulSet
of the SOP (3 replicas, `--max-model-len 7372`) and an API gateway Deployment with logs."""

from __future__ import annotations

from tests.standin.apiserver.server import ApiServer

VLLM_COMMAND = ["python3", "-m", "vllm.entrypoints.openai.api_server"]
VLLM_ARGS = ["--model", "meta-llama/Meta-Llama-3-8B-Instruct", "--max-model-len", "7372", "--port", "8000",
             "--gpu-memory-utilization=0.9"]


def node(name: str, *, ready: bool = True, cordoned: bool = False) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"}},
            "spec": {"unschedulable": True} if cordoned else {},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def workload(kind: str, name: str, *, replicas: int = 3, labels: dict | None = None, containers: list | None = None,
             namespace: str = "llm") -> dict:
    labels = labels or {"app": name}
    spec: dict = {"selector": {"matchLabels": dict(labels)},
                  "template": {"metadata": {"labels": dict(labels)},
                               "spec": {"containers": containers or [{"name": "main", "image": "registry.example/app:1"}]}}}
    if kind != "DaemonSet":
        spec["replicas"] = replicas
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def vllm_statefulset(replicas: int = 3) -> dict:
    return workload("StatefulSet", "vllm-server", replicas=replicas, labels={"app": "vllm-server"}, containers=[
        {"name": "vllm", "image": "docker.io/vllm/vllm-openai:v0.10.0", "command": list(VLLM_COMMAND),
         "args": list(VLLM_ARGS), "ports": [{"containerPort": 8000, "name": "http"}],
         "env": [{"name": "HF_HOME", "value": "/models"}]}])


def seed(server: ApiServer, *, replicas: int = 3) -> None:
    server.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "llm"}},
                 node("gpu-node-1"), node("gpu-node-2"), node("gpu-node-3", cordoned=True),
                 vllm_statefulset(replicas),
                 workload("Deployment", "api-gateway", replicas=2, labels={"app": "api-gateway"},
                          containers=[{"name": "gateway", "image": "registry.example/gateway:2"}]))
