"""The suite stands alone: a clean clone with nothing beside it passes, and CI runs every test.

Real third-party captures in ../shared/reference are read only through tests.conftest, which
skips without them and fails under RUNBOOK_REQUIRE_REFERENCE=1; a missing tool fails under
RUNBOOK_REQUIRE_INTEGRATION=1.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tests.conftest as root
from runbook.webhook import alertmanager, pagerduty

TESTS = Path(__file__).resolve().parent
CI = TESTS.parent / ".ci" / "run"
# A path to the folder beside the clone, built anywhere but in tests/conftest.py.
BUILDS_REFERENCE_PATH = re.compile(r"""["']shared["']\s*/\s*["']reference["']|["']\.\./shared""")


def test_the_webhook_payloads_need_nothing_beside_the_clone(monkeypatch, tmp_path):
    from tests.webhook import helpers

    absent = tmp_path / "no-shared" / "reference"
    monkeypatch.setattr(root, "REFERENCE", absent)
    (event,) = pagerduty.parse(helpers.pd_event(), webhook_id="wh-1").inbound
    assert event.effect == "open" and event.alert.name == "OOM on vllm-server"
    firing = alertmanager.parse(helpers.am_group("firing")).inbound[0]
    resolved = alertmanager.parse(helpers.am_group("resolved")).inbound[0]
    assert (firing.effect, resolved.effect) == ("open", "close")


def test_a_missing_reference_file_skips_here_and_fails_in_ci(monkeypatch, tmp_path):
    monkeypatch.setattr(root, "REFERENCE", tmp_path)
    monkeypatch.setattr(root, "REQUIRE_REFERENCE", False)
    with pytest.raises(pytest.skip.Exception, match="nvidia-smi/none.txt"):
        root.reference_path("nvidia-smi/none.txt")
    monkeypatch.setattr(root, "REQUIRE_REFERENCE", True)
    with pytest.raises(pytest.fail.Exception, match="RUNBOOK_REQUIRE_REFERENCE=1"):
        root.reference_text("nvidia-smi/none.txt")
    (tmp_path / "here.txt").write_text("found\n")
    assert root.reference_text("here.txt") == "found\n"


def test_a_missing_tool_skips_here_and_fails_in_ci(monkeypatch):
    monkeypatch.setattr(root, "REQUIRE_INTEGRATION", False)
    with pytest.raises(pytest.skip.Exception, match="openssl"):
        root.missing_integration("`openssl` is not installed")
    monkeypatch.setattr(root, "REQUIRE_INTEGRATION", True)
    with pytest.raises(pytest.fail.Exception, match="RUNBOOK_REQUIRE_INTEGRATION=1 but `openssl`"):
        root.missing_integration("`openssl` is not installed")


def test_only_the_root_conftest_knows_where_the_reference_folder_is():
    offenders = [str(p.relative_to(TESTS)) for p in sorted(TESTS.rglob("*.py"))
                 if p.name != "conftest.py" or p.parent != TESTS
                 if p != Path(__file__).resolve() and BUILDS_REFERENCE_PATH.search(p.read_text(encoding="utf-8"))]
    assert offenders == [], f"read ../shared/reference through tests.conftest.reference_path: {offenders}"


def test_ci_requires_the_reference_data_and_every_tool():
    script = CI.read_text(encoding="utf-8")
    assert re.search(r"^export RUNBOOK_REQUIRE_REFERENCE=1$", script, re.M), script
    assert re.search(r"^export RUNBOOK_REQUIRE_INTEGRATION=1$", script, re.M), script
    for tool, package in (("openssl", "openssl"), ("ssh-agent", "openssh-client"), ("prometheus", "prometheus")):
        assert f"command -v {tool} >/dev/null 2>&1 || need+=({package})" in script, (tool, package)


def test_the_project_data_are_written_here_not_copied_from_the_reference():
    captured = {p.read_bytes() for p in root.reference_path("SOURCES.md").parent.rglob("*") if p.is_file()}
    ours = [p for p in TESTS.rglob("*") if p.is_file() and "data" in p.relative_to(TESTS).parts]
    assert ours, "no fixture files under tests/**/data"
    copied = [str(p.relative_to(TESTS)) for p in ours if p.read_bytes() in captured]
    assert copied == [], f"byte-for-byte copies of ../shared/reference files: {copied}"
