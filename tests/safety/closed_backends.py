"""`runbook run` pointed at backends that cannot answer, and a record of whether it built them.

A Prometheus URL and a kubeconfig name a loopback port nothing listens on; `real_world` is wrapped
so a test can say the run stopped before any backend was built, and the state dir shows no incident.
"""

from __future__ import annotations

import dataclasses
import json
import socket
from pathlib import Path

from click.testing import CliRunner

from runbook.cli import connect, main


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclasses.dataclass
class ClosedBackends:
    root: Path
    port: int
    built: list[str] = dataclasses.field(default_factory=list)  # one entry each time real_world ran

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig.yaml"

    def config(self, namespaces: list[str] | None = None) -> Path:
        path = self.root / "runbook.yaml"
        kubernetes: dict = {"retries": 0, "request_timeout": 2, "connect_timeout": 1}
        if namespaces is not None:
            kubernetes["namespaces"] = namespaces
        path.write_text(json.dumps({"kubernetes": kubernetes, "prometheus": {"timeout": 2}}))
        return path

    def alert(self, labels: dict[str, str], name: str = "VllmOomSurge") -> Path:
        path = self.root / "alert.json"
        path.write_text(json.dumps({"version": "4", "status": "firing", "alerts": [
            {"status": "firing", "labels": {"alertname": name, **labels}, "annotations": {}, "fingerprint": "f1"}]}))
        return path

    def invoke(self, *args: str, namespaces: list[str] | None = None):
        return CliRunner().invoke(main, [args[0], *args[1:], "--config", str(self.config(namespaces)),
                                         "--prometheus-url", f"http://127.0.0.1:{self.port}",
                                         "--kubeconfig", str(self.kubeconfig), "--yes"], catch_exceptions=False)

    def incidents(self, state: Path) -> list[str]:
        folder = state / "incidents"
        return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def closed_backends(root: Path, monkeypatch) -> ClosedBackends:
    backends = ClosedBackends(root, closed_port())
    backends.kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "closed",
        "clusters": [{"name": "closed", "cluster": {"server": f"https://127.0.0.1:{backends.port}",
                                                    "insecure-skip-tls-verify": True}}],
        "users": [{"name": "closed", "user": {"token": "not-a-real-token"}}],
        "contexts": [{"name": "closed", "context": {"cluster": "closed", "user": "closed", "namespace": "llm"}}]}))
    real = connect.real_world

    def recording(*args, **kwargs):
        backends.built.append("real_world")
        return real(*args, **kwargs)

    monkeypatch.setattr(connect, "real_world", recording)
    return backends
