"""The bundled playbooks end to end on the real Kubernetes backend, against the test API server.

Metrics, /health and the containers' answers come from `Fleet`, which reads the server's state,
so each verification passes only because the remediation really changed the cluster.
"""

from __future__ import annotations

import datetime as dt

from runbook.backends.base import World
from runbook.clock import FakeClock, utc
from runbook.engine.operator import AssumeYes
from runbook.engine.runner import Engine
from runbook.journal import History, MemoryJournal
from runbook.loading import validation
from runbook.backends.kubernetes.leases import LeaseLocks
from runbook.actions import load_builtin
from tests.conftest import assert_sequence, data_text
from tests.kubernetes.fleet import Fleet


def bundled(name: str):
    registry = load_builtin()
    path = next(d / f"{name}.yaml" for d in validation.default_paths() if (d / f"{name}.yaml").is_file())
    loaded = validation.load_playbook_file(path, registry)
    assert loaded.playbook is not None, [p.format() for p in loaded.problems]
    return loaded.playbook


def run(name: str, cluster, fleet: Fleet, *, dry_run: bool = False):
    journal = MemoryJournal(f"inc-{name}")
    engine = Engine(registry=load_builtin(), world=World(metrics=fleet, cluster=cluster, http=fleet),
                    clock=FakeClock(utc(2026, 3, 14, 3, 12, 7)), journal=journal, operator=AssumeYes("alice"),
                    locks=LeaseLocks(cluster), history=History(None, extra=journal), dry_run=dry_run)
    return engine.run(bundled(name)), journal.events()


def _uids(k8s) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in k8s.pods()}


def _writes(k8s) -> list[tuple[str, str, str | None, bool]]:
    return [(s.verb, s.resource, s.name, s.dry_run) for s in k8s.seen if s.method not in ("GET",)]


def test_waiting_queue_deletes_the_unready_pod_and_the_queue_drains(k8s, cluster):
    fleet = Fleet(k8s)
    k8s.set_pod("llm", "vllm-server-1", ready=False)
    now = dt.datetime.now(dt.timezone.utc)
    gateway = sorted(p["metadata"]["name"] for p in k8s.pods() if p["metadata"]["labels"]["app"] == "api-gateway")
    for i in range(7):
        k8s.kubelet.log("llm", gateway[i % 2], "gateway", f'10.0.0.{i} "POST /v1/completions" 503 0.01')
    k8s.kubelet.log("llm", gateway[0], "gateway", '10.0.0.9 "POST /v1/completions" 503 0.01',
                    at=now - dt.timedelta(minutes=20))  # outside the SOP's 5-minute window
    before = _uids(k8s)

    result, events = run("waiting-queue", cluster, fleet)

    assert result.outcome == "resolved", result.reason
    steps = {s.id: s for s in result.steps}
    assert steps["pods"].result["not_ready"] == ["vllm-server-1"]
    assert steps["gateway-503"].result["count"] == 7
    after = _uids(k8s)
    assert after["vllm-server-1"] != before["vllm-server-1"]  # recreated by the StatefulSet
    assert {n: after[n] for n in ("vllm-server-0", "vllm-server-2")} == {n: before[n] for n in ("vllm-server-0", "vllm-server-2")}
    assert k8s.get("StatefulSet", "llm", "vllm-server")["status"]["readyReplicas"] == 3
    assert_sequence(events, ["action.planned", "guard.passed", "action.applied", "verify.passed", "run.finished"],
                    forbidden=("guard.refused", "action.failed"))
    deletes = [w for w in _writes(k8s) if w[1] == "pods"]
    assert deletes == [("delete", "pods", "vllm-server-1", True), ("delete", "pods", "vllm-server-1", False)]
    leases = [w[0] for w in _writes(k8s) if w[1] == "leases"]
    assert leases == ["create", "delete"] and k8s.objects("Lease") == []


