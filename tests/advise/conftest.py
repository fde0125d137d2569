"""The test API server's fixtures, for `advise KIND/NAME` against a live workload."""

from tests.standin.conftest import apiserver, k8s, kubeconfig

__all__ = ["apiserver", "k8s", "kubeconfig"]  # fixtures pytest finds here by name
