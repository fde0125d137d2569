"""Findings 3 and 4: a Unix signal is no metric, and every run ends with a journaled outcome.

Whatever an action or a backend raises, before or after a change, the journal ends with
`run.finished`; a change that may have landed is recorded, counted and rolled back.
"""

from __future__ import annotations

import pytest

from runbook.actions import fields
from runbook.actions.base import ActionResult
from runbook.actions.flow import VerifyParams
from runbook.actions.k8s_kill import KillProcessParams
from runbook.actions.node import KillPidsParams
from runbook.backends.prometheus.client import PrometheusMetrics
from runbook.errors import BackendError
from runbook.record.journal import History
from runbook.loading.validation import load_playbook_text
from runbook.model import events as ev
from runbook.model.registry import ActionParams, Kind, Registry, action
from runbook.actions import load_builtin
from runbook.sim.fakes import FakeMetrics
from tests.conftest import assert_sequence
from tests.engine.helpers import cluster, engine, playbook
from tests.safety.books import SET_ARG

def test_f3_only_declared_metric_signals_are_charted():
    assert VerifyParams.signal_fields() == ("signal",)
    assert KillProcessParams.signal_fields() == ()
    assert KillPidsParams.signal_fields() == ()


def test_f3_a_unix_signal_param_is_never_queried_as_a_metric(clock):
    registry = Registry()
    for spec in load_builtin().specs():
        registry.add(spec)

    class SignalParams(ActionParams):
        signal: fields.UnixSignal = "KILL"

    @action("test.signal", kind=Kind.DIAGNOSTIC, params=SignalParams, registry=registry)
    def send(ctx, p):
        """Pretend to look at a Unix signal."""
        return ActionResult.ok(f"would send {p.signal}")

    loaded = load_playbook_text("name: t\ntitle: t\nsteps:\n  - id: s\n    uses: test.signal\n    with: {signal: KILL}\n",
                                file="t.yaml", registry=registry)
    assert loaded.playbook is not None, [p.format() for p in loaded.problems]
    metrics = FakeMetrics({})
    e = engine(clock, metrics=metrics)
    e.registry = registry
    result = e.run(loaded.playbook)
    assert result.outcome == "resolved"
    assert "KILL" not in {signal for signal, _ in metrics.queries}


class RaisingAfterStore:
    """A cluster whose argv patch is stored and then the answer cannot be read (a webhook rewrote it)."""

    def __init__(self, inner, error: Exception):
        self.inner, self.error = inner, error

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def set_container_argv(self, *args, dry_run=False, **kwargs):
        done = self.inner.set_container_argv(*args, dry_run=dry_run, **kwargs)
        if not dry_run and kwargs.get("resource_version"):
            raise self.error
        return done


@pytest.mark.parametrize("error", [ValueError("unexpected answer"), BackendError("the answer was cut off")])
def test_f4_an_exception_after_the_apply_is_recorded_counted_and_rolled_back(clock, tmp_path, error):
    c = cluster()
    state = tmp_path / "state"
    e = engine(clock, cluster_=RaisingAfterStore(c, error), state=state,
               metrics=FakeMetrics({"oom_failures_per_min": 4}))
    result = e.run(playbook(SET_ARG, "{confirm: false}"))
    events = e.journal.events()
    assert_sequence(events, [ev.ACTION_PLANNED, ev.GUARD_PASSED, ev.ACTION_UNKNOWN, ev.ROLLBACK_APPLIED,
                             ev.STEP_FINISHED, ev.RUN_FINISHED], forbidden=(ev.ACTION_APPLIED,))
    assert result.outcome == "failed"
    # Rolled back to what the plan saw, and counted by cooldowns and budgets all the same.
    assert "--max-model-len=7372" in c.workloads[("llm", "statefulset", "vllm-server")].containers[0].args
    assert History(state).applications("llm/statefulset/vllm-server", since=events[0].at)


def test_f4_an_unexpected_error_in_a_diagnostic_ends_the_run_journaled(clock):
    class Broken(FakeMetrics):
        def query(self, *args, **kwargs):
            raise KeyError("value")

    e = engine(clock, metrics=Broken({}))
    result = e.run(playbook())
    events = e.journal.events()
    assert result.outcome == "failed" and "KeyError" in result.reason
    assert events[-1].type == ev.RUN_FINISHED


@pytest.mark.parametrize("answer", [[{"metric": {}, "value": [1, "not-a-number"]}], [{"metric": {}}], "oops",
                                    [{"metric": {}, "values": [["x", "1"]]}]])
def test_f4_a_malformed_prometheus_answer_is_a_backend_error_naming_the_source(answer):
    import datetime as dt
    import types

    class Client:
        def custom_query(self, **kwargs):
            return answer

        def custom_query_range(self, **kwargs):
            return answer

    metrics = PrometheusMetrics.__new__(PrometheusMetrics)
    metrics.url, metrics._client = "http://127.0.0.1:9", Client()
    metrics.section = types.SimpleNamespace(timeout=5.0)
    at = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    with pytest.raises(BackendError, match="127.0.0.1:9"):
        if isinstance(answer, list) and answer and "values" in answer[0]:
            metrics.query_range_promql("up", start=at, end=at, step_seconds=1)
        else:
            metrics.query_promql("up", at=at)
