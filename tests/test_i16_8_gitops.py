"""Which GitOps controller syncs a workload, from its labels and annotations (issue 16, item 8)."""

from __future__ import annotations

from runbook.backends.gitops import owners


def test_argo_cd_annotation_tracking_names_the_application_and_its_namespace():
    [owner] = owners({}, {"argocd.argoproj.io/tracking-id": "apps_llm-serving:apps/StatefulSet:llm/vllm-server"})
    assert (owner.controller, owner.ref) == ("Argo CD", "Application apps/llm-serving")
    assert "argocd app set llm-serving --sync-policy none" in owner.how_to_change()


def test_argo_cd_label_tracking_counts_only_where_no_other_tool_manages_it():
    [owner] = owners({"app.kubernetes.io/instance": "llm-serving"}, {})
    assert owner.evidence == "app.kubernetes.io/instance=llm-serving"
    # A Helm release sets the same label: helm upgrade by a person reverts nothing by itself.
    assert owners({"app.kubernetes.io/instance": "vllm", "app.kubernetes.io/managed-by": "Helm"}, {}) == []


def test_flux_kustomization_and_helmrelease_labels_unless_reconciling_is_disabled():
    labels = {"kustomize.toolkit.fluxcd.io/name": "vllm", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}
    [owner] = owners(labels, {})
    assert (owner.controller, owner.ref) == ("Flux", "Kustomization flux-system/vllm")
    assert "flux suspend kustomization vllm -n flux-system" in owner.how_to_change()
    assert owners(labels, {"kustomize.toolkit.fluxcd.io/reconcile": "disabled"}) == []
    [helm] = owners({"helm.toolkit.fluxcd.io/name": "vllm", "helm.toolkit.fluxcd.io/namespace": "llm"}, {})
    assert helm.ref == "HelmRelease llm/vllm"


def test_nothing_tracks_a_workload_applied_by_hand():
    assert owners({"app": "vllm-server"}, {"deployment.kubernetes.io/revision": "3"}) == []