def test_oom_surge_scales_down_and_restarts_once_with_a_lower_max_model_len(k8s, cluster):
    report = data_text("nvidia-smi/q-d-memory-h100-80gb-vllm-serving.txt")
    fleet = Fleet(k8s, memory_report=report)

    result, events = run("oom-surge", cluster, fleet)

    assert result.outcome == "resolved", result.reason
    sts = k8s.get("StatefulSet", "llm", "vllm-server")
    assert sts["spec"]["replicas"] == 1
    args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--max-model-len") + 1] == "6635"  # 7372 × 0.9, the rest of the line untouched
    assert [a for i, a in enumerate(args) if i != args.index("--max-model-len") + 1] == \
        ["--model", "meta-llama/Meta-Llama-3-8B-Instruct", "--max-model-len", "--port", "8000", "--gpu-memory-utilization=0.9"]
    assert fleet.killed == []  # the rollout of the lowered value is the one restart (issue 16, item 9)
    answers = result_of(result, "gpu-memory")["answers"]
    assert sorted(answers) == ["vllm-server-0", "vllm-server-1", "vllm-server-2"]
    # Each change went to the server as a dry run first, then for real.
    changes = [w for w in _writes(k8s) if w[1] in ("statefulsets/scale", "statefulsets")]
    assert changes == [("patch", "statefulsets/scale", "vllm-server", True), ("patch", "statefulsets/scale", "vllm-server", False),
                       ("patch", "statefulsets", "vllm-server", True), ("patch", "statefulsets", "vllm-server", False)]
    assert_sequence(events, ["action.planned", "guard.passed", "action.applied",  # scale
                             "action.planned", "guard.passed", "action.applied",  # --max-model-len
                             "verify.passed"], forbidden=("rollback.applied", "action.failed"))


def result_of(result, step: str) -> dict:
    return next(s for s in result.steps if s.id == step).result


def test_zombie_process_deletes_only_the_hung_pod(k8s, cluster):
    fleet = Fleet(k8s)
    fleet.hang("vllm-server-2")
    before = _uids(k8s)

    result, events = run("zombie-process", cluster, fleet)

    assert result.outcome == "resolved", result.reason
    assert result_of(result, "listening")["unhealthy"] == ["vllm-server-2"]
    assert result_of(result, "processes")["unhealthy"] == ["vllm-server-2"]
    after = _uids(k8s)
    assert after["vllm-server-2"] != before["vllm-server-2"]
    assert after["vllm-server-0"] == before["vllm-server-0"] and after["vllm-server-1"] == before["vllm-server-1"]
    assert_sequence(events, ["action.planned", "guard.passed", "action.applied", "verify.passed", "verify.passed"])


def test_a_dry_run_of_a_playbook_changes_nothing_in_the_cluster(k8s, cluster):
    fleet = Fleet(k8s)
    sts_before = k8s.get("StatefulSet", "llm", "vllm-server")
    before = _uids(k8s)

    result, events = run("oom-surge", cluster, fleet, dry_run=True)

    assert result.outcome == "dry_run", result.reason
    assert k8s.get("StatefulSet", "llm", "vllm-server") == sts_before
    assert _uids(k8s) == before and fleet.killed == []
    assert all(dry for _, resource, _, dry in _writes(k8s) if resource != "pods/exec")


def test_a_lease_held_elsewhere_refuses_the_remediation(k8s, cluster):
    fleet = Fleet(k8s)
    k8s.set_pod("llm", "vllm-server-1", ready=False)
    with LeaseLocks(cluster).hold("llm/statefulset/vllm-server", holder="bob incident inc-9"):
        result, events = run("waiting-queue", cluster, fleet)
    refusals = [e.data for e in events if e.type == "guard.refused"]
    assert refusals and refusals[0]["guard"] == "lock" and "bob incident inc-9" in refusals[0]["reason"]
    assert not [w for w in _writes(k8s) if w[1] == "pods" and not w[3]]  # nothing deleted
