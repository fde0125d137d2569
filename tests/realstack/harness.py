"""One scenario laid onto the real components, and the bundled playbook run on them.

`Stack` holds the session's servers; `lay(stack, played, tmp)` puts one scenario on them and writes
the config file `runbook run` reads (Prometheus URL, signal overrides, kubeconfig and context,
the SSH node inventory); `run_in_process` runs the engine as `runbook run` does, on the real
backends built by `real_world`, with a fake clock standing at the scenario's virtual time.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import yaml

from runbook.record import journal as journals
from runbook import settings
from runbook.backends import shared_state
from runbook.backends.base import World
from runbook.clock import Clock
from runbook.cli.connect import Connection, close_world, real_world
from runbook.config import load_config
from runbook.drill.run import bundled_playbook
from runbook.sim.scenario import Scenario
from runbook.sim.world import build_world
from runbook.engine.operator import AssumeYes
from runbook.engine.runner import Engine, RunResult
from runbook.model.events import Event
from runbook.actions import load_builtin
from tests.standin.apiserver.server import ApiServer
from tests.realstack.cluster import ProjectedCluster, ProjectingClock
from tests.realstack.nodes import NodeLogins, Oracle
from tests.realstack.timeline import Played, alert_of, signal_overrides

CONTEXT = "runbook-test"


@dataclasses.dataclass
class Stack:
    prometheus_url: str
    unreachable_url: str  # a loopback port nothing listens on
    apiserver: ApiServer
    oracle: Oracle
    logins: NodeLogins


@dataclasses.dataclass
class Laid:
    config: Path
    kubeconfig: Path
    clock: Clock
    projection: ProjectedCluster
    world: Any  # the SimulatedWorld behind the API server's pods and the nodes' tools

    def close(self, stack: Stack) -> None:
        stack.oracle.use(None, threading.RLock())
        self.projection.detach()


class _Locked:
    """The world's HTTP probe, taking the lock the projection holds (the world is one object)."""

    def __init__(self, backend: Any, lock: threading.RLock):
        self._backend, self._lock = backend, lock

    def get(self, url: str, *, timeout: float):
        with self._lock:
            return self._backend.get(url, timeout=timeout)


def lay(stack: Stack, played: Played, directory: Path, *, clock: Clock | None = None, scenario: Scenario | None = None,
        prometheus_url: str | None = None) -> Laid:
    """`scenario` (default: the drill's) on the stack, its world on `clock` (default: virtual time
    from the scenario's start, which the API server's pods follow)."""
    scenario = scenario or played.scenario
    clock = clock or ProjectingClock(scenario.t0)
    world = build_world(scenario, clock)
    projection = ProjectedCluster(stack.apiserver, world, clock if isinstance(clock, ProjectingClock) else None)
    stack.oracle.use(world, projection.lock)
    directory.mkdir(parents=True, exist_ok=True)
    kubeconfig = stack.apiserver.kubeconfig(directory / "kubeconfig", contexts=(CONTEXT,))
    url = prometheus_url or (stack.unreachable_url if scenario.metrics.unreachable else stack.prometheus_url)
    names = sorted(world.state.nodes)
    config = {
        "prometheus": {"url": url, "timeout": 10},
        "signals": {"overrides": signal_overrides(scenario)},
        "kubernetes": {"kubeconfig": str(kubeconfig), "context": CONTEXT, "request_timeout": 10,
                       "connect_timeout": 5, "retries": 1},
        "nodes": stack.logins.section(directory / "known_hosts", names),
    }
    if not scenario.workloads and any(n.compose for n in scenario.nodes):
        del config["kubernetes"]  # Docker Compose hosts (SOP §6): no Kubernetes, as where such a playbook runs
    path = directory / "runbook.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return Laid(path, kubeconfig, clock, projection, world)


def real_backends(laid: Laid) -> World:
    """What `runbook run --config` builds, with the HTTP probe left to the world: pod addresses
    (10.244.x.y) lead nowhere from a test machine."""
    world = real_world(load_config(laid.config), Connection())
    return dataclasses.replace(world, http=_Locked(laid.world.http, laid.projection.lock))


def run_in_process(laid: Laid, played: Played, state: Path) -> tuple[RunResult, list[Event]]:
    """The engine as `runbook.cli.running.run_playbook` builds it, but on the scenario's clock."""
    registry = load_builtin()
    playbook = bundled_playbook(played.scenario.playbook, registry)
    world = real_backends(laid)
    incident = journals.new_incident_id(laid.clock.now(), playbook.name)
    journal = journals.JsonlJournal.for_incident(state, incident, journals.new_run_id())
    operator = AssumeYes("realstack", rehearsal=True)  # the drill's --yes, replayed
    engine = Engine(registry=registry, world=world, clock=laid.clock, journal=journal, operator=operator,
                    locks=shared_state.target_locks(world, state), history=journals.History(state),
                    kill_switch=lambda: settings.kill_switch(state), holder=f"runbook run by {operator.by}")
    try:
        result = engine.run(playbook, alert=alert_of(played.scenario), params=played.scenario.params)
    finally:
        journal.close()
        close_world(world)
    return result, journals.read_journal(journal.path).events
