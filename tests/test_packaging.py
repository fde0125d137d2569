"""A built wheel carries the bundled playbooks, scenarios and templates: commands work outside the tree.

The playbooks and templates live at the top of the repository (`playbooks/`, `templates/`) and the
build maps them into the package; the wheel, an editable install and a checkout find the same files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
import zipfile

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
    return {"cwd": str(work), "wheel": str(wheel), **{"env": env}}  # type: ignore[dict-item]


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
    assert validate.stdout.count("ok  <bundled>/") == len(list((ROOT / "playbooks").glob("*.yaml")))
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


def test_the_top_level_playbooks_and_templates_are_in_the_wheel(installed):
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    for folder, pattern in (("playbooks", "*.yaml"), ("templates", "*.j2")):
        files = sorted(p.name for p in (ROOT / folder).glob(pattern))
        assert files, f"no {pattern} at the top-level {folder}/"
        assert {f"runbook/{folder}/{name}" for name in files} <= names
    assert not (ROOT / "runbook" / "playbooks").exists() and not (ROOT / "runbook" / "templates").exists()


def test_the_wheel_finds_its_own_copies_not_the_checkouts(installed):
    out = subprocess.run([sys.executable, "-c", "from runbook.files import bundled; print(bundled.folder('playbooks')); "
                          "print(bundled.folder('templates'))"], cwd=installed["cwd"], env=installed["env"],
                         capture_output=True, text=True, check=True)
    site = str(Path(installed["cwd"]) / "site")
    assert all(line.startswith(site) for line in out.stdout.splitlines()), out.stdout


def test_the_checkout_finds_the_top_level_folders():
    out = subprocess.run([sys.executable, "-c", "from runbook.files import bundled; print(bundled.folder('playbooks')); "
                          "print(bundled.folder('templates'))"], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [str(ROOT / "playbooks"), str(ROOT / "templates")]


def test_rca_renders_from_the_wheel_with_its_templates(installed):
    drill = json.loads(runbook(installed, "drill", "waiting-queue", "--yes", "--output", "json").stdout)
    out = runbook(installed, "rca", drill["incident_id"], "--format", "html", "--out", "-")
    assert out.returncode == 0, out.stderr
    assert "<html" in out.stdout.lower() and drill["incident_id"] in out.stdout


def test_the_package_list_names_every_package_of_the_tree():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.relative_to(ROOT).parts) for p in (ROOT / "runbook").rglob("*")
             if p.is_dir() and p.name != "__pycache__" and any(c.suffix in (".py", ".yaml") for c in p.iterdir())}
    assert found | {"runbook", "runbook.playbooks", "runbook.templates"} == listed
