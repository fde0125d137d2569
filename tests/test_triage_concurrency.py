"""Triage asks its independent detect queries at once, after one probe that finds a dead backend alone."""

from __future__ import annotations

import threading

from runbook.clock import utc
from runbook.errors import BackendUnavailable
from runbook.loading import validation
from runbook.actions import load_builtin
from runbook.triage.evaluate import MAX_CONCURRENT_QUERIES, evaluate


def bundled():
    registry = load_builtin()
    results = [validation.load_playbook_file(f, registry) for f in validation.discover(validation.default_paths())]
    return [r.playbook for r in results if r.playbook is not None]


class Metrics:
    """Answers no data; notes how many queries were in flight at once (a barrier lets the first
    `expected` after the probe meet: the pool holds no more than that)."""

    def __init__(self, fail: bool = False, expected: int = 1):
        self.fail, self.lock, self.asked, self.in_flight, self.most = fail, threading.Lock(), [], 0, 0
        self.expected = expected
        self.barrier = threading.Barrier(expected, timeout=5)

    def query(self, signal, **kwargs):  # a detect's first question: its value now (the range only where it holds)
        with self.lock:
            self.asked.append(signal)
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            meets = 1 < len(self.asked) <= self.expected + 1  # not the probe, and within the pool
        try:
            if self.fail:
                raise BackendUnavailable("Prometheus is unreachable")
            if meets:
                self.barrier.wait()  # as many queries after the probe as the pool holds are in flight together
            return []
        finally:
            with self.lock:
                self.in_flight -= 1


def test_the_queries_after_the_first_run_concurrently():
    playbooks = bundled()
    together = min(MAX_CONCURRENT_QUERIES, len(playbooks) - 1)
    assert together > 1
    metrics = Metrics(expected=together)
    report = evaluate(playbooks, metrics, utc(2026, 3, 14, 3, 12, 7))
    assert len(metrics.asked) == len(playbooks) and metrics.most == together
    assert [f.playbook for f in report.findings] == sorted(p.name for p in playbooks)
    assert {f.state for f in report.findings} == {"unknown"} and report.unavailable is None


def test_an_unavailable_backend_is_asked_once():
    playbooks = bundled()
    metrics = Metrics(fail=True)
    report = evaluate(playbooks, metrics, utc(2026, 3, 14, 3, 12, 7))
    assert len(metrics.asked) == 1
    assert report.unavailable == "Prometheus is unreachable"
    assert all(f.state == "unknown" and f.reason == "Prometheus is unreachable" for f in report.findings)
