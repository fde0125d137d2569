"""Builders for engine tests: a small playbook, a fake world and an engine over a journal."""

from __future__ import annotations

from pathlib import Path

from runbook.backends.base import ContainerSpec, NodeInfo, World
from runbook.engine.operator import AssumeYes
from runbook.engine.runner import Engine
from runbook.record.journal import History, JsonlJournal, MemoryJournal
from runbook.loading.validation import load_playbook_text
from runbook.record.locks import MemoryLocks
from runbook.actions import load_builtin
from runbook.sim.fakes import FakeCluster, FakeMetrics, FakeWorkload

ARGS = ("--model=meta-llama/Meta-Llama-3-8B-Instruct", "--max-model-len=7372", "--port=8000")

PLAYBOOK = """
name: test-oom
title: test playbook
detect: {signal: oom_failures_per_min, above: 0}
params: {namespace: llm, workload: statefulset/vllm-server}
steps:
  - id: oom
    uses: prom.query
    with: {signal: oom_failures_per_min}
  - id: scale-down
    uses: k8s.scale
    with: {target: "{{ params.workload }}", replicas: 1}
    guard: GUARD
  - id: observe
    uses: flow.verify
    with: {signal: oom_failures_per_min, below: 1, for: 2m, within: 5m, interval: 15s}
    on_fail: rollback
"""


def playbook(text: str = PLAYBOOK, guard: str = "{floor: 1}"):
    loaded = load_playbook_text(text.replace("GUARD", guard), file="test.yaml", registry=load_builtin())
    assert loaded.playbook is not None, [p.format() for p in loaded.problems]
    return loaded.playbook


def cluster(replicas: int = 3, ready: list[bool] | None = None) -> FakeCluster:
    return FakeCluster([FakeWorkload("statefulset", "vllm-server", "llm", replicas, {"app": "vllm-server"},
                                     [ContainerSpec("vllm", ("python3", "-m", "vllm.entrypoints.openai.api_server"), ARGS)],
                                     ready if ready is not None else [True] * replicas)],
                       nodes={"gpu-node-2": NodeInfo("gpu-node-2", True, False)})


def engine(clock, *, metrics=None, cluster_=None, operator=None, journal=None, locks=None, history=None,
           dry_run=False, kill_switch=lambda: None, state: Path | None = None, incident: str = "inc-1"):
    if journal is None:
        journal = JsonlJournal.for_incident(state, incident, "run-1") if state else MemoryJournal(incident)
    world = World(metrics=metrics if metrics is not None else FakeMetrics({"oom_failures_per_min": 4}),
                  cluster=cluster_ if cluster_ is not None else cluster())
    return Engine(registry=load_builtin(), world=world, clock=clock, journal=journal,
                  operator=operator or AssumeYes("alice"), locks=locks or MemoryLocks(),
                  history=history or History(state, extra=journal if state is None else None),
                  dry_run=dry_run, kill_switch=kill_switch)
