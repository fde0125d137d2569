"""The test API server on a loopback port: uvicorn in a thread, TLS, a kubeconfig to reach it.

Tests seed and inspect the cluster through this object (as an admin would); the code under test
reaches it only through a kubeconfig, the official client or kubectl, as runbook's ServiceAccount.
"""

from __future__ import annotations

import base64
import datetime as dt
import contextlib
import copy
import socket
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn
import yaml

from tests.standin.apiserver.app import ApiServerApp, Fault, Seen
from tests.standin.apiserver.controllers import pod_status
from tests.standin.apiserver.kubelet import Kubelet
from tests.standin.apiserver.rbac import Policy, load_policy
from tests.standin.apiserver.resources import BY_KIND
from tests.standin.apiserver.tls import make_certificates

REPO = Path(__file__).resolve().parents[3]
RBAC = REPO / "deploy" / "rbac.yaml"
RUNBOOK_TOKEN = "runbook-sa-token"  # system:serviceaccount:llm:runbook, held to deploy/rbac.yaml
ADMIN_TOKEN = "admin-token"  # unrestricted, for seeding and for checks outside the Role


class ApiServer:
    def __init__(self, directory: Path, *, rbac: Path = RBAC, namespace: str = "llm"):
        self.directory = Path(directory)
        self.policy: Policy = load_policy(rbac, service_account="runbook", namespace=namespace)
        self.state = ApiServerApp(tokens={RUNBOOK_TOKEN: self.policy.user, ADMIN_TOKEN: "kubernetes-admin"},
                                  policies={self.policy.user: self.policy, "kubernetes-admin": None})
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, timeout: float = 15.0) -> "ApiServer":
        self.ca, cert, key = make_certificates(self.directory / "pki")
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and
        # without it every keep-alive response waits 40 ms for a delayed ACK.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.state.host = f"127.0.0.1:{self.port}"
        config = uvicorn.Config(self.state.app, ssl_certfile=str(cert), ssl_keyfile=str(key), lifespan="off",
                                log_config=None, log_level="critical", access_log=False, ws="auto",
                                timeout_graceful_shutdown=2, ws_ping_interval=None)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, name="test-apiserver",
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test API server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
        self._server = self._thread = None

    def __enter__(self) -> "ApiServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def kubeconfig(self, path: Path, *, token: str = RUNBOOK_TOKEN, contexts: tuple[str, ...] = ("runbook-test",),
                   current: str | None = None, namespace: str = "llm") -> Path:
        """A kubeconfig with one cluster and one context per name in `contexts`, all reaching this server."""
        ca_data = base64.b64encode(self.ca.read_bytes()).decode()
        doc = {"apiVersion": "v1", "kind": "Config",
               "clusters": [{"name": "test", "cluster": {"server": self.url, "certificate-authority-data": ca_data}}],
               "users": [{"name": "runbook", "user": {"token": token}}],
               "contexts": [{"name": c, "context": {"cluster": "test", "user": "runbook", "namespace": namespace}}
                            for c in contexts]}
        if current:
            doc["current-context"] = current
        path.write_text(yaml.safe_dump(doc), encoding="utf-8")
        return path

    # -- seeding and inspection (as an admin, not through the API) ----------------------------

    def reset(self) -> None:
        self.state.reset()

    @property
    def kubelet(self) -> Kubelet:
        return self.state.kubelet

    @property
    def seen(self) -> list[Seen]:
        return list(self.state.seen)

    def inject(self, **fault: Any) -> Fault:
        created = Fault(**fault)
        with self.state._lock:
            self.state.faults.append(created)
        return created

    def apply(self, *objects: dict | str) -> list[dict]:
        """Create objects (dicts or YAML text with several documents); namespaced ones default to llm."""
        made = []
        for item in objects:
            docs = [d for d in yaml.safe_load_all(item) if d] if isinstance(item, str) else [item]
            for doc in docs:
                res = BY_KIND[doc["kind"]]
                namespace = doc.get("metadata", {}).get("namespace", "llm") if res.namespaced else None
                made.append(self.state.store.create(res, namespace, copy.deepcopy(doc)))
        self.state.controllers.reconcile()
        return made

    def get(self, kind: str, namespace: str | None, name: str) -> dict:
        return self.state.store.get(BY_KIND[kind], namespace, name)

    def find(self, kind: str, namespace: str | None, name: str) -> dict | None:
        return self.state.store.find(BY_KIND[kind], namespace, name)

    def objects(self, kind: str, namespace: str | None = "llm") -> list[dict]:
        return self.state.store.list(BY_KIND[kind], namespace)[0]

    def pods(self, namespace: str = "llm") -> list[dict]:
        return self.objects("Pod", namespace)

    def edit(self, kind: str, namespace: str | None, name: str, change: Any) -> dict:
        """Someone else's write: `change(obj)` edits a copy, stored with a new resourceVersion."""
        res = BY_KIND[kind]
        with self.state.store.lock:
            obj = self.state.store.get(res, namespace, name)
            change(obj)
            obj["metadata"].pop("resourceVersion", None)
            return self.state.store.update(res, namespace, name, obj)

    def set_pod(self, namespace: str, name: str, *, ready: bool | None = None, restarts: dict[str, int] | None = None,
                last_terminated: dict[str, dict] | None = None, phase: str | None = None) -> dict:
        """What the kubelet would report for this pod from now on; workload statuses follow."""
        res = BY_KIND["Pod"]
        with self.state.store.lock:
            pod = self.state.store.get(res, namespace, name)
            old = pod.get("status", {})
            statuses = {c["name"]: c for c in old.get("containerStatuses", [])}
            status = pod_status(
                pod, ready=ready if ready is not None else any(c.get("type") == "Ready" and c.get("status") == "True"
                                                               for c in old.get("conditions", [])),
                restarts=restarts if restarts is not None else {n: c.get("restartCount", 0) for n, c in statuses.items()},
                last_terminated=last_terminated if last_terminated is not None else
                {n: c["lastState"]["terminated"] for n, c in statuses.items() if c.get("lastState", {}).get("terminated")},
                phase=phase or old.get("phase", "Running"), ip=old.get("podIP", ""))
            self.state.store.put_status(res, namespace, name, status)
            self.state.controllers.reconcile()
            return self.state.store.get(res, namespace, name)

    def restart_container(self, namespace: str, name: str, container: str, *, reason: str = "Error",
                          exit_code: int = 1) -> dict:
        """The container crashed and started again, as a kubelet reports it: its log becomes the
        previous one, its restart count goes up, its last state says how it ended."""
        self.kubelet.restart(namespace, name, container)
        with self.state.store.lock:
            old = self.state.store.get(BY_KIND["Pod"], namespace, name).get("status", {})
        counts = {c["name"]: c.get("restartCount", 0) for c in old.get("containerStatuses", [])}
        counts[container] = counts.get(container, 0) + 1
        finished = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return self.set_pod(namespace, name, restarts=counts, last_terminated={
            container: {"reason": reason, "exitCode": exit_code, "finishedAt": finished}})

    def start_unready(self, namespace: str, name: str) -> None:
        """The pod of this name, whenever (re)created, starts not ready."""
        self.state.unready.add((namespace, name))


@contextlib.contextmanager
def running(directory: Path):
    server = ApiServer(directory).start()
    try:
        yield server
    finally:
        server.stop()
