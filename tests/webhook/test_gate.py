"""Deliveries before runs (issue 33, item 2): a run worker waits, a bounded moment, while a delivery is
being answered, so an acknowledgement does not queue behind a run's Python work; the runs still all run."""

from __future__ import annotations

import threading

from runbook.webhook.gate import IntakeGate
from runbook.webhook.worker import Worker


def test_an_idle_intake_lets_a_run_start_at_once():
    assert IntakeGate(most=5.0).wait_clear() is True


def test_a_run_start_waits_for_the_delivery_being_answered():
    gate = IntakeGate(most=5.0)
    answering, waited = threading.Event(), []
    release = threading.Event()

    def delivery():
        with gate.answering():
            answering.set()
            release.wait(5)

    sender = threading.Thread(target=delivery)
    sender.start()
    answering.wait(5)
    runner = threading.Thread(target=lambda: waited.append(gate.wait_clear()))
    runner.start()
    runner.join(0.05)
    assert runner.is_alive()  # held while the delivery is answered
    release.set()
    runner.join(5)
    sender.join(5)
    assert waited == [True]


def test_a_stream_of_deliveries_slows_the_runs_never_stops_them():
    gate = IntakeGate(most=0.01)
    with gate.answering():  # a delivery that never ends
        assert gate.wait_clear() is False  # the bounded wait ran out: the run starts anyway


def test_the_worker_passes_the_gate_before_each_run():
    order: list[str] = []
    worker = Worker(lambda incident: order.append(f"run {incident}"), size=10, threads=1,
                    before_run=lambda: order.append("gate"))
    worker.start()
    try:
        for incident in ("a", "b"):
            worker.offer(incident)
        assert worker.wait_idle(5)
    finally:
        worker.stop(5)
    assert order == ["gate", "run a", "gate", "run b"]
