"""Local locks hold across processes; a held lock is a guard refusal naming its holder."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from runbook.engine.operator import AssumeYes
from runbook.errors import Refused
from runbook.record.locks import LocalLocks
from runbook.model import events as ev
from tests.engine.helpers import cluster, engine, playbook

HOLDER = textwrap.dedent("""
    import sys, time
    from runbook.record.locks import LocalLocks
    with LocalLocks(sys.argv[1]).hold("llm/statefulset/vllm-server", holder="alice's runbook"):
        print("held", flush=True)
        sys.stdin.readline()
""")


@pytest.fixture
def other_process_holds_the_lock(tmp_path):
    state = tmp_path / "state"
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(state)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "held"
    yield state
    process.stdin.close()
    process.wait(timeout=10)
    process.stdout.close()


def test_a_lock_held_by_another_process_refuses(clock, other_process_holds_the_lock):
    state = other_process_holds_the_lock
    c = cluster()
    e = engine(clock, cluster_=c, locks=LocalLocks(state), operator=AssumeYes("bob"), state=state)
    result = e.run(playbook())
    refusal = next(x for x in e.journal.events() if x.type == ev.GUARD_REFUSED)
    assert refusal.data["guard"] == "lock" and "alice's runbook" in refusal.data["reason"]
    assert result.outcome == "refused" and c.mutations == []


def test_a_lock_is_released_after_use(tmp_path):
    locks = LocalLocks(tmp_path)
    with locks.hold("t", holder="a"):
        with pytest.raises(Refused):
            with locks.hold("t", holder="b"):
                pass
    with locks.hold("t", holder="b"):
        pass
