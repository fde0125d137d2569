"""canary-rollback on the real stack (issue 16, item 3): what the API server holds once the run is
over, written there through the official client — the Service on stable, the canary at 0 replicas,
the stable pods untouched — and, with no stable pod ready, nothing written at all."""

from __future__ import annotations

from tests.realstack.harness import run_in_process


def test_the_service_ends_on_stable_and_the_canary_at_zero(played, laid_out, stack, tmp_path):
    drill = played["canary-rollback"]
    laid = laid_out(drill)
    before = len(stack.apiserver.seen)
    result, _ = run_in_process(laid, drill, tmp_path / "state")
    assert result.outcome == "resolved"
    api = stack.apiserver
    assert api.get("Service", "llm", "vllm")["spec"]["selector"] == {"app": "vllm", "version": "v1"}
    assert api.get("Deployment", "llm", "vllm-v2")["spec"]["replicas"] == 0
    assert api.get("Deployment", "llm", "vllm-v1")["spec"]["replicas"] == 3
    patches = [(s.resource, s.name) for s in api.seen[before:] if s.method == "PATCH"]
    route, scale = ("services", "vllm"), ("deployments/scale", "vllm-v2")
    # The route moves first (a server dry run, then the change); the canary goes only after it.
    assert set(patches) == {route, scale}
    assert max(i for i, p in enumerate(patches) if p == route) < min(i for i, p in enumerate(patches) if p == scale)


def test_with_no_stable_pod_ready_the_route_is_never_written(played, laid_out, stack, tmp_path):
    drill = played["canary-rollback-stable-unready"]
    laid = laid_out(drill)
    before = len(stack.apiserver.seen)
    result, _ = run_in_process(laid, drill, tmp_path / "state")
    assert result.outcome == "refused"
    assert stack.apiserver.get("Service", "llm", "vllm")["spec"]["selector"] == {"app": "vllm"}
    changed = [(s.method, s.path) for s in stack.apiserver.seen[before:] if s.method == "PATCH"]
    assert changed == []
