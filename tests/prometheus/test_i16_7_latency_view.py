"""Issue 16, item 7: the SOP's latency view reads prefill time apart from queue time (time to first
token mixes them) and the GPU side from inter-token latency, where vLLM exports them; without them it
falls back to time to first token and decode time, as before.
"""

from __future__ import annotations

import datetime as dt

from runbook.backends.base import Sample
from runbook.triage.views import _Reader, latency_view

AT = dt.datetime(2026, 3, 14, 3, 12, tzinfo=dt.timezone.utc)


class RecordedMetrics:
    """A metrics backend that answers each signal with a value now and another a day before (a fake)."""

    def __init__(self, values: dict[str, tuple[float, float]]):
        self.values = values

    def query(self, signal, *, at, labels=None, by=()):
        if signal not in self.values:
            return []
        now, before = self.values[signal]
        return [Sample(labels={}, value=now if at == AT else before)]


def view(**values: tuple[float, float]) -> dict:
    return latency_view(_Reader(RecordedMetrics(values), AT, {}))  # type: ignore[arg-type]


def test_queue_time_up_alone_is_a_full_server_not_slow_prompts():
    got = view(prefill_latency_p99_seconds=(4.0, 1.0), queue_time_p99_seconds=(3.5, 0.2),
               prefill_time_p99_seconds=(0.5, 0.45), inter_token_latency_p99_seconds=(0.05, 0.05))
    assert got["verdict"].startswith("queue time up ×17.5 while prefill and decode are not")
    assert set(got["signals"]) >= {"queue_time_p99_seconds", "prefill_time_p99_seconds"}


def test_prefill_time_up_is_the_input_side():
    got = view(prefill_latency_p99_seconds=(4.0, 1.0), queue_time_p99_seconds=(0.2, 0.2),
               prefill_time_p99_seconds=(3.0, 0.5))
    assert got["verdict"] == "prefill time (queueing apart) up ×6.0: the input side (prompt building, RAG)"


def test_inter_token_latency_is_the_gpu_side():
    got = view(prefill_time_p99_seconds=(0.5, 0.5), inter_token_latency_p99_seconds=(0.2, 0.05),
               decode_latency_p99_seconds=(9.0, 8.0))
    assert got["verdict"] == "inter-token latency up ×4.0: the model or GPU side"


def test_without_the_finer_histograms_time_to_first_token_and_decode_time_are_read():
    got = view(prefill_latency_p99_seconds=(3.0, 1.0), decode_latency_p99_seconds=(2.0, 2.0))
    assert got["verdict"] == "prefill latency up ×3.0: the input side (prompt building, RAG), or queueing"
    assert set(got["signals"]) == {"prefill_latency_p99_seconds", "decode_latency_p99_seconds"}
