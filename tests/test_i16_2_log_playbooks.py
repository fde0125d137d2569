"""prompt-truncation and disconnect-storm (issue 16, item 2) on their drills and variants, read
back from the journal and the simulated world's mutations."""

from __future__ import annotations

import json
from pathlib import Path

from runbook.record import journal as journals
from runbook.actions import load_builtin
from runbook.clock import FakeClock
from runbook.drill.run import bundled_playbook
from runbook.engine.operator import AssumeYes, Scripted
from runbook.engine.runner import Engine
from runbook.record.locks import MemoryLocks
from runbook.model import events as ev
from runbook.sim.scenario import LogEntry, load_scenario
from runbook.sim.world import build_world
from runbook.webhook.policy import PolicyOperator, always_ask
from runbook.webhook.settings import Policy
from tests.realstack.timeline import alert_of
from tests.test_i16_3_canary_rollback import assert_sequence

WRITES = ("scale", "set_container_argv", "delete_pod", "set_route", "kill")


def _run(scenario, state: Path, *, operator=None, params=None, webhook: bool = False):
    """The playbook on `scenario`'s simulated world; `webhook`: as `runbook serve` runs it (every change asks)."""
    registry = load_builtin()
    playbook = bundled_playbook(scenario.playbook, registry)
    if webhook:
        playbook = always_ask(playbook, registry)
    clock = FakeClock(scenario.t0)
    world = build_world(scenario, clock)
    journal = journals.JsonlJournal.for_incident(state, journals.new_incident_id(scenario.t0, playbook.name, drill=True),
                                                 journals.new_run_id())
    engine = Engine(registry=registry, world=world.world_backends(), clock=clock, journal=journal,
                    operator=operator or AssumeYes("test"), locks=MemoryLocks(),
                    history=journals.History(None, extra=journal), holder="test")
    try:
        result = engine.run(playbook, alert=alert_of(scenario), params={**scenario.params, **(params or {})})
    finally:
        journal.close()
    return result, journals.read_journal(journal.path).events, world


def _writes(world) -> list[dict]:
    return [m for m in world.mutations if m["op"] in WRITES]


def _finished(events, step):
    return next(e for e in events if e.type == ev.STEP_FINISHED and e.step == step)


def _evidence(events, step) -> dict:
    return next(e for e in events if e.type == ev.EVIDENCE and e.step == step).data


def test_disconnect_storm_counts_per_pod_and_minute_advises_and_changes_nothing(tmp_path):
    result, events, world = _run(load_scenario("disconnect-storm"), tmp_path)
    assert result.outcome == "resolved"
    assert_sequence(events, [ev.RUN_STARTED, (ev.EVIDENCE, "disconnects"), (ev.STEP_FINISHED, "disconnects"),
                             (ev.STEP_FINISHED, "aborted-by-pod"), (ev.STEP_FINISHED, "e2e-latency"),
                             (ev.STEP_FINISHED, "pods"), (ev.STEP_FINISHED, "client-timeout-advice"),
                             (ev.STEP_FINISHED, "no-storm"), ev.RUN_FINISHED],
                    forbidden=(ev.ACTION_PLANNED, ev.ACTION_APPLIED, ev.ESCALATED))
    found = _evidence(events, "disconnects")
    assert found["above"] is True and found["firing"] == ["vllm-server-0", "vllm-server-1"]
    # 15 "Aborted request" + 12 ConnectionResetError per full minute, each pod.
    full = [n for minutes in found["by_pod_minute"].values() for n in list(minutes.values())[1:-1]]
    assert full and set(full) == {27}
    assert found["by_pattern"]["Aborted request"] > found["by_pattern"]["ConnectionResetError"] > 0
    advice = _finished(events, "client-timeout-advice").data["summary"]
    assert "read timeout" in advice and "58.0 s" in advice and "Nothing in the cluster was changed" in advice
    assert _writes(world) == []


def test_a_secret_in_a_log_line_is_redacted_before_it_is_journaled(tmp_path):
    scenario = load_scenario("disconnect-storm")
    leaky = LogEntry.model_validate({"at": -600, "text": "ERROR Aborted request chatcmpl-1 (Authorization: Bearer "
                                                         "sk-proj-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c)"})
    scenario.workloads[0].logs.append(leaky)
    _, events, _ = _run(scenario, tmp_path)
    journaled = json.dumps([e.data for e in events])
    assert "Aborted request chatcmpl-1" in journaled
    assert "sk-proj-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c" not in journaled


