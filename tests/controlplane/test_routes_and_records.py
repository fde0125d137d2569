"""The canary's routes (a Service, an ingress-nginx canary Ingress, a Gateway API HTTPRoute served by
its real CRD) and KEDA's ScaledObject on the real apiserver, as the service account, read back with
kubectl (runbook's own records, the Leases and the ledger, are test_locks_and_ledger.py's)."""

from __future__ import annotations

import json

import pytest

from runbook.backends.kubernetes.routes import CANARY, CANARY_WEIGHT
from runbook.errors import InvalidInput, NotFound, StalePlan
from tests.controlplane import objects
from tests.controlplane.identity import runbook_user

STABLE = {"app": "vllm", "version": "v1"}


def canary_routes(namespace: str) -> list[dict]:
    return [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "vllm", "namespace": namespace},
         "spec": {"selector": {"app": "vllm"}, "ports": [{"name": "http", "port": 8000, "targetPort": 8000}]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
         "metadata": {"name": "vllm-canary", "namespace": namespace,
                      "annotations": {CANARY: "true", CANARY_WEIGHT: "20", "team": "inference"}},
         "spec": {"ingressClassName": "nginx", "rules": [{"host": "llm.example.com", "http": {"paths": [
             {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "vllm-v2", "port": {"number": 8000}}}}]}}]}},
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
         "metadata": {"name": "vllm", "namespace": namespace},
         "spec": {"parentRefs": [{"name": "llm-gateway"}], "rules": [
             {"matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
              "timeouts": {"request": "300s"},
              "backendRefs": [{"name": "vllm-v1", "port": 8000, "weight": 80},
                              {"name": "vllm-v2", "port": 8000, "weight": 20}]}]}},
    ]


def test_each_route_moves_to_stable_from_the_version_read_and_keeps_the_rest(plane, namespace, cluster):
    plane.apply(*canary_routes(namespace))
    service = cluster.get_route(namespace, "service", "vllm")
    assert (service.kind, dict(service.selector), service.weights) == ("service", {"app": "vllm"}, {})
    done = cluster.set_route(namespace, "service", "vllm", selector=STABLE, expected=service,
                             resource_version=service.resource_version)
    assert dict(done.selector) == STABLE
    stored = plane.get("service", "vllm", namespace=namespace)["spec"]
    assert stored["selector"] == STABLE and stored["ports"][0]["port"] == 8000
    # Back, dropping a key: the merge patch removes it by name.
    cluster.set_route(namespace, "service", "vllm", selector={"app": "vllm"}, expected=done)
    assert plane.get("service", "vllm", namespace=namespace)["spec"]["selector"] == {"app": "vllm"}

    ingress = cluster.get_route(namespace, "ingress", "vllm-canary")
    assert dict(ingress.weights) == {"vllm-v2": 20}
    cluster.set_route(namespace, "ingress", "vllm-canary", weights={"vllm-v2": 0}, expected=ingress,
                      resource_version=ingress.resource_version)
    annotations = plane.get("ingress", "vllm-canary", namespace=namespace)["metadata"]["annotations"]
    assert {k: annotations[k] for k in (CANARY, CANARY_WEIGHT, "team")} == {CANARY: "true", CANARY_WEIGHT: "0",
                                                                            "team": "inference"}

    route = cluster.get_route(namespace, "httproute", "vllm")
    assert dict(route.weights) == {"vllm-v1": 80, "vllm-v2": 20}
    cluster.set_route(namespace, "httproute", "vllm", weights={"vllm-v2": 0, "vllm-v1": 100}, expected=route,
                      resource_version=route.resource_version)
    stored = plane.get("httproute", "vllm", namespace=namespace)["spec"]
    assert [ref["name"] for ref in stored["parentRefs"]] == ["llm-gateway"]  # the CRD defaults its group and kind
    rules = stored["rules"]
    assert len(rules) == 1 and rules[0]["timeouts"] == {"request": "300s"}
    assert rules[0]["matches"] == [{"path": {"type": "PathPrefix", "value": "/v1"}}]
    assert [(b["name"], b["weight"]) for b in rules[0]["backendRefs"]] == [("vllm-v1", 100), ("vllm-v2", 0)]
    # kubectl reads what runbook wrote, as the on-call would check it
    shown = plane.kubectl("get", "httproute", "vllm", "-n", namespace, "-o",
                          "jsonpath={.spec.rules[0].backendRefs[*].weight}").stdout
    assert shown == "100 0"


