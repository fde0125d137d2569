"""disconnect-storm and prompt-truncation on the real stack (issue 16, item 2), read from the test
API server's audit log: the storm changes nothing in the cluster; the prompt check reads the
current logs, and no previous container's log of a pod whose status shows it never restarted."""

from __future__ import annotations

from tests.realstack.harness import run_in_process

WRITES = {"POST", "PUT", "PATCH", "DELETE"}


def test_disconnect_storm_reads_logs_and_writes_nothing_to_the_cluster(played, laid_out, stack, tmp_path):
    drill = played["disconnect-storm"]
    laid = laid_out(drill)
    result, events = run_in_process(laid, drill, tmp_path / "state")
    assert result.outcome == "resolved"
    seen = list(stack.apiserver.seen)
    logs = [s for s in seen if s.resource == "pods/log"]
    assert sorted(s.name for s in logs) == ["vllm-server-0", "vllm-server-1"] and {s.code for s in logs} == {200}
    assert [f"{s.method} {s.path}" for s in seen if s.method in WRITES] == []
    advice = next(e for e in events if e.step == "client-timeout-advice" and e.type == "step.finished")
    assert advice.data["status"] == "ok"


def test_prompt_truncation_reads_previous_logs_and_changes_only_the_flag(played, laid_out, stack, tmp_path):
    drill = played["prompt-truncation"]
    laid = laid_out(drill)
    result, _ = run_in_process(laid, drill, tmp_path / "state")
    assert result.outcome == drill.scenario.expect == "resolved"
    seen = list(stack.apiserver.seen)
    logs = [(s.name, s.code) for s in seen if s.resource == "pods/log"]
    # read: both — but neither pod restarted (restart count 0, no last state): the previous logs the
    # kubelet would refuse with a 400 are not asked for.
    assert sorted(logs) == [("vllm-server-0", 200), ("vllm-server-1", 200)]
    written = {(s.method, s.resource, s.name) for s in seen if s.method in WRITES and not s.dry_run
               and s.resource not in ("leases", "configmaps")}
    assert written == {("PATCH", "statefulsets", "vllm-server")}
