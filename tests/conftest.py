"""Shared fixtures: a fake clock, fakes of the backends, an engine builder, playbooks from text."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runbook.clock import FakeClock, utc
from runbook.registry import default_registry

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference"
REQUIRE_INTEGRATION = os.environ.get("RUNBOOK_REQUIRE_INTEGRATION") == "1"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(utc(2026, 3, 14, 3, 12, 7))


@pytest.fixture
def registry():
    return default_registry()


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path, monkeypatch):
    """Every test gets its own state directory and no kill switch from the environment."""
    monkeypatch.setenv("RUNBOOK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("RUNBOOK_KILL_SWITCH", raising=False)
    monkeypatch.delenv("RUNBOOK_DRY_RUN", raising=False)


def event_types(events) -> list[str]:
    return [e.type for e in events]


def assert_sequence(events, expected: list[str], *, forbidden: tuple[str, ...] = ()) -> None:
    """`expected` event types occur in this order (others may come between); none of `forbidden`."""
    types = event_types(events)
    position = 0
    for wanted in expected:
        try:
            position = types.index(wanted, position) + 1
        except ValueError:
            raise AssertionError(f"{wanted!r} not found in order after position {position}: {types}") from None
    present = [t for t in types if t in forbidden]
    assert not present, f"forbidden events {present} in {types}"
