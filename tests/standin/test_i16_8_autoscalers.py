"""kubectl's table of the stand-in's HPAs and ScaledObjects (issue 16, item 8); runbook's autoscaler and
GitOps checks run on the real control plane (tests/controlplane/test_autoscalers.py)."""

from __future__ import annotations

import subprocess

STS = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "vllm-server"}


def seed_autoscalers(k8s) -> None:
    """An HPA on vllm-server, a ScaledObject on api-gateway (with the HPA KEDA makes for it), and an
    HPA of some other workload."""
    k8s.apply(
        {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
         "metadata": {"name": "vllm-server", "namespace": "llm"},
         "spec": {"scaleTargetRef": STS, "minReplicas": 2, "maxReplicas": 6, "metrics": [
             {"type": "Pods", "pods": {"metric": {"name": "vllm_num_requests_waiting"},
                                       "target": {"type": "AverageValue", "averageValue": "5"}}}]}},
        {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "gateway", "namespace": "llm"},
         "spec": {"scaleTargetRef": {"name": "api-gateway"}, "minReplicaCount": 1, "maxReplicaCount": 4,
                  "triggers": [{"type": "prometheus", "metadata": {"query": "sum(rate(x[1m]))", "threshold": "5"}}]}},
        {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
         "metadata": {"name": "keda-hpa-gateway", "namespace": "llm",
                      "ownerReferences": [{"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "name": "gateway",
                                           "uid": "0d9a4c3e-0000-4000-8000-000000000001", "controller": True}]},
         "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api-gateway"},
                  "minReplicas": 1, "maxReplicas": 4}},
        {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "other", "namespace": "llm"},
         "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "other"},
                  "minReplicas": 1, "maxReplicas": 3}},
    )


def test_kubectl_reads_the_hpa_and_scaledobject(k8s, kubectl, kubeconfig, tmp_path):
    seed_autoscalers(k8s)

    def run(*args: str) -> str:
        done = subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), "--context", "runbook-test", "-n", "llm",
                               "--request-timeout=20s", *args], capture_output=True, text=True, timeout=60,
                              env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
        assert done.returncode == 0, done.stderr
        return done.stdout

    rows = {line.split()[0]: line.split() for line in run("get", "hpa").splitlines()[1:]}
    assert rows["vllm-server"][1:4] == ["StatefulSet/vllm-server", "2", "6"]
    assert "gateway" in run("get", "scaledobjects.keda.sh", "-o", "name")
