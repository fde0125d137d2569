"""latency-creep (issue 16, item 2): `vllm.kv_memory` on its own (every input checked, an absent or
unreadable reading said, never read as healthy), the playbook validated, and its drills and variants
read back from the journal and the simulated world's mutations."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from click.testing import CliRunner

from runbook.actions import load_builtin
from runbook.actions.base import StepContext
from runbook.backends.base import World
from runbook.cli import main
from runbook.clock import FakeClock
from runbook.model import events as ev
from runbook.sim.scenario import load_scenario, parse_scenario
from tests.test_i16_3_canary_rollback import assert_sequence, run_on_sim

PLAYBOOK = Path(__file__).resolve().parents[1] / "playbooks" / "latency-creep.yaml"
SCENARIOS = Path(__file__).resolve().parents[1] / "runbook" / "scenarios"
A10 = 23028


# ---------------------------------------------------------------------------- vllm.kv_memory


def blocks(*rows) -> dict:
    """A prom.query result of kv_gpu_blocks by pod, num_gpu_blocks, block_size, gpu_memory_utilization."""
    return {"samples": [{"labels": {"pod": pod, "num_gpu_blocks": str(count), "block_size": "16",
                                    "gpu_memory_utilization": str(share)}, "value": 1.0}
                        for pod, count, share in rows]}


def memory(used: dict[str, float | list[float]], errors: dict[str, str] | None = None, total: float = A10) -> dict:
    """A k8s.exec result of nvidia-smi -q -d MEMORY with parse: nvidia-smi-memory."""
    def gpus(value):
        return [{"bus_id": f"0000000{i}:00:1E.0", "used_mib": u, "total_mib": total, "free_mib": total - u}
                for i, u in enumerate(value if isinstance(value, list) else [value])]
    return {"answers": {pod: {"exit_code": 0, "stdout": "…", "parsed": {"gpus": gpus(u)}} for pod, u in used.items()},
            "errors": errors or {}, "unhealthy": [], "reasons": {}}


def kv_memory(blocks_result: dict, memory_result: dict, **params):
    spec = load_builtin().get("vllm.kv_memory")
    seen = []
    now = dt.datetime(2026, 7, 16, 14, 20, tzinfo=dt.timezone.utc)
    ctx = StepContext(world=World(), clock=FakeClock(now), now=now, step_id="kv-memory", params={"namespace": "llm"},
                      dry_run=False, timeout=30.0, record_evidence=seen.append)
    out = spec.func(ctx, spec.params.model_validate({"blocks": blocks_result, "memory": memory_result, **params}))
    assert [e.kind for e in seen] == ["text"]
    return out


THREE = blocks(("vllm-server-0", 1480, 0.82), ("vllm-server-1", 1480, 0.82), ("vllm-server-2", 1480, 0.82))


def test_the_pod_using_memory_past_its_budget_is_restarted():
    out = kv_memory(THREE, memory({"vllm-server-0": 18640, "vllm-server-1": 21870, "vllm-server-2": 18640}))
    assert out.status == "ok"
    assert out.result["restart"] == ["vllm-server-1"] and out.result["water_line"] is False
    row = out.result["pods"]["vllm-server-1"]
    # vLLM's budget: 0.82 × 23028 MiB; the rest of what nvidia-smi says it uses is outside the KV pool.
    assert (row["budget_mib"], row["used_mib"], row["excess_mib"], row["kv_tokens"]) == (18883, 21870, 2987, 23680)
    assert row["excess_share"] == pytest.approx(2987 / A10, abs=1e-4)
    assert out.summary.startswith("vllm-server-1 uses 21 870 MiB, 2 987 MiB (13% of the GPU) over vLLM's budget of "
                                  "18 883 MiB (0.82 × 23 028 MiB)")
    assert "restart vllm-server-1" in out.summary and "within budget: vllm-server-0, vllm-server-2" in out.summary


def test_within_the_tolerance_is_within_budget():
    # 2% of the GPU over its budget: what vLLM's own accounting leaves out (the CUDA context), not a leak.
    over = 18883 + 0.02 * A10
    out = kv_memory(THREE, memory({"vllm-server-0": over, "vllm-server-1": over, "vllm-server-2": 18000}))
    assert out.result["restart"] == [] and out.result["water_line"] is False and out.result["unknown"] == {}
    assert "within vLLM's budget (tolerance 3% of the GPU)" in out.summary
    tight = kv_memory(THREE, memory({"vllm-server-0": over, "vllm-server-1": 18000, "vllm-server-2": 18000}),
                      tolerance=0.01)
    assert tight.result["restart"] == ["vllm-server-0"]


def test_worst_first_and_a_pod_with_far_fewer_kv_blocks_too():
    fewer = blocks(("vllm-server-0", 1480, 0.82), ("vllm-server-1", 1480, 0.82), ("vllm-server-2", 1480, 0.82),
                   ("vllm-server-3", 1200, 0.82))
    out = kv_memory(fewer, memory({"vllm-server-0": 19900, "vllm-server-1": 21870, "vllm-server-2": 18640,
                                   "vllm-server-3": 18640}))
    # Over budget by 13% and by 4.4% of the GPU, then the one that started with 81% of its siblings' KV blocks.
    assert out.result["restart"] == ["vllm-server-1", "vllm-server-0", "vllm-server-3"]
    assert out.result["short_blocks"] == ["vllm-server-3"]
    assert "vllm-server-3 has 19200 KV tokens (1200 blocks × 16), 81% of its largest sibling's 23680" in out.summary
    assert "one at a time, worst first" in out.summary


def test_every_pod_over_its_budget_is_the_water_line_not_a_restart():
    out = kv_memory(blocks(("vllm-server-0", 1912, 0.9), ("vllm-server-1", 1912, 0.9), ("vllm-server-2", 1912, 0.9)),
                    memory({"vllm-server-0": 22386, "vllm-server-1": 22386, "vllm-server-2": 22386}))
    assert out.result["water_line"] is True and out.result["restart"] == []
    assert out.summary == ("every pod is over vLLM's budget (vllm-server-0 +1 661 MiB, vllm-server-1 +1 661 MiB, "
                           "vllm-server-2 +1 661 MiB): the memory water line itself is too high; lower --max-model-len 5%")


def test_the_worst_gpu_of_a_tensor_parallel_pod_counts():
    two = blocks(("vllm-server-0", 3000, 0.9), ("vllm-server-1", 3000, 0.9))
    out = kv_memory(two, memory({"vllm-server-0": [20000, 22900], "vllm-server-1": [20000, 20100]}))
    assert out.result["restart"] == ["vllm-server-0"]
    assert out.result["pods"]["vllm-server-0"]["used_mib"] == 22900


def test_an_absent_cache_config_info_is_said_never_read_as_healthy():
    used = memory({"vllm-server-0": 18640, "vllm-server-1": 21870})
    out = kv_memory({"samples": [], "max": None, "sum": None, "matching": [], "count": 0}, used)
    assert out.result["restart"] == [] and out.result["water_line"] is False and out.result["compared"] == 0
    assert set(out.result["unknown"]) == {"vllm-server-0", "vllm-server-1"}
    assert "no vllm:cache_config_info series" in out.summary
    assert "vllm-server-1 (no vllm:cache_config_info for it: its budget is not known)" in out.summary
    failed = kv_memory({}, used)  # the KV blocks step failed: its result is empty
    assert "vllm:cache_config_info was not read" in failed.summary and failed.result["restart"] == []


def test_a_pod_that_did_not_answer_is_said_and_no_water_line_is_claimed_without_it():
    out = kv_memory(THREE, memory({"vllm-server-0": 22000, "vllm-server-1": 22100},
                                  errors={"vllm-server-2": "timed out after 20s"}))
    assert out.result["unknown"] == {"vllm-server-2": "no answer from nvidia-smi: timed out after 20s"}
    # Every pod that answered is over, but not every pod answered: restart those, worst first.
    assert out.result["water_line"] is False and out.result["restart"] == ["vllm-server-1", "vllm-server-0"]
    assert "not compared: vllm-server-2 (no answer from nvidia-smi: timed out after 20s)" in out.summary
    nothing = kv_memory(THREE, {})  # the nvidia-smi step failed
    assert "nvidia-smi was not run in the pods" in nothing.summary and nothing.result["restart"] == []


@pytest.mark.parametrize(("label", "value", "said"), [
    ("num_gpu_blocks", "lots", "num_gpu_blocks 'lots' is not a number"),
    ("num_gpu_blocks", "1e12", "num_gpu_blocks '1e12' is not a whole number in [1, 1e+08]"),
    ("num_gpu_blocks", "14.5", "not a whole number"),
    ("block_size", "0", "block_size '0' is not a whole number"),
    ("gpu_memory_utilization", "1.7", "gpu_memory_utilization '1.7' is not a number in [0.01, 1]"),
    ("gpu_memory_utilization", "nan", "is not a number in"),
    ("gpu_memory_utilization", None, "gpu_memory_utilization 'None' is not a number"),
])
def test_labels_are_numbers_parsed_and_bounded(label, value, said):
    bad = blocks(("vllm-server-0", 1480, 0.82), ("vllm-server-1", 1480, 0.82))
    bad["samples"][1]["labels"][label] = value
    out = kv_memory(bad, memory({"vllm-server-0": 18640, "vllm-server-1": 21870}))
    assert "vllm-server-1" not in out.result["restart"] and "vllm-server-1" not in out.result["pods"]
    assert said in out.result["unknown"]["vllm-server-1"]


def test_names_that_are_not_pod_names_never_reach_a_later_step():
    hostile = blocks(("vllm-server-0", 1480, 0.82), ("x;rm -rf /", 10, 0.82), ("Vllm_Server", 10, 0.82))
    out = kv_memory(hostile, memory({"vllm-server-0": 22000, "vllm-server-1": 18000, "$(reboot)": 22000},
                                    errors={"a b": "x"}))
    assert set(out.result["pods"]) == {"vllm-server-0"} and out.result["restart"] == ["vllm-server-0"]
    assert set(out.result["unknown"]) == {"vllm-server-1"} and out.result["left_out"] == 4
    assert "left out 4 reading(s) whose pod label is not a pod name" in out.summary
    # What was left out may be a pod over its budget: never "every pod", so never the water line.
    alone = kv_memory(blocks(("vllm-server-0", 1480, 0.82), ("Vllm_Server", 10, 0.82)),
                      memory({"vllm-server-0": 22000}))
    assert alone.result["water_line"] is False and alone.result["restart"] == ["vllm-server-0"]


def test_two_cache_configs_for_one_pod_are_not_compared():
    twice = blocks(("vllm-server-0", 1480, 0.82), ("vllm-server-1", 1480, 0.82), ("vllm-server-1", 900, 0.82))
    out = kv_memory(twice, memory({"vllm-server-0": 18640, "vllm-server-1": 21870}))
    assert out.result["unknown"]["vllm-server-1"] == ("2 vllm:cache_config_info series (several engines or configs): "
                                                      "not compared")
    assert out.result["restart"] == []


def test_unreadable_gpu_memory_is_said():
    odd = memory({"vllm-server-0": 18640, "vllm-server-1": 18640})
    odd["answers"]["vllm-server-1"]["parsed"]["gpus"][0]["used_mib"] = None  # nvidia-smi said N/A
    odd["answers"]["vllm-server-0"]["parsed"] = {}
    out = kv_memory(THREE, odd)
    assert out.result["unknown"]["vllm-server-0"] == "nvidia-smi showed no GPU"
    assert out.result["unknown"]["vllm-server-1"].startswith("nvidia-smi's memory cannot be read: used memory")
    assert out.result["compared"] == 0


# ---------------------------------------------------------------------------- the playbook


def test_the_playbook_validates():
    result = CliRunner().invoke(main, ["validate", str(PLAYBOOK)])
    assert result.exit_code == 0, result.output
    assert "latency-creep" in result.output


# ---------------------------------------------------------------------------- the drills


def _writes(world) -> list[tuple]:
    return [(m["op"], m.get("pod") or m.get("workload"), (m.get("after") or {}).get("args"))
            for m in world.mutations if m["op"] in ("scale", "set_container_argv", "delete_pod", "kill")]


def _finished(events, step):
    return next(e for e in events if e.type == ev.STEP_FINISHED and e.step == step)


def test_the_drill_restarts_the_one_pod_over_its_budget_and_the_p99_comes_back(tmp_path):
    result, events, world = run_on_sim(load_scenario("latency-creep"), tmp_path)
    assert result.outcome == "resolved"
    assert_sequence(events, [
        (ev.STEP_FINISHED, "latency-trend"), (ev.STEP_FINISHED, "p99-by-pod"), (ev.STEP_FINISHED, "kv-blocks"),
        (ev.STEP_FINISHED, "gpu-memory"), (ev.EVIDENCE, "kv-memory"), (ev.STEP_FINISHED, "kv-memory"),
        (ev.STEP_FINISHED, "kv-cache"), (ev.ACTION_PLANNED, "restart-worst"), (ev.GUARD_PASSED, "restart-worst"),
        (ev.ACTION_APPLIED, "restart-worst"), (ev.VERIFY_PASSED, "worst-ready"), (ev.VERIFY_PASSED, "latency-back"),
        ev.RUN_FINISHED], forbidden=(ev.ESCALATED, ev.GUARD_REFUSED))
    assert _writes(world) == [("delete_pod", "vllm-server-1", None)]
    assert "gradual" in _finished(events, "latency-trend").data["summary"]
    assert _finished(events, "kv-memory").data["summary"].startswith("vllm-server-1 uses 21 870 MiB")


def test_the_water_line_drill_lowers_max_model_len_five_percent_and_restarts_no_pod_by_hand(tmp_path):
    result, events, world = run_on_sim(load_scenario("latency-creep-water-line"), tmp_path)
    assert result.outcome == "resolved"
    assert_sequence(events, [(ev.STEP_FINISHED, "kv-memory"), (ev.ACTION_PLANNED, "lower-max-model-len"),
                             (ev.ACTION_APPLIED, "lower-max-model-len"), (ev.VERIFY_PASSED, "latency-back-lowered"),
                             ev.RUN_FINISHED], forbidden=(ev.ESCALATED, ev.GUARD_REFUSED))
    [(op, workload, args)] = _writes(world)
    assert (op, workload) == ("set_container_argv", "statefulset/vllm-server") and "--max-model-len=7003" in args
    planned = next(e for e in events if e.type == ev.ACTION_PLANNED and e.step == "lower-max-model-len")
    assert planned.data["after"] == {"--max-model-len": "7003"}  # 7372 × 0.95


def _variant(name: str, replace: list[tuple[str, str]]):
    text = (SCENARIOS / f"{name}.yaml").read_text()
    for old, new in replace:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return parse_scenario(text, f"{name} (variant)")


TWO_OVER = [("""  - name: vllm-server-1
    started: -9d
    gpu_memory_mib: 21870
