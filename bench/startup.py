"""Benchmark: CLI start-up medians against `python -c pass` as the floor.

Usage: python bench/startup.py [RUNS]   (default 15 runs per command, after one warm-up run)

Each command runs in a fresh interpreter exactly as the `runbook` console script does
(`from runbook.cli import main; sys.exit(main())`), without a pyenv/venv shim in front, so the
figure is runbook's own start-up. Bytecode is cached (in a temporary PYTHONPYCACHEPREFIX), as it
is for an installed package, even where the environment sets PYTHONDONTWRITEBYTECODE. `list` and `validate` read the bundled playbooks. Prints the
median wall time, the time above the floor, and each target with met / NOT met; exit 1 if a
target is not met.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

ENTRY = "import sys; from runbook.cli import main; sys.exit(main())"

# (label, argv after `runbook`, target median in seconds or None for the floor)
COMMANDS = [
    ("python -c pass", None, None),
    ("runbook --help", ["--help"], 0.15),
    ("runbook list", ["list"], 0.30),
    ("runbook validate", ["validate"], 0.30),
]


def _argv(args: list[str] | None) -> list[str]:
    if args is None:
        return [sys.executable, "-c", "pass"]
    return [sys.executable, "-c", ENTRY, *args]


def median_seconds(args: list[str] | None, runs: int, cwd: str, pycache: str) -> float:
    argv = _argv(args)
    # Bytecode is cached as an installed package has it (pip compiles at install time), even where
    # the environment sets PYTHONDONTWRITEBYTECODE; the cache goes to a temporary folder, not the tree.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(COLUMNS="120", PYTHONPYCACHEPREFIX=pycache)
    for _ in range(2):  # warm-up: writes the bytecode cache, warms the page cache
        subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=False)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=False)
        times.append(time.perf_counter() - started)
        if out.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {out.returncode}: {out.stderr.decode()[-500:]}")
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    runs = int(argv[0]) if argv else 15
    failed = False
    # An empty working directory: `validate`/`list` read only the bundled playbooks (no ./playbooks).
    with tempfile.TemporaryDirectory() as cwd, tempfile.TemporaryDirectory() as pycache:
        floor = None
        for label, args, target in COMMANDS:
            median = median_seconds(args, runs, cwd, pycache)
            if floor is None:
                floor = median
                print(f"startup {label:18} median {median:.3f}s (the floor)")
                continue
            met = median <= target
            failed |= not met
            print(f"startup {label:18} median {median:.3f}s (+{median - floor:.3f}s over the floor; "
                  f"target ≤ {target:.2f}s) {'met' if met else 'NOT met'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
