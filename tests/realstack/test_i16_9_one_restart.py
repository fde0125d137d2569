"""oom-surge restarts the server once, not twice (issue 16, item 9), counted on the real stack.

The drill replayed on the test API server: the pods left after the scale-down are restarted once
(one new container, one model load) by the rollout of the lowered --max-model-len; no process is
killed. At the floor of --max-model-len the kill is the one restart instead, and nothing is rolled out.
"""

from __future__ import annotations

from tests.kubernetes.apiserver.resources import BY_KIND
from tests.realstack.harness import run_in_process


def _restarts(laid, since: int) -> list[dict]:
    """The world's container restarts and pod recreations since mutation `since`: each a model load."""
    return [m for m in laid.world.mutations[since:] if m["op"] in ("container_restarted", "delete_pod")]


def _restart_counts(laid) -> dict[str, int]:
    pods = laid.projection.store.list(BY_KIND["Pod"], "llm")[0]
    return {p["metadata"]["name"]: sum(c["restartCount"] for c in p["status"]["containerStatuses"]) for p in pods}


def test_at_the_floor_the_kill_is_the_one_restart(played, laid_out, tmp_path):
    drill = played["oom-surge-at-floor"]
    laid = laid_out(drill)
    since = len(laid.world.mutations)
    result, events = run_in_process(laid, drill, tmp_path / "state")
    assert result.outcome == "resolved", result.reason
    assert [(m["op"], m.get("pod")) for m in _restarts(laid, since)] == [("container_restarted", "vllm-server-0")]
    assert not [m for m in laid.world.mutations[since:] if m["op"] == "set_container_argv"]
    assert [e.step for e in events if e.type == "action.applied"] == ["scale-down", "kill-server"]
