"""`k8s.set_arg` as an action: one flag of one container changes, nothing else, never past the floor."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.backends.base import ContainerSpec
from runbook.clock import FakeClock, utc
from runbook.engine.operator import AssumeYes
from runbook.sim.fakes import FakeCluster, FakeMetrics, FakeWorkload
from tests.engine.helpers import engine, playbook

SET_ARG = """
name: set-arg
title: set arg
params: {namespace: llm}
steps:
  - id: lower
    uses: k8s.set_arg
    with: {target: statefulset/vllm-server, container: vllm, flag: --max-model-len, factor: FACTOR, floor: FLOOR}
    guard: {min_ready: 0, budget_per_hour: null, lock: false}
"""

SIDECAR = ContainerSpec("proxy", ("envoy",), ("--max-model-len=1", "--port=9000"))


def two_containers(length: int, form: str) -> FakeCluster:
    if form == "equals":
        vllm = ContainerSpec("vllm", ("python3", "-m", "vllm.entrypoints.openai.api_server"),
                             ("--model=m", f"--max-model-len={length}", "--max-num-seqs=64"))
    elif form == "separate":
        vllm = ContainerSpec("vllm", ("vllm", "serve", "m"), ("--max-model-len", str(length), "--port", "8000"))
    else:
        vllm = ContainerSpec("vllm", ("sh", "-c", f"exec vllm serve m --max-model-len {length} --port 8000"), ())
    return FakeCluster([FakeWorkload("statefulset", "vllm-server", "llm", 2, {"app": "vllm-server"},
                                     [vllm, SIDECAR], [True, True])])


@settings(max_examples=60, deadline=None)
@given(length=st.integers(16, 200_000), factor=st.floats(0.05, 0.99), floor=st.integers(1, 100_000),
       form=st.sampled_from(["equals", "separate", "shell"]))
def test_set_arg_changes_one_flag_of_one_container_and_respects_the_floor(length, factor, floor, form):
    c = two_containers(length, form)
    before = list(c.workloads[("llm", "statefulset", "vllm-server")].containers)
    e = engine(FakeClock(utc(2026, 3, 14)), metrics=FakeMetrics({}), cluster_=c, operator=AssumeYes("t"))
    result = e.run(playbook(SET_ARG.replace("FACTOR", repr(factor)).replace("FLOOR", str(floor))))
    after = c.workloads[("llm", "statefulset", "vllm-server")].containers
    assert after[1] == SIDECAR == before[1]  # the other container is untouched
    if result.outcome == "refused":  # already at the floor: nothing to lower
        assert after == before
        return
    assert result.outcome == "resolved", result.reason
    new = int(result.steps[0].result["after"]["--max-model-len"])
    assert new >= min(floor, length) and new <= length
    assert new >= floor or length < floor
    changed = [(a, b) for a, b in zip(before[0].command + before[0].args, after[0].command + after[0].args) if a != b]
    assert len(changed) == 1
