"""A Kubernetes API server for tests: real HTTPS and WebSockets on loopback (Starlette + uvicorn).

    server = ApiServer(tmp_dir).start()        # self-signed CA, a free port on 127.0.0.1
    server.apply(manifest_yaml_or_dict, ...)   # seed as an admin; controllers create the pods
    path = server.kubeconfig(tmp_dir / "kc")   # runbook's ServiceAccount, held to deploy/rbac.yaml
    server.kubelet.script(["nvidia-smi"], ExecAnswer(stdout=...))  # what a container answers
    server.inject(method="PATCH", path=r"/scale$", status=429, retry_after=1)  # faults
    server.seen                                # every request, as an audit log

Serves pods (list/get/delete with preconditions, log, eviction with PDBs, exec over v4/v5
channel WebSockets), StatefulSets/Deployments/DaemonSets with the scale subresource and the
three patch types, nodes, events, services, leases, configmaps, dryRun=All, discovery and server-side
tables for kubectl. Not served: watch, server-side apply, SPDY.
"""
