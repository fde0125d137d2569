"""The Kubernetes world: every call to the API server (workloads, exec, Leases, ledgers)."""
