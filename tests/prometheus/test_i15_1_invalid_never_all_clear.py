"""Issue 15, item 1: triage never says "all clear" when it did not look. A playbook that cannot be
loaded was not evaluated: the result is not quiet (exit 3, an invalid playbook), and the first
line says so, before anything else.
"""

from __future__ import annotations

import json
import shutil

from click.testing import CliRunner

from runbook.cli import main
from runbook.loading import validation
from tests.prometheus.data import SCENARIOS

INVALID = "name: broken\ntitle: t\nsteps:\n  - id: s\n    uses: k8s.scael\n"


def triage(url: str, *args: str):
    return CliRunner().invoke(main, ["triage", "--prometheus-url", url, *args], catch_exceptions=False)


def test_only_an_invalid_playbook_is_not_all_clear(prometheus, tmp_path):
    (tmp_path / "broken.yaml").write_text(INVALID)
    result = triage(prometheus.url, str(tmp_path), "--at", SCENARIOS["oom-surge"].quiet_at.isoformat())
    assert result.exit_code == 3
    first = result.stdout.splitlines()[0]
    assert first.startswith("Not all clear: 1 playbook not evaluated")
    assert "broken.yaml" in first
    assert "Nothing fires" not in result.stdout and "All clear" not in result.stdout
    assert "no action named `k8s.scael`" in result.stdout  # the reason, with its place


def test_an_invalid_playbook_beside_quiet_ones_is_not_quiet(prometheus, tmp_path):
    shutil.copy(validation.bundled_dir() / "waiting-queue.yaml", tmp_path / "waiting-queue.yaml")
    (tmp_path / "broken.yaml").write_text(INVALID)
    result = triage(prometheus.url, str(tmp_path), "--output", "json",
                    "--at", SCENARIOS["oom-surge"].quiet_at.isoformat())
    doc = json.loads(result.stdout)
    assert result.exit_code == doc["exit_code"] == 3
    assert [q["playbook"] for q in doc["quiet"]] == ["waiting-queue"]
    assert [i["file"] for i in doc["invalid"]] == [str(tmp_path / "broken.yaml")]
    assert doc["headline"].startswith("Not all clear: 1 playbook not evaluated")


def test_firing_still_wins_and_the_first_line_names_both(prometheus, tmp_path):
    shutil.copy(validation.bundled_dir() / "oom-surge.yaml", tmp_path / "oom-surge.yaml")
    (tmp_path / "broken.yaml").write_text(INVALID)
    result = triage(prometheus.url, str(tmp_path), "--at", SCENARIOS["oom-surge"].at.isoformat())
    assert result.exit_code == 10
    first = result.stdout.splitlines()[0]
    assert first.startswith("Firing: oom-surge (P1)") and "1 playbook not evaluated" in first


def test_all_clear_says_so_first_and_counts_what_it_looked_at(prometheus):
    result = triage(prometheus.url, "--at", SCENARIOS["oom-surge"].quiet_at.isoformat())
    assert result.exit_code == 0, result.stdout
    # The canary and Docker Compose playbooks' worlds are not in this cluster: not applicable, not counted.
    assert result.stdout.splitlines()[0] == "All clear: nothing fires (7 playbooks evaluated, 3 not applicable here)"
