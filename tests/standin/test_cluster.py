"""The scale patch's Content-Type, over real HTTPS to the stand-in API server through the official
client: the real apiserver's audit log does not keep it (the rest of Cluster is on tests/controlplane)."""

from __future__ import annotations


def test_scale_is_a_merge_patch_of_the_scale_subresource(k8s, cluster):
    assert cluster.scale("llm", "statefulset", "vllm-server", 1).replicas == 1
    writes = [s for s in k8s.seen if s.method not in ("GET",)]
    assert [(s.verb, s.resource, s.content_type) for s in writes] == [
        ("patch", "statefulsets/scale", "application/merge-patch+json")]
