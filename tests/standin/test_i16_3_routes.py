"""kubectl's listing of the stand-in's canary Ingress (issue 16, item 3); runbook's route changes run on the
real control plane (tests/controlplane/test_routes_and_records.py)."""

from __future__ import annotations

import pytest

from runbook.backends.kubernetes.routes import CANARY, CANARY_WEIGHT

STABLE = {"app": "vllm", "version": "v1"}


def seed_routes(k8s) -> list[tuple[str, str, dict]]:
    """The three routes of a canary release in `llm`, and for each the change that sends all to v1."""
    k8s.apply(
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "vllm", "namespace": "llm"},
         "spec": {"selector": {"app": "vllm"}, "ports": [{"port": 8000, "targetPort": 8000}]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
         "metadata": {"name": "vllm-canary", "namespace": "llm",
                      "annotations": {CANARY: "true", CANARY_WEIGHT: "20", "team": "inference"}},
         "spec": {"ingressClassName": "nginx", "rules": [{"host": "llm.example.com", "http": {"paths": [
             {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "vllm-v2", "port": {"number": 8000}}}}]}}]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "vllm-main", "namespace": "llm"},
         "spec": {"defaultBackend": {"service": {"name": "vllm-v1", "port": {"number": 8000}}}}},
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": "vllm", "namespace": "llm"},
         "spec": {"parentRefs": [{"name": "llm-gateway"}], "rules": [
             {"matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
              "backendRefs": [{"name": "vllm-v1", "port": 8000, "weight": 80},
                              {"name": "vllm-v2", "port": 8000, "weight": 20}]}]}},
    )
    return [("service", "vllm", {"selector": STABLE}), ("ingress", "vllm-canary", {"weights": {"vllm-v2": 0}}),
            ("httproute", "vllm", {"weights": {"vllm-v2": 0, "vllm-v1": 100}})]


@pytest.fixture
def routes(k8s):
    seed_routes(k8s)
    return k8s


def test_kubectl_lists_the_canary_ingress(routes, kubectl, kubeconfig, tmp_path):
    import subprocess

    done = subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), "--context", "runbook-test", "-n", "llm",
                           "--request-timeout=20s", "get", "ingresses", "vllm-canary"],
                          capture_output=True, text=True, timeout=60, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "vllm-canary" in done.stdout
