"""Which GitOps controller, if any, syncs a workload from Git (issue 16, item 8): read from the
labels and annotations Argo CD and Flux put on what they apply. Pure: no I/O, both worlds use it.

A change made in the cluster to such a workload is reverted at the controller's next sync, so
`k8s.set_arg` refuses it (naming the controller, the object and what to change in Git) unless told.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

ARGO_TRACKING_ID = "argocd.argoproj.io/tracking-id"
ARGO_INSTANCE_LABEL = "app.kubernetes.io/instance"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
FLUX_KUSTOMIZATION = "kustomize.toolkit.fluxcd.io"
FLUX_HELMRELEASE = "helm.toolkit.fluxcd.io"
FLUX_RECONCILE = "kustomize.toolkit.fluxcd.io/reconcile"


@dataclasses.dataclass(frozen=True)
class GitOpsOwner:
    controller: str  # "Argo CD" | "Flux"
    kind: str  # Application | Kustomization | HelmRelease
    name: str
    namespace: str  # where that object lives ("" where the tracking does not say)
    evidence: str  # the label or annotation it was read from, as `key=value`

    @property
    def ref(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"

    def how_to_change(self) -> str:
        """What to do instead of changing the cluster by hand."""
        if self.controller == "Argo CD":
            return (f"change it in the Git source of Argo CD {self.ref} and let it sync; or pause its auto-sync "
                    f"(argocd app set {self.name} --sync-policy none) and run with `gitops: allow`")
        return (f"change it in the Git source of Flux {self.ref} and let it reconcile; or suspend it "
                f"(flux suspend {self.kind.lower()} {self.name}"
                f"{f' -n {self.namespace}' if self.namespace else ''}) and run with `gitops: allow`")


def owners(labels: Mapping[str, str], annotations: Mapping[str, str]) -> list[GitOpsOwner]:
    """The GitOps controllers tracking an object, from its metadata.

    Argo CD: the `argocd.argoproj.io/tracking-id` annotation (`app:group/kind:namespace/name`, the
    app prefixed `namespace_` where apps live outside argocd), else its older label tracking,
    `app.kubernetes.io/instance`, counted only where no other tool says it manages the object
    (`app.kubernetes.io/managed-by`: a Helm release sets both). Flux: the `…fluxcd.io/name` and
    `/namespace` labels of a Kustomization or HelmRelease, unless reconciling is disabled on it.
    """
    found: list[GitOpsOwner] = []
    tracking = annotations.get(ARGO_TRACKING_ID)
    if tracking:
        app = tracking.split(":", 1)[0]
        namespace, _, name = app.rpartition("_")
        found.append(GitOpsOwner("Argo CD", "Application", name, namespace, f"{ARGO_TRACKING_ID}={tracking}"))
    elif labels.get(ARGO_INSTANCE_LABEL) and not labels.get(MANAGED_BY_LABEL):
        value = labels[ARGO_INSTANCE_LABEL]
        found.append(GitOpsOwner("Argo CD", "Application", value, "", f"{ARGO_INSTANCE_LABEL}={value}"))
    if annotations.get(FLUX_RECONCILE, labels.get(FLUX_RECONCILE, "")).lower() != "disabled":
        for group, kind in ((FLUX_KUSTOMIZATION, "Kustomization"), (FLUX_HELMRELEASE, "HelmRelease")):
            name = labels.get(f"{group}/name")
            if name:
                found.append(GitOpsOwner("Flux", kind, name, labels.get(f"{group}/namespace", ""),
                                         f"{group}/name={name}"))
    return found
