"""A webhook server in a process of its own, on a world kept in a file, for the SIGKILL test.

`--hang before|after` makes the first real scale stop forever just before or just after it
changes the (file-backed) world, leaving a marker file, so the test can kill it mid-action.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from runbook.backends.base import World
from runbook.clock import FakeClock
from runbook.sim.fakes import FakeCluster, FakeMetrics
from runbook.webhook.settings import Policy, WebhookConfig
from tests.engine.helpers import cluster as fake_cluster
from tests.webhook.helpers import playbook, secrets, serve_on_loopback


class FileCluster(FakeCluster):
    """The fake cluster, with its replica count and every applied change persisted to a file."""

    def __init__(self, path: Path, hang: str, marker: Path):
        saved = json.loads(path.read_text()) if path.exists() else {"replicas": 3, "mutations": []}
        super().__init__(list(fake_cluster(replicas=saved["replicas"]).workloads.values()))
        self.path, self.hang, self.marker, self.saved = path, hang, marker, saved
        self._save()

    def _save(self) -> None:
        self.path.write_text(json.dumps(self.saved))

    def _stop_here(self, when: str) -> None:
        if self.hang == when:
            self.marker.write_text(when)
            while True:  # wait to be killed
                time.sleep(1)

    def scale(self, namespace, kind, name, replicas, *, dry_run=False, **baseline):
        if dry_run:
            return super().scale(namespace, kind, name, replicas, dry_run=True, **baseline)
        self._stop_here("before")
        done = super().scale(namespace, kind, name, replicas, **baseline)
        self.saved["replicas"] = replicas
        self.saved["mutations"].append(["scale", f"{kind}/{name}", replicas])
        self._save()
        self._stop_here("after")
        return done


def main() -> None:
    from runbook.webhook.service import Service

    parser = argparse.ArgumentParser()
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--world", type=Path, required=True)
    parser.add_argument("--port-file", type=Path, required=True)
    parser.add_argument("--hang", choices=["none", "before", "after"], default="none")
    args = parser.parse_args()
    cluster = FileCluster(args.world, args.hang, args.world.with_suffix(".hung"))
    metrics = FakeMetrics({"oom_failures_per_min": lambda at: 4.0 if cluster.saved["replicas"] == 3 else 0.0})
    config = WebhookConfig(workers=1, policy=Policy(unattended={"test-oom": ["scale-down"]}))
    service = Service(config=config, secrets=secrets(), state=args.state, world=World(metrics=metrics, cluster=cluster),
                      playbooks=[playbook()], clock=FakeClock(), env={}, sweeper=False)
    serve_on_loopback(service, args.port_file)


if __name__ == "__main__":
    main()
