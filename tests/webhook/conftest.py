"""The test Kubernetes API server's fixtures, for the replica tests (`--coordination kubernetes`)."""

from tests.kubernetes.conftest import apiserver, k8s, kubeconfig  # noqa: F401  (fixtures)
