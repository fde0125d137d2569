"""Traffic routes over real HTTPS to the test API server, through the official client (issue 16,
item 3): a Service's selector, an ingress-nginx canary Ingress's weight and a Gateway API
HTTPRoute's weights, each changed only from the version and values its plan read."""

from __future__ import annotations

import json

import pytest

from runbook.backends.kubernetes.routes import CANARY, CANARY_WEIGHT
from runbook.errors import InvalidInput, NotFound, StalePlan

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


def test_a_service_selector_is_replaced_whole_from_the_version_read(routes, cluster):
    route = cluster.get_route("llm", "service", "vllm")
    assert (route.kind, dict(route.selector), route.weights) == ("service", {"app": "vllm"}, {})
    done = cluster.set_route("llm", "service", "vllm", selector=STABLE, expected=route,
                             resource_version=route.resource_version)
    assert dict(done.selector) == STABLE
    stored = routes.get("Service", "llm", "vllm")
    assert stored["spec"]["selector"] == STABLE and stored["spec"]["ports"][0]["port"] == 8000
    # Back, dropping a key: the merge patch removes it by name.
    cluster.set_route("llm", "service", "vllm", selector={"app": "vllm"}, expected=done)
    assert routes.get("Service", "llm", "vllm")["spec"]["selector"] == {"app": "vllm"}


def test_a_route_changed_since_the_plan_is_stale_and_left_as_it_is(routes, cluster):
    route = cluster.get_route("llm", "service", "vllm")
    cluster.set_route("llm", "service", "vllm", selector={"app": "vllm", "version": "v2"})  # another hand
    with pytest.raises(StalePlan, match="changed since"):
        cluster.set_route("llm", "service", "vllm", selector=STABLE, resource_version=route.resource_version)
    with pytest.raises(StalePlan, match="changed since"):
        cluster.set_route("llm", "service", "vllm", selector=STABLE, expected=route)
    assert routes.get("Service", "llm", "vllm")["spec"]["selector"] == {"app": "vllm", "version": "v2"}


def test_a_dry_run_changes_nothing(routes, cluster):
    done = cluster.set_route("llm", "ingress", "vllm-canary", weights={"vllm-v2": 0}, dry_run=True)
    assert dict(done.weights) == {"vllm-v2": 0}
    assert routes.get("Ingress", "llm", "vllm-canary")["metadata"]["annotations"][CANARY_WEIGHT] == "20"


def test_an_ingress_nginx_canary_weight_goes_to_zero_and_its_other_annotations_stay(routes, cluster):
    route = cluster.get_route("llm", "ingress", "vllm-canary")
    assert dict(route.weights) == {"vllm-v2": 20}
    cluster.set_route("llm", "ingress", "vllm-canary", weights={"vllm-v2": 0}, expected=route,
                      resource_version=route.resource_version)
    annotations = routes.get("Ingress", "llm", "vllm-canary")["metadata"]["annotations"]
    assert annotations == {CANARY: "true", CANARY_WEIGHT: "0", "team": "inference"}


def test_the_main_ingress_is_not_taken_for_the_canary(routes, cluster):
    with pytest.raises(InvalidInput, match="not an ingress-nginx canary"):
        cluster.get_route("llm", "ingress", "vllm-main")


def test_an_httproute_moves_its_weights_and_keeps_the_rest_of_its_rules(routes, cluster):
    route = cluster.get_route("llm", "httproute", "vllm")
    assert dict(route.weights) == {"vllm-v1": 80, "vllm-v2": 20}
    cluster.set_route("llm", "httproute", "vllm", weights={"vllm-v2": 0, "vllm-v1": 100}, expected=route,
                      resource_version=route.resource_version)
    stored = routes.get("HTTPRoute", "llm", "vllm")["spec"]
    assert stored["parentRefs"] == [{"name": "llm-gateway"}]
    assert stored["rules"] == [{"matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
                                "backendRefs": [{"name": "vllm-v1", "port": 8000, "weight": 100},
                                                {"name": "vllm-v2", "port": 8000, "weight": 0}]}]


def test_a_missing_route_and_a_wrong_change_are_clear_errors(routes, cluster):
    with pytest.raises(NotFound):
        cluster.get_route("llm", "httproute", "nope")
    with pytest.raises(InvalidInput, match="routes by weight"):
        cluster.set_route("llm", "httproute", "vllm", selector=STABLE)
    with pytest.raises(InvalidInput, match="unknown route kind"):
        cluster.get_route("llm", "gateway", "vllm")


def test_kubectl_reads_the_routes_runbook_changed(routes, cluster, kubectl, kubeconfig, tmp_path):
    import subprocess

    cluster.set_route("llm", "httproute", "vllm", weights={"vllm-v2": 0, "vllm-v1": 100})
    done = subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), "--context", "runbook-test", "-n", "llm",
                           "--request-timeout=20s", "get", "httproutes.gateway.networking.k8s.io", "vllm", "-o", "json"],
                          capture_output=True, text=True, timeout=60, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    refs = json.loads(done.stdout)["spec"]["rules"][0]["backendRefs"]
    assert [(r["name"], r["weight"]) for r in refs] == [("vllm-v1", 100), ("vllm-v2", 0)]


def test_kubectl_lists_the_canary_ingress(routes, kubectl, kubeconfig, tmp_path):
    import subprocess

    done = subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), "--context", "runbook-test", "-n", "llm",
                           "--request-timeout=20s", "get", "ingresses", "vllm-canary"],
                          capture_output=True, text=True, timeout=60, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "vllm-canary" in done.stdout
