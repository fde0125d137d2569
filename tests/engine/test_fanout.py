"""Fan-out: targets run concurrently, in a bounded pool, and one dead target is reported as timed out."""

from __future__ import annotations

import threading

from runbook.actions.fanout import fan_out, fan_out_in_order
from runbook.errors import BackendUnavailable, CommandFailed


def test_results_keep_the_order_of_the_targets():
    outcomes = fan_out(list(range(20)), lambda n: n * n, pool_size=4, deadline=10)
    assert [o.result for o in outcomes] == [n * n for n in range(20)]


def test_a_dead_target_times_out_and_the_others_still_answer():
    never = threading.Event()

    def work(name: str) -> str:
        if name == "dead":
            never.wait(5)  # bounded: the test never sets it, the pool thread ends on its own
            return "late"
        return f"{name} ok"

    outcomes = fan_out(["a", "dead", "b"], work, pool_size=3, deadline=0.3, describe=lambda n: f"pod {n}")
    assert [o.result for o in outcomes] == ["a ok", None, "b ok"]
    assert isinstance(outcomes[1].error, BackendUnavailable) and "pod dead" in str(outcomes[1].error)
    never.set()


def test_backend_errors_become_that_targets_error():
    def work(n: int) -> int:
        if n == 2:
            raise CommandFailed("exit 1")
        return n

    outcomes = fan_out([1, 2, 3], work, pool_size=2, deadline=5)
    assert [o.result for o in outcomes] == [1, None, 3] and str(outcomes[1].error) == "exit 1"


def test_the_pool_is_bounded():
    running, peak, lock = [0], [0], threading.Lock()
    gate = threading.Barrier(3, timeout=5)

    def work(n: int) -> int:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        if n < 3:
            gate.wait()
        with lock:
            running[0] -= 1
        return n

    fan_out(list(range(9)), work, pool_size=3, deadline=10)
    assert peak[0] == 3


def test_each_answer_is_handed_over_before_the_slower_ones_are_in():
    """The step reads (and journals) the first pods' answers while later pods are still running."""
    release = threading.Event()
    seen_while_waiting = []

    def work(n: int) -> int:
        if n == 2:
            assert release.wait(5), "the slow target was never released"
        return n

    with fan_out_in_order([0, 1, 2], work, pool_size=3, deadline=10) as outcomes:
        for outcome in outcomes:
            seen_while_waiting.append((outcome.result, release.is_set()))
            if outcome.result == 1:
                release.set()  # only now may the slow one finish: 0 and 1 came before it
    assert seen_while_waiting == [(0, False), (1, False), (2, True)]


def test_leaving_early_stops_what_has_not_started():
    gate, started, lock = threading.Event(), [], threading.Lock()

    def work(n: int) -> int:
        with lock:
            started.append(n)
        if n:
            gate.wait(5)
        return n

    with fan_out_in_order(list(range(6)), work, pool_size=2, deadline=10) as outcomes:
        assert next(iter(outcomes)).result == 0
    # One worker is held at the gate with 1 (and the other with 2, if it took it after 0), so 3, 4
    # and 5 were still queued when the block was left: they are cancelled, and never start.
    gate.set()
    for worker in [t for t in threading.enumerate() if t.name.startswith("runbook-fanout")]:
        worker.join(5)  # the pool's threads end once nothing is left to them
    with lock:
        assert {0, 1} <= set(started) <= {0, 1, 2}  # 2 only if a worker took it before the block was left


def test_a_deadline_past_still_hands_over_what_finished():
    never = threading.Event()

    def work(n: int) -> int:
        if n == 0:
            never.wait(5)
        return n

    with fan_out_in_order([0, 1], work, pool_size=2, deadline=0.2, describe=lambda n: f"pod {n}") as outcomes:
        got = list(outcomes)
    never.set()
    assert got[0].result is None and "pod 0 did not answer within the step's deadline" in str(got[0].error)
    assert got[1].result == 1
