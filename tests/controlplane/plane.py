"""A real Kubernetes control plane on loopback: etcd, kube-apiserver (TLS, Node and RBAC
authorizers, service-account tokens, the default admission chain), kube-controller-manager,
kube-scheduler and kwok with GPU nodes, started from the binaries `build.sh` made.

`ControlPlane.start()` brings them up and waits until the nodes are Ready; `stop()` ends them all.
Tests act on it as a person would: `kubectl` with the admin kubeconfig, kubeconfigs for other
identities (a service account's token), and the pods' stand-in tools and log files.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from tests.controlplane import certs, kwok_config
from tests.processes import die_with_the_tests
from tests.prometheus.conftest import free_port

HERE = Path(__file__).resolve().parent
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kubeletfront")
TOOLS = ("nvidia-smi", "ps", "ss", "fuser", "kill", "cat", "pgrep", "pkill", "stat", "readlink", "ls", "curl")
NODES = ("gpu-node-1", "gpu-node-2", "gpu-node-3")
# Namespaces kwok is told of at start, each with the pods whose logs are their own.
NAMESPACES = ("llm", *(f"rb-{n:02d}" for n in range(1, 41)))
NAMED_PODS = tuple(f"vllm-server-{i}" for i in range(6)) + tuple(f"vllm-canary-{i}" for i in range(2))
START_TIMEOUT = 120.0
# What the apiserver's audit log keeps (at Metadata level: who did which verb to what, and the answer):
# the writes runbook makes, and its reads of pods, their logs and execs, so that a test can count them
# as a cluster's auditor would. Metadata level keeps no request body or Content-Type.
AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"], "rules": [
    {"level": "Metadata", "verbs": ["create", "update", "patch", "delete"], "resources": [
        {"group": "apps", "resources": ["statefulsets", "deployments", "daemonsets", "statefulsets/scale",
                                        "deployments/scale"]},
        {"group": "autoscaling", "resources": ["horizontalpodautoscalers"]},
        {"group": "keda.sh", "resources": ["scaledobjects"]},
        {"group": "networking.k8s.io", "resources": ["ingresses"]},
        {"group": "gateway.networking.k8s.io", "resources": ["httproutes"]},
        {"group": "coordination.k8s.io", "resources": ["leases"]},
        {"group": "", "resources": ["pods", "pods/eviction", "configmaps", "services"]}]},
    {"level": "Metadata", "verbs": ["get", "list", "create"], "resources": [
        {"group": "", "resources": ["pods", "pods/log", "pods/exec"]}]},
    {"level": "None"}]}


def binaries_folder() -> Path | None:
    """Where build.sh puts (or would put) the binaries; None without bash."""
    if shutil.which("bash") is None:
        return None
    done = subprocess.run(["bash", str(HERE / "build.sh"), "--where"], capture_output=True, text=True, timeout=30)
    return Path(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else None


def missing_reason() -> str | None:
    """Why the control plane cannot start here, or None when it can."""
    folder = binaries_folder()
    if folder is None:
        return "bash is not installed (tests/controlplane/build.sh needs it)"
    absent = [b for b in BINARIES if not (folder / b).is_file()]
    if not (folder.parent / "crds" / ".complete").is_file():
        absent.append("the Gateway API and KEDA CRDs")
    if absent:
        go = "" if shutil.which("go") else " (the Go toolchain is not installed, so it cannot be built here)"
        return (f"the real control plane is not built: {', '.join(absent)} missing in {folder}{go}; "
                "run tests/controlplane/build.sh (about 6 minutes cold, on 2 cores)")
    if shutil.which("kubectl") is None:
        return "kubectl is not installed (the control-plane tests read the cluster with it)"
    return None


@dataclasses.dataclass
class Process:
    name: str
    popen: subprocess.Popen
    log: Path

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class ControlPlaneError(RuntimeError):
    pass


def wait_for(what: str, check: Callable[[], Any], *, timeout: float, every: float = 0.2) -> Any:
    """`check()`'s first truthy answer, polled for at most `timeout` seconds (a real cluster's
    controllers move on wall time); the last error or answer in the failure."""
    deadline, last = time.monotonic() + timeout, None
    while True:
        try:
            got = check()
            if got:
                return got
            last = got
        except Exception as exc:  # noqa: BLE001 - polled again until the deadline
            last = exc
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:g}s (last: {last!r})")
        time.sleep(every)


class ControlPlane:
    def __init__(self, work: Path, binaries: Path):
        self.work, self.bin = work, binaries
        self.processes: list[Process] = []
        self.pki = certs.make_pki(work / "pki")
        self.etcd_port, self.peer_port, self.port, self.kubelet_port, self.kwok_port = (free_port() for _ in range(5))
        self.url = f"https://127.0.0.1:{self.port}"
        self.pods_dir = work / "pods"
        self.audit_log = work / "audit.jsonl"
        # Where each namespace's latest incarnation begins in the audit log: a namespace made again
        # (the test pool reuses names) must not show the audit events of the tests before.
        self._audit_from: dict[str, int] = {}
        self.admin_kubeconfig = self.kubeconfig(work / "admin.kubeconfig", cert=self.pki.admin)

    # -- kubeconfigs ---------------------------------------------------------------------------

    def kubeconfig(self, path: Path, *, cert: certs.Pair | None = None, token: str | None = None,
                   context: str = "runbook-test", namespace: str | None = None) -> Path:
        """A kubeconfig for one identity (a client certificate or a bearer token), one context."""
        user: dict = {"token": token} if token else {
            "client-certificate-data": base64.b64encode(cert.cert.read_bytes()).decode(),
            "client-key-data": base64.b64encode(cert.key.read_bytes()).decode()}
        ctx: dict = {"cluster": "runbook-controlplane", "user": "runbook"}
        if namespace:
            ctx["namespace"] = namespace
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": context,
               "clusters": [{"name": "runbook-controlplane", "cluster": {
                   "server": self.url, "certificate-authority-data": base64.b64encode(self.pki.ca.read_bytes()).decode()}}],
               "users": [{"name": "runbook", "user": user}],
               "contexts": [{"name": context, "context": ctx}]}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        path.chmod(0o600)
        return path

    # -- processes -----------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str], *, env: dict[str, str] | None = None) -> Process:
        log = self.work / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as out:
            popen = subprocess.Popen([str(self.bin / name), *argv], stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                                     preexec_fn=die_with_the_tests)
        made = Process(name, popen, log)
        self.processes.append(made)
        return made

    def _alive(self) -> None:
        for p in self.processes:
            if p.popen.poll() is not None:
                raise ControlPlaneError(f"{p.name} exited with {p.popen.returncode}:\n{p.tail()}")

    def start(self) -> "ControlPlane":
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        data = self.work / "etcd"
        peer = f"http://127.0.0.1:{self.peer_port}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        self._spawn("etcd", ["--name", "default", "--data-dir", str(data), "--listen-client-urls", client,
                             "--advertise-client-urls", client, "--listen-peer-urls", peer,
                             "--initial-advertise-peer-urls", peer, "--initial-cluster", f"default={peer}",
                             "--unsafe-no-fsync", "--log-level", "warn", "--quota-backend-bytes", str(2 << 30)])
        wait_for("etcd answers /health", lambda: self._alive() or _http_ok(f"{client}/health"), timeout=30)
        pki = self.pki
        policy = self.work / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(AUDIT_POLICY, sort_keys=False), encoding="utf-8")
        self._spawn("kube-apiserver", [
            f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}", "--audit-log-mode=blocking",
            f"--etcd-servers={client}", "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}", f"--cert-dir={self.work / 'apiserver'}",
            f"--tls-cert-file={pki.apiserver.cert}", f"--tls-private-key-file={pki.apiserver.key}",
            f"--client-ca-file={pki.ca}", "--authorization-mode=Node,RBAC",
            f"--service-account-key-file={pki.service_account_public}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={certs.SERVICE_RANGE}",
            f"--kubelet-client-certificate={pki.kubelet_client.cert}", f"--kubelet-client-key={pki.kubelet_client.key}",
            f"--kubelet-certificate-authority={pki.ca}", "--kubelet-preferred-address-types=InternalIP",
            "--allow-privileged=true", "--profiling=false", "--v=1"])
        wait_for("kube-apiserver answers /readyz", lambda: self._alive() or self._readyz(), timeout=START_TIMEOUT)

        kcm = self.kubeconfig(self.work / "controller-manager.kubeconfig", cert=pki.controller_manager)
        self._spawn("kube-controller-manager", [
            f"--kubeconfig={kcm}", f"--authentication-kubeconfig={kcm}", f"--authorization-kubeconfig={kcm}",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}", f"--cert-dir={self.work / 'kcm'}",
            "--leader-elect=false", "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki.service_account_key}", f"--root-ca-file={pki.ca}",
            "--controllers=*", f"--cluster-signing-cert-file={pki.ca}",
            "--horizontal-pod-autoscaler-sync-period=1s", "--concurrent-statefulset-syncs=5",
            "--profiling=false", "--v=1"])
        sched = self.kubeconfig(self.work / "scheduler.kubeconfig", cert=pki.scheduler)
        self._spawn("kube-scheduler", [
            f"--kubeconfig={sched}", f"--authentication-kubeconfig={sched}", f"--authorization-kubeconfig={sched}",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}", f"--cert-dir={self.work / 'scheduler'}",
            "--leader-elect=false", "--profiling=false", "--v=1"])

        tools = self.work / "tools"
        tools.mkdir()
        for tool in TOOLS:
            made = tools / tool
            made.write_text(f"#!{sys.executable}\n" + (HERE / "standin.py").read_text(encoding="utf-8"))
            made.chmod(0o755)
        for namespace in NAMESPACES:
            for pod in (*NAMED_PODS, "_any"):
                (self.pods_dir / namespace / pod / "exec").mkdir(parents=True, exist_ok=True)
            self.clear_pods_dir(namespace)
        # The Gateway API's HTTPRoute and KEDA's ScaledObject, as a cluster with them installed serves them.
        crds = sorted((self.bin.parent / "crds").glob("*.yaml"))
        self.kubectl("apply", "--server-side", *(f"--filename={c}" for c in crds))
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                     *(f"--filename={c}" for c in crds), timeout=90)
        self.apply(*kwok_config.namespace_documents(self.pods_dir, NAMESPACES))
        config = kwok_config.write_config(self.work / "kwok.yaml", pki=pki, server_port=self.kwok_port,
                                          kubelet_port=self.kubelet_port)
        kwok_kubeconfig = self.kubeconfig(self.work / "kwok.kubeconfig", cert=pki.kwok)
        self._spawn("kwok", [f"--kubeconfig={kwok_kubeconfig}", f"--config={config}", "--v=warn"])
        # The nodes' kubelet endpoint: exec runs the stand-in tools and ends with their exit status.
        env = dict(os.environ, PATH=f"{tools}:{os.environ.get('PATH', '/usr/bin:/bin')}")
        self._spawn("kubeletfront", [f"--listen=127.0.0.1:{self.kubelet_port}", f"--kwok=https://127.0.0.1:{self.kwok_port}",
                                     f"--tls-cert-file={pki.kubelet_serving.cert}",
                                     f"--tls-private-key-file={pki.kubelet_serving.key}",
                                     f"--standin-dir={self.pods_dir}"], env=env)

        self.apply(*(gpu_node(name) for name in NODES))
        wait_for("the kwok GPU nodes turn Ready", lambda: self._alive() or self._nodes_ready(), timeout=START_TIMEOUT)
        wait_for("the controller-manager makes the default ServiceAccount",
                 lambda: self._alive() or self.get("serviceaccount", "default", namespace="default"),
                 timeout=START_TIMEOUT)

    def stop(self) -> None:
        for p in reversed(self.processes):
            if p.popen.poll() is None:
                os.killpg(p.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for p in reversed(self.processes):
            try:
                p.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.popen.pid, signal.SIGKILL)
                p.popen.wait(5)
        self.processes.clear()

    def _readyz(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        context.load_cert_chain(str(self.pki.admin.cert), str(self.pki.admin.key))
        return _http_ok(f"{self.url}/readyz", context=context)

    def _nodes_ready(self) -> bool:
        nodes = self.get("nodes")["items"]
        ready = {n["metadata"]["name"] for n in nodes
                 if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))}
        return ready >= set(NODES)

    # -- acting on the cluster as a person does --------------------------------------------------

    def kubectl(self, *argv: str, input: str | None = None, kubeconfig: Path | None = None,
                check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        done = subprocess.run(["kubectl", f"--kubeconfig={kubeconfig or self.admin_kubeconfig}", *argv],
                              input=input, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
        return done

    def apply(self, *docs: dict, server_side: bool = False) -> None:
        text = yaml.safe_dump_all(list(docs), sort_keys=False)
        extra = ["--server-side", "--field-manager=runbook-test"] if server_side else []
        self.kubectl("apply", *extra, "-f", "-", input=text)

    def get(self, kind: str, name: str | None = None, *, namespace: str | None = None) -> Any:
        argv = ["get", kind, *([name] if name else []), "-o", "json"]
        if namespace:
            argv += ["-n", namespace]
        done = self.kubectl(*argv, check=False)
        if done.returncode != 0:
            if "NotFound" in done.stderr:
                return None
            raise ControlPlaneError(f"kubectl get {kind} {name or ''}: {done.stderr.strip()}")
        return json.loads(done.stdout)

    def audit(self, namespace: str) -> list[dict]:
        """The audit log's events of `namespace` since it was last made (ResponseComplete; blocking
        mode writes each before its request is answered)."""
        if not self.audit_log.exists():
            return []
        with self.audit_log.open("rb") as log:
            log.seek(self._audit_from.get(namespace, 0))
            lines = log.read().decode("utf-8").splitlines()
        events = (json.loads(line) for line in lines if line)
        return [e for e in events if (e.get("objectRef") or {}).get("namespace") == namespace
                and e.get("stage") == "ResponseComplete"]

    def audited(self, namespace: str, *, verb: str, resource: str, user: str | None = None) -> list[dict]:
        """The audit events of `namespace` for one verb on one resource ("pods", "pods/log",
        "statefulsets/scale"), oldest first; only `user`'s when given (a username)."""
        kind, _, sub = resource.partition("/")
        return [e for e in self.audit(namespace) if e["verb"] == verb and e["objectRef"].get("resource") == kind
                and e["objectRef"].get("subresource", "") == sub
                and (user is None or e["user"]["username"] == user)]

    def token(self, namespace: str, account: str, *, seconds: int = 3600) -> str:
        """A bound token for the service account, from the TokenRequest API (what a pod is given)."""
        done = self.kubectl("create", "token", account, "-n", namespace, f"--duration={seconds}s")
        return done.stdout.strip()

    # -- the pods' insides: what their tools print, what their containers logged ------------------

    def answer(self, namespace: str, tool: str, *, pod: str | None = None, stdout: str = "", stderr: str = "",
               exit_code: int = 0, sleep: float = 0) -> None:
        where = self.pods_dir / namespace / (pod or "_any") / "exec" / f"{tool}.json"
        where.write_text(json.dumps({"stdout": stdout, "stderr": stderr, "exit_code": exit_code, "sleep": sleep}))

    def calls(self, namespace: str, pod: str | None = None) -> list[list[str]]:
        path = self.pods_dir / namespace / (pod or "_any") / "calls.jsonl"
        if not path.is_file():
            return []
        return [json.loads(line)["argv"] for line in path.read_text().splitlines() if line.strip()]

    def write_log(self, namespace: str, lines: Iterable[tuple[str, str]], *, pod: str | None = None,
                  previous: bool = False) -> None:
        """(RFC 3339 time, line) pairs as the container runtime writes them (CRI format)."""
        path = kwok_config.log_file(self.pods_dir, namespace, pod, previous=previous)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{at} stdout F {line}\n" for at, line in lines), encoding="utf-8")

    def make_namespace(self, namespace: str) -> None:
        """`namespace` anew (deleted first if there): its default ServiceAccount made, kwok told of
        its pods by name (NAMED_PODS), and their insides as new."""
        self.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=true", timeout=180)
        # From the end of the last whole line: a controller's event may be half written this moment.
        self._audit_from[namespace] = self.audit_log.read_bytes().rfind(b"\n") + 1 if self.audit_log.exists() else 0
        self.clear_pods_dir(namespace)
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        wait_for(f"the default ServiceAccount in {namespace}",
                 lambda: self.get("serviceaccount", "default", namespace=namespace), timeout=60)
        self.name_pods(namespace, NAMED_PODS)

    def name_pods(self, namespace: str, pods: Iterable[str]) -> None:
        """Tell kwok which pod each is (a Logs named after it, in its namespace), so its logs are
        its own, and make its folder, so its exec's calls are recorded. For a name the controllers
        chose (a Deployment's pods), after the pod is made."""
        docs = []
        for pod in pods:
            where = self.pods_dir / namespace / pod
            (where / "exec").mkdir(parents=True, exist_ok=True)
            (where / "current.log").touch()
            docs += kwok_config.pod_documents(self.pods_dir, namespace, pod)
        self.apply(*docs)

    def clear_pods_dir(self, namespace: str) -> None:
        """Every pod of `namespace` as new: no answers, no calls, an empty log (a running container
        always has one) and no previous one (none terminated)."""
        root = self.pods_dir / namespace
        for pod in root.iterdir():
            for leftover in (pod / "calls.jsonl", pod / "previous.log"):
                leftover.unlink(missing_ok=True)
            (pod / "current.log").write_text("")
            for answer in (pod / "exec").glob("*.json"):
                answer.unlink()

    def container_restarted(self, namespace: str, pod: str, container: str, *, reason: str = "OOMKilled",
                            exit_code: int = 137, finished_at: str, restarts: int = 1) -> None:
        """The pod's status as its kubelet reports a container that ended and was started again."""
        current = self.get("pod", pod, namespace=namespace)
        statuses = current["status"]["containerStatuses"]
        for status in statuses:
            if status["name"] == container:
                status["restartCount"] = restarts
                status["lastState"] = {"terminated": {"reason": reason, "exitCode": exit_code, "startedAt": None,
                                                      "finishedAt": finished_at}}
                status["state"] = {"running": {"startedAt": finished_at}}
        self.kubectl("patch", "pod", pod, "-n", namespace, "--subresource=status", "--type=merge",
                     "-p", json.dumps({"status": {"containerStatuses": statuses}}))


def _http_ok(url: str, *, context: ssl.SSLContext | None = None) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(url, timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def gpu_node(name: str) -> dict:
    """A GPU node as GKE's NVIDIA device plugin labels it, managed by kwok."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": name,
        "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        "labels": {"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                   "kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "a3-highgpu-8g",
                   "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                   "nvidia.com/gpu.count": "8", "cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}}}