def test_prompt_truncation_proposes_a_raise_to_fit_the_longest_prompt(tmp_path):
    person = Scripted([True], by="on-call")  # a person's yes: the raise is guarded `unattended: false`
    result, events, world = _run(load_scenario("prompt-truncation"), tmp_path, operator=person)
    assert [r.needs_person for r in person.asked] == [True]
    assert result.outcome == "resolved"
    prompts = _evidence(events, "prompts")
    assert (prompts["max_model_len"], prompts["longest"], prompts["proposed"], prompts["capped"]) == (8192, 9310, 11264, False)
    assert prompts["rejected"] == 28 and prompts["near_limit"] == 22  # 2 pods × 14 refusals, 2 × 11 long prompts
    applied = next(e for e in events if e.type == ev.ACTION_APPLIED and e.step == "raise-max-model-len")
    assert applied.data["before"] == {"--max-model-len": "8192"} and applied.data["after"] == {"--max-model-len": "11264"}
    assert [m["op"] for m in _writes(world)] == ["set_container_argv"]
    # Lengths only: neither the prompts' text nor their token ids reach the journal.
    journaled = json.dumps([e.data for e in events])
    assert "Answer from the passages below" not in journaled and "128000, " not in journaled
    assert "chatcmpl-rag-vllm-server-0-0: 7890 prompt tokens" in journaled


def test_prompt_truncation_is_never_applied_by_a_webhook_policy_that_does_not_name_it(tmp_path):
    operator = PolicyOperator(Policy(), "prompt-truncation", closed=lambda: False)
    result, events, world = _run(load_scenario("prompt-truncation"), tmp_path, operator=operator, webhook=True)
    assert result.outcome == "proposed"
    assert_sequence(events, [(ev.ACTION_PLANNED, "raise-max-model-len"), ev.RUN_FINISHED],
                    forbidden=(ev.ACTION_APPLIED, ev.ACTION_CONFIRMED))
    assert _writes(world) == []


def test_prompt_truncation_escalates_when_the_gpu_holds_no_more(tmp_path):
    result, events, world = _run(load_scenario("prompt-truncation"), tmp_path, params={"max_model_len_ceiling": 8192})
    assert result.outcome == "escalated"
    prompts = _evidence(events, "prompts")
    assert prompts["proposed"] is None and prompts["capped"] is True
    assert_sequence(events, [(ev.STEP_FINISHED, "raise-max-model-len"), (ev.ESCALATED, "nothing-to-raise")],
                    forbidden=(ev.ACTION_PLANNED,))
    assert _writes(world) == []


def test_prompt_truncation_is_never_applied_by_yes_or_a_policy_that_names_it(tmp_path):
    """`unattended: false`: --yes refuses it, and a webhook policy listing it still only proposes it."""
    result, events, world = _run(load_scenario("prompt-truncation"), tmp_path / "yes", operator=AssumeYes("cron"))
    assert result.outcome == "refused"
    refused = next(e for e in events if e.type == ev.GUARD_REFUSED and e.step == "raise-max-model-len")
    assert refused.data["guard"] == "confirm" and "needs a person's yes" in refused.data["reason"]
    assert _writes(world) == []
    listed = PolicyOperator(Policy(unattended={"prompt-truncation": ["raise-max-model-len"]}), "prompt-truncation",
                            closed=lambda: False)
    result, events, world = _run(load_scenario("prompt-truncation"), tmp_path / "policy", operator=listed, webhook=True)
    assert result.outcome == "proposed"
    proposed = next(e for e in events if e.type == "action.proposed")
    assert "guard unattended: false" in proposed.data["reason"]
    assert _writes(world) == []


def test_an_operator_that_does_not_know_the_guard_cannot_say_yes_for_a_person(tmp_path):
    class Robot:
        def confirm(self, request):
            from runbook.engine.operator import Confirmation

            return Confirmation(True, "robot", "always")

    result, events, world = _run(load_scenario("prompt-truncation"), tmp_path, operator=Robot())
    refused = next(e for e in events if e.type == ev.GUARD_REFUSED and e.step == "raise-max-model-len")
    assert refused.data["guard"] == "unattended" and result.outcome == "refused"
    assert _writes(world) == []


def test_an_approval_with_runbook_approve_is_a_persons_yes(tmp_path):
    from runbook.webhook.policy import ApprovalOperator

    fallback = PolicyOperator(Policy(), "prompt-truncation", closed=lambda: False)
    approved = ApprovalOperator("raise-max-model-len", "alice", fallback)
    result, events, world = _run(load_scenario("prompt-truncation"), tmp_path, operator=approved, webhook=True)
    assert result.outcome == "resolved"
    confirmed = next(e for e in events if e.type == ev.ACTION_CONFIRMED and e.step == "raise-max-model-len")
    assert confirmed.data["by"] == "alice"
    assert [m["op"] for m in _writes(world)] == ["set_container_argv"]