def test_a_route_someone_changed_since_the_plan_is_stale(plane, namespace, cluster):
    plane.apply(*canary_routes(namespace))
    route = cluster.get_route(namespace, "httproute", "vllm")
    plane.kubectl("patch", "httproute", "vllm", "-n", namespace, "--type=json",
                  "-p", json.dumps([{"op": "replace", "path": "/spec/rules/0/backendRefs/1/weight", "value": 50}]))
    with pytest.raises(StalePlan, match="changed since"):
        cluster.set_route(namespace, "httproute", "vllm", weights={"vllm-v2": 0, "vllm-v1": 100},
                          resource_version=route.resource_version)
    weights = [b["weight"] for b in plane.get("httproute", "vllm", namespace=namespace)["spec"]["rules"][0]["backendRefs"]]
    assert weights == [80, 50]


def test_a_service_someone_changed_since_the_plan_is_stale_by_its_version_or_its_selector(plane, namespace, cluster):
    plane.apply(*canary_routes(namespace))
    route = cluster.get_route(namespace, "service", "vllm")
    plane.kubectl("patch", "service", "vllm", "-n", namespace, "--type=merge",
                  "-p", json.dumps({"spec": {"selector": {"version": "v2"}}}))  # another hand
    with pytest.raises(StalePlan, match="changed since"):
        cluster.set_route(namespace, "service", "vllm", selector=STABLE, resource_version=route.resource_version)
    with pytest.raises(StalePlan, match="changed since"):
        cluster.set_route(namespace, "service", "vllm", selector=STABLE, expected=route)
    assert plane.get("service", "vllm", namespace=namespace)["spec"]["selector"] == {"app": "vllm", "version": "v2"}


def test_a_route_dry_run_changes_nothing(plane, namespace, cluster):
    plane.apply(*canary_routes(namespace))
    done = cluster.set_route(namespace, "ingress", "vllm-canary", weights={"vllm-v2": 0}, dry_run=True)
    assert dict(done.weights) == {"vllm-v2": 0}
    assert plane.get("ingress", "vllm-canary", namespace=namespace)["metadata"]["annotations"][CANARY_WEIGHT] == "20"
    patches = plane.audited(namespace, verb="patch", resource="ingresses",
                            user=runbook_user(namespace))
    assert ["dryRun=All" in e["requestURI"] for e in patches] == [True]  # the apiserver was asked, dry


def test_the_main_ingress_is_not_taken_for_the_canary(plane, namespace, cluster):
    plane.apply({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                 "metadata": {"name": "vllm-main", "namespace": namespace},
                 "spec": {"defaultBackend": {"service": {"name": "vllm-v1", "port": {"number": 8000}}}}})
    with pytest.raises(InvalidInput, match="not an ingress-nginx canary"):
        cluster.get_route(namespace, "ingress", "vllm-main")


def test_a_missing_route_and_a_wrong_change_are_clear_errors(plane, namespace, cluster):
    plane.apply(*canary_routes(namespace))
    with pytest.raises(NotFound):
        cluster.get_route(namespace, "httproute", "nope")  # the apiserver's 404, through the CRD
    with pytest.raises(InvalidInput, match="routes by weight"):
        cluster.set_route(namespace, "httproute", "vllm", selector=STABLE)
    with pytest.raises(InvalidInput, match="unknown route kind"):
        cluster.get_route(namespace, "gateway", "vllm")
    assert plane.audited(namespace, verb="patch", resource="httproutes") == []


def test_a_keda_scaledobject_is_found_and_paused_at_the_target(plane, namespace, cluster):
    plane.apply(objects.deployment(namespace, "api-gateway", replicas=2),
                {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
                 "metadata": {"name": "gateway", "namespace": namespace},
                 "spec": {"scaleTargetRef": {"name": "api-gateway"}, "minReplicaCount": 1, "maxReplicaCount": 4,
                          "triggers": [{"type": "prometheus", "metadata": {
                              "serverAddress": "http://prometheus-k8s.monitoring.svc:9090",
                              "query": "sum(vllm:num_requests_waiting)", "threshold": "5"}}]}})
    (found,) = cluster.autoscalers(namespace, "deployment", "api-gateway")
    assert (found.kind, found.name, found.paused_replicas) == ("scaledobject", "gateway", None)
    cluster.set_autoscaler(namespace, "scaledobject", "gateway", paused_replicas=1, expected=found,
                           resource_version=found.resource_version)
    annotations = plane.get("scaledobject", "gateway", namespace=namespace)["metadata"]["annotations"]
    assert annotations["autoscaling.keda.sh/paused-replicas"] == "1"
