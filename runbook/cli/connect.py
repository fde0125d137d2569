"""Building the real world from flags and the config file: the composition root of live runs.

Each backend module offers `connect(config, …)` and returns None when it is not configured;
an action that needs a missing backend then fails with a message saying what to configure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from runbook import settings
from runbook.backends.base import World
from runbook.config import Config


@dataclasses.dataclass(frozen=True)
class Connection:
    prometheus_url: str | None = None
    kubeconfig: str | None = None
    kube_context: str | None = None
    in_cluster: bool = False
    server_mode: bool = False  # webhook server: no agent, no ~/.ssh key lookup


def real_world(config: Config, connection: Connection, env: Mapping[str, str] | None = None) -> World:
    from runbook.backends.http import client as http
    from runbook.backends.kubernetes import connect as kubernetes
    from runbook.backends.prometheus import client as prometheus
    from runbook.backends.ssh import nodes as ssh

    env = settings.environment() if env is None else env
    metrics = prometheus.connect(config, url=connection.prometheus_url, env=env)
    cluster = kubernetes.connect(config, kubeconfig=connection.kubeconfig, context=connection.kube_context,
                                 in_cluster=connection.in_cluster)
    nodes = ssh.connect(config, server_mode=connection.server_mode, cluster=cluster)
    return World(metrics=metrics, cluster=cluster, nodes=nodes, http=http.UrllibHttp())


def close_world(world: World) -> None:
    for backend in (world.metrics, world.cluster, world.nodes, world.http):
        close = getattr(backend, "close", None)
        if callable(close):
            close()
