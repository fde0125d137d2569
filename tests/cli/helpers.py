"""Running the `runbook` command in-process with stdout and stderr apart, for exact-output tests."""

from __future__ import annotations

from click.testing import CliRunner, Result

from runbook.cli import main


def runbook(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
    """`runbook ARGS…`; click's runner keeps stdout and stderr apart (result.stdout, result.stderr)."""
    return CliRunner().invoke(main, list(args), input=input, env=env, catch_exceptions=False)
