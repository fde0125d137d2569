"""Fan-out: targets run concurrently, in a bounded pool, and one dead target is reported as timed out."""

from __future__ import annotations

import threading

from runbook.actions.fanout import fan_out
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
