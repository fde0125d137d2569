"""A built wheel carries the bundled playbooks, scenarios and templates: commands work outside the tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, str]:
    work = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(work / "dist"), str(ROOT)], check=True, capture_output=True)
    [wheel] = (work / "dist").glob("runbook-*.whl")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(work / "site"),
                    str(wheel)], check=True, capture_output=True)
    env = {**os.environ, "PYTHONPATH": str(work / "site"), "RUNBOOK_STATE_DIR": str(work / "state")}
    return {"cwd": str(work), **{"env": env}}  # type: ignore[dict-item]


def runbook(installed, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runbook", *args], cwd=installed["cwd"], env=installed["env"],
                          capture_output=True, text=True, timeout=120)


def test_the_wheel_is_what_runs(installed):
    out = subprocess.run([sys.executable, "-c", "import runbook; print(runbook.__file__)"], cwd=installed["cwd"],
                         env=installed["env"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith(str(Path(installed["cwd"]) / "site"))


def test_validate_list_and_actions_work_outside_the_source_tree(installed):
    validate = runbook(installed, "validate")
    assert validate.returncode == 0, validate.stderr
    assert validate.stdout.count("ok  <bundled>/") == 4
    listed = json.loads(runbook(installed, "list", "--output", "json").stdout)
    assert {p["name"] for p in listed} >= {"oom-surge", "waiting-queue", "zombie-process", "lingering-cuda-context"}
    actions = json.loads(runbook(installed, "actions", "--output", "json").stdout)
    assert len(actions) >= 15


def test_a_drill_runs_from_the_wheel(installed):
    out = runbook(installed, "drill", "oom-surge", "--yes", "--output", "json")
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    assert document["outcome"] == "resolved"
    assert Path(document["rca"]).is_file()


def test_signal_profiles_ship_in_the_wheel(installed):
    out = runbook(installed, "signals", "--output", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["profile"] == "vllm"
