"""Shared fixtures: a fake clock, fakes of the backends, an engine builder, playbooks from text.
Also where a test finds its data: tests/data (written here) and ../shared/reference (real captures)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

from runbook.clock import FakeClock, utc
from runbook.actions import load_builtin

# Real third-party captures live beside the clone, never inside it; tests over them are extra checks.
REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference"
# What the tests need on a fresh machine, written by the project in the tools' documented formats.
DATA = Path(__file__).resolve().parent / "data"
# CI (.ci/run) sets both: there a missing tool or reference folder is a failure, never a skip.
REQUIRE_INTEGRATION = os.environ.get("RUNBOOK_REQUIRE_INTEGRATION") == "1"
REQUIRE_REFERENCE = os.environ.get("RUNBOOK_REQUIRE_REFERENCE") == "1"


def missing_integration(reason: str) -> NoReturn:
    """This machine lacks a tool a test needs (a binary, ssh-agent, openssl): skip, or fail in CI."""
    if REQUIRE_INTEGRATION:
        pytest.fail(f"RUNBOOK_REQUIRE_INTEGRATION=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def reference_path(relative: str) -> Path:
    """A real capture under ../shared/reference; absent, the test skips (fails under RUNBOOK_REQUIRE_REFERENCE=1)."""
    path = REFERENCE / relative
    if path.is_file():
        return path
    reason = f"reference file {relative} not available (the real captures belong beside the clone, in {REFERENCE})"
    if REQUIRE_REFERENCE:
        pytest.fail(f"RUNBOOK_REQUIRE_REFERENCE=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def reference_text(relative: str) -> str:
    return reference_path(relative).read_text(encoding="utf-8")


def data_path(relative: str) -> Path:
    """A fixture file the project wrote under tests/data; one that is missing is a broken checkout."""
    path = DATA / relative
    assert path.is_file(), f"tests/data/{relative} is missing: it is part of the repository, restore it with git"
    return path


def data_text(relative: str) -> str:
    return data_path(relative).read_text(encoding="utf-8")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(utc(2026, 3, 14, 3, 12, 7))


@pytest.fixture
def registry():
    return load_builtin()


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
