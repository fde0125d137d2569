"""`list` and `validate` answer from a cache keyed by what they read: the same answer as loading
afresh, a miss on any edit, never a cache of files still being written, and only ever a speed-up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from runbook.cli import main
from runbook.loading import listing_cache

TINY = """\
name: tiny
title: {title}
severity: P3
match: {{alerts: [TinyAlert]}}
steps:
  - id: note
    uses: flow.note
    with: {{message: hi}}
"""

BROKEN = """\
name: broken
title: broken
steps:
  - id: scale
    uses: k8s.scael
    with: {target: statefulset/vllm-server}
"""


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNBOOK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    monkeypatch.delenv("RUNBOOK_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    # runbook's own files may be seconds old in a fresh checkout: judge only the test's files as racy
    monkeypatch.setattr(listing_cache, "_source_files", lambda: [])
    return tmp_path / "state"


def write(path: Path, text: str, *, age: float = 60) -> Path:
    path.write_text(text)
    past = time.time() - age
    os.utime(path, (past, past))
    return path


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def cached_files(state: Path) -> list[Path]:
    folder = state / "cache" / "listing"
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def test_a_hit_answers_as_loading_afresh_would(state, tmp_path):
    folder = tmp_path / "books"
    folder.mkdir()
    write(folder / "tiny.yaml", TINY.format(title="a tiny one"))
    write(folder / "broken.yaml", BROKEN)
    fresh = [invoke(command, *fmt, str(folder)) for command in ("list", "validate") for fmt in ([], ["-o", "json"])]
    assert len(cached_files(state)) == 1
    again = [invoke(command, *fmt, str(folder)) for command in ("list", "validate") for fmt in ([], ["-o", "json"])]
    assert [(r.exit_code, r.stdout, r.stderr) for r in again] == [(r.exit_code, r.stdout, r.stderr) for r in fresh]
    assert fresh[0].exit_code == 3 and "tiny" in fresh[0].stdout and "broken.yaml" in fresh[0].stderr
    assert "k8s.scael" in fresh[2].stderr
    assert any(p["code"] for p in json.loads(fresh[3].stdout))


def test_a_hit_imports_no_playbook_machinery(state, tmp_path):
    """The point of the cache: `list` from it loads neither pydantic, YAML nor Jinja2."""
    folder = tmp_path / "books"
    folder.mkdir()
    write(folder / "tiny.yaml", TINY.format(title="a tiny one"))
    probe = ("import sys\n"
             "from runbook.loading import listing_cache\n"
             "listing_cache._source_files = lambda: []\n"
             "from runbook.cli import main\n"
             "try:\n"
             f"    main(['list', {str(folder)!r}])\n"
             "except SystemExit:\n"
             "    pass\n"
             "print(sorted(m for m in ('pydantic', 'yaml', 'jinja2') if m in sys.modules))\n")
    env = {**os.environ, "RUNBOOK_STATE_DIR": str(state), "XDG_CONFIG_HOME": str(tmp_path / "no-config")}
    env.pop("RUNBOOK_CONFIG", None)

    def run() -> list[str]:
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60,
                              cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "tiny" in done.stdout
        return done.stdout.strip().splitlines()[-1]

    assert run() != "[]"  # the first time loads the playbook
    assert run() == "[]"


def test_any_edit_misses(state, tmp_path):
    book = write(tmp_path / "tiny.yaml", TINY.format(title="first title"))
    assert "first title" in invoke("list", str(book)).stdout
    write(book, TINY.format(title="other title"), age=30)  # same size, another time
    assert "other title" in invoke("list", str(book)).stdout
    assert len(cached_files(state)) == 2


def test_a_config_file_is_part_of_the_key(state, tmp_path, monkeypatch):
    book = write(tmp_path / "tiny.yaml", TINY.format(title="a tiny one"))
    invoke("list", str(book))
    config = write(tmp_path / "runbook.yaml", "prometheus: {url: 'http://127.0.0.1:9090'}\n")
    monkeypatch.setenv("RUNBOOK_CONFIG", str(config))
    invoke("list", str(book))
    assert len(cached_files(state)) == 2


def test_a_file_written_just_now_is_not_cached(state, tmp_path):
    book = write(tmp_path / "tiny.yaml", TINY.format(title="a tiny one"), age=0)
    assert invoke("list", str(book)).exit_code == 0
    assert cached_files(state) == []


def test_a_damaged_cache_is_a_miss(state, tmp_path):
    book = write(tmp_path / "tiny.yaml", TINY.format(title="a tiny one"))
    first = invoke("list", str(book))
    (entry,) = cached_files(state)
    for damage in (b"{not json", json.dumps({"format": 1, "key": "other", "summaries": []}).encode(),
                   json.dumps({"format": 1, "key": entry.stem, "summaries": [{"no": "file"}]}).encode()):
        entry.write_bytes(damage)
        assert invoke("list", str(book)).stdout == first.stdout
        entry.write_bytes(damage)  # the miss wrote a good entry back; damage it again for the next form


def test_an_unsafe_state_directory_gets_no_cache_and_the_answer_stands(state, tmp_path):
    state.mkdir(mode=0o700)
    state.chmod(0o777)
    book = write(tmp_path / "tiny.yaml", TINY.format(title="a tiny one"))
    done = invoke("list", str(book))
    assert done.exit_code == 0 and "tiny" in done.stdout
    assert not (state / "cache").exists()


def test_the_source_files_are_part_of_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    monkeypatch.delenv("RUNBOOK_CONFIG", raising=False)
    source = write(tmp_path / "module.py", "x = 1\n")
    monkeypatch.setattr(listing_cache, "_source_files", lambda: [source])
    book = write(tmp_path / "tiny.yaml", TINY.format(title="a tiny one"))
    before = listing_cache.Key([("tiny.yaml", book)])
    write(source, "x = 2\n", age=30)
    after = listing_cache.Key([("tiny.yaml", book)])
    assert before.digest != after.digest and before.settled and after.settled