""", """  - name: vllm-server-1
    started: -9d
    gpu_memory_mib: 21870
  - name: vllm-server-0
    started: -5d
    gpu_memory_mib: 20100
""")]
# The worst pod's restart alone does not bring the P99 back: the second one does.
HALF_BACK = [("""      - {signal: e2e_latency_p99_vs_earlier, points: [[0, 1.9], [60, 1.5], [180, 1.0]]}
""", """      - {signal: e2e_latency_p99_vs_earlier, points: [[0, 1.9], [60, 1.7], [180, 1.6]]}
""")] + [("""      - {signal: kv_cache_usage, labels: {pod: vllm-server-1}, points: [[60, 0.31], [180, 0.6]]}
""", """      - {signal: kv_cache_usage, labels: {pod: vllm-server-1}, points: [[60, 0.31], [180, 0.6]]}
  - name: restarting-the-second-brings-the-rest-back
    on: {pod_deleted: {pod: vllm-server-0}}
    effects:
      - {signal: e2e_latency_p99_vs_earlier, points: [[0, 1.7], [120, 1.0]]}
""")]


def test_two_pods_over_budget_are_restarted_one_at_a_time_worst_first(tmp_path):
    result, events, world = run_on_sim(_variant("latency-creep", TWO_OVER + HALF_BACK), tmp_path)
    assert result.outcome == "resolved"
    assert_sequence(events, [(ev.ACTION_APPLIED, "restart-worst"), (ev.VERIFY_PASSED, "worst-ready"),
                             (ev.ACTION_PLANNED, "restart-next"), (ev.GUARD_PASSED, "restart-next"),
                             (ev.ACTION_APPLIED, "restart-next"), (ev.VERIFY_PASSED, "next-ready"),
                             (ev.VERIFY_PASSED, "latency-back"), ev.RUN_FINISHED],
                    forbidden=(ev.ESCALATED, ev.GUARD_REFUSED))
    assert _writes(world) == [("delete_pod", "vllm-server-1", None), ("delete_pod", "vllm-server-0", None)]
    # The second waited until the first was back and had stayed ready (its cooldown held too).
    applied = [e.at for e in events if e.type == ev.ACTION_APPLIED]
    assert applied[1] - applied[0] >= dt.timedelta(minutes=2)


def test_a_second_restart_the_p99_no_longer_needs_is_skipped_by_the_recheck(tmp_path):
    result, events, world = run_on_sim(_variant("latency-creep", TWO_OVER), tmp_path)
    assert result.outcome == "resolved"
    skipped = next(e for e in events if e.type == ev.ACTION_SKIPPED and e.step == "restart-next")
    assert skipped.data["reason"] == "e2e_latency_p99_vs_earlier > 1.5 no longer holds (now 1); nothing to do"
    assert _writes(world) == [("delete_pod", "vllm-server-1", None)]
    assert_sequence(events, [(ev.ACTION_PLANNED, "restart-next"), (ev.ACTION_SKIPPED, "restart-next"),
                             (ev.VERIFY_PASSED, "latency-back"), ev.RUN_FINISHED],
                    forbidden=(ev.ESCALATED, ev.GUARD_REFUSED))


def test_no_pod_over_budget_escalates_with_the_evidence_and_changes_nothing(tmp_path):
    healthy = [("""  - name: vllm-server-1
    started: -9d
    gpu_memory_mib: 21870
""", """  - name: vllm-server-1
    started: -9d
""")]
    result, events, world = run_on_sim(_variant("latency-creep", healthy), tmp_path)
    assert result.outcome == "escalated"
    escalated = next(e for e in events if e.type == ev.ESCALATED)
    assert "names no fix" in escalated.data["reason"] and "within vLLM's budget" in escalated.data["reason"]
    assert escalated.data["suggestion"] == "runbook triage -n llm"
    assert _writes(world) == []
    assert not [e for e in events if e.type == ev.ACTION_PLANNED]
