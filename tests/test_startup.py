"""The CLI's start-up path stays light: `runbook --help` imports no heavy library."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ["kubernetes", "paramiko", "matplotlib", "starlette", "uvicorn", "prometheus_api_client", "rich",
         "pydantic", "jinja2", "yaml"]


def test_help_imports_no_heavy_library():
    code = ("import sys; from runbook.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def test_python_dash_m_runbook_works():
    out = subprocess.run([sys.executable, "-m", "runbook", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and "runbook" in out.stdout


def test_the_engine_and_actions_import_no_edge_library():
    """DESIGN.md's split: orchestration is pure; only the CLI, the webhook and the backends touch I/O libraries."""
    edge = ["click", "rich", "kubernetes", "paramiko", "httpx", "requests", "starlette", "uvicorn",
            "prometheus_api_client", "matplotlib"]
    code = ("import sys, runbook.engine.runner, runbook.actions, runbook.record.journal, runbook.loading.validation\n"
            f"print(sorted(m for m in {edge!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
