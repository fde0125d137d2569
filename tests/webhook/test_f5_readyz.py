"""Finding 5 of issue 12: a worker stuck in a run past `webhook.worker_deadline` makes /readyz not ready.

The run's node command blocks on an Event until the test lets it go; the worker's deadline is read
on the service's fake clock, so "past the deadline" is one `advance`, never a sleep.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from runbook.backends.base import CommandResult, World
from runbook.clock import FakeClock
from runbook.errors import BackendUnavailable
from runbook.sim.fakes import FakeMetrics
from runbook.webhook.settings import WebhookConfig
from tests.engine.helpers import cluster as fake_cluster
from tests.webhook.helpers import am_group, am_headers, playbook, request, serve

GUARD = 30.0  # bounded waits for the run to reach its node command and to finish; never reached when it works

NODE_PLAYBOOK = """
name: test-node-hang
title: A diagnostic on a GPU node
match: {alerts: [VllmOomSurge], labels: {namespace: namespace}}
detect: {signal: oom_failures_per_min, above: 0}
params: {namespace: llm}
steps:
  - id: gpu-memory
    uses: node.run
    with: {node: gpu-node-2, command: [nvidia-smi, -q, -d, MEMORY]}
"""


class BlockingNodes:
    """`Nodes.run` that waits until the test releases it: an SSH command whose answer never comes."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def run(self, node: str, argv: Sequence[str], *, timeout: float) -> CommandResult:
        self.entered.set()
        if not self.release.wait(GUARD):
            raise BackendUnavailable(f"{node}: the test never released the command")
        return CommandResult("FB Memory Usage\n", "", 0)


@pytest.fixture
def state(tmp_path):
    return tmp_path / "state"


def readyz(srv):
    return request(srv.url, "GET", "/readyz")


def overdue_gauge(srv) -> str:
    text = request(srv.url, "GET", "/metrics").body
    return next(line for line in text.splitlines() if line.startswith("runbook_webhook_runs_overdue "))


def test_f5_a_worker_stuck_past_its_deadline_makes_readyz_not_ready(state):
    nodes, clock = BlockingNodes(), FakeClock()
    world = World(metrics=FakeMetrics({"oom_failures_per_min": lambda at: 4.0}), cluster=fake_cluster(), nodes=nodes)
    config = WebhookConfig(workers=1, worker_deadline=120)
    with serve(state, world=world, config=config, clock=clock, playbooks=[playbook(NODE_PLAYBOOK)]) as srv:
        reply = request(srv.url, "POST", "/webhooks/alertmanager", am_group(), am_headers())
        assert reply.status == 202, reply.body
        incident = reply.body["alerts"][0]["incident"]
        assert nodes.entered.wait(GUARD), "the run never reached its node command"

        assert readyz(srv).status == 200  # busy within its deadline is still ready
        clock.advance(121)
        stuck = readyz(srv)
        assert stuck.status == 503, stuck.body
        (problem,) = [p for p in stuck.body["problems"] if incident in p]
        assert "worker_deadline" in problem and "2m" in problem, problem
        assert request(srv.url, "GET", "/healthz").status == 200  # the process is alive; it is not ready
        assert overdue_gauge(srv) == "runbook_webhook_runs_overdue 1.0"

        nodes.release.set()
        srv.wait_idle(GUARD)
        assert readyz(srv).body == {"status": "ready"}
        assert overdue_gauge(srv) == "runbook_webhook_runs_overdue 0.0"


def test_f5_the_worker_deadline_is_configured_in_the_webhook_section():
    assert WebhookConfig().worker_deadline == 1800.0
    assert WebhookConfig.model_validate({"worker_deadline": "10m"}).worker_deadline == 600.0
    with pytest.raises(ValueError, match="worker_deadline"):
        WebhookConfig.model_validate({"worker_deadline": 0})
