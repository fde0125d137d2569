"""Small playbooks the safety tests run: one remediation each, on the engine helpers' fake cluster."""

SET_ARG = """
name: lower
title: lower max-model-len
detect: {signal: oom_failures_per_min, above: 0}
params: {namespace: llm, workload: statefulset/vllm-server}
steps:
  - id: lower
    uses: k8s.set_arg
    with: {target: "{{ params.workload }}", container: vllm, flag: --max-model-len, factor: 0.9, floor: 2048}
    guard: GUARD
"""

SCALE = """
name: scale
title: scale down
detect: {signal: oom_failures_per_min, above: 0}
params: {namespace: llm, workload: statefulset/vllm-server}
steps:
  - id: scale-down
    uses: k8s.scale
    with: {target: "{{ params.workload }}", replicas: 1}
    guard: GUARD
"""


def scale_to(replicas: int, *, namespace: str = "llm") -> str:
    """SCALE scaling to `replicas` in `namespace` (its GUARD still to fill in)."""
    return SCALE.replace("namespace: llm", f"namespace: {namespace}").replace("replicas: 1", f"replicas: {replicas}")
