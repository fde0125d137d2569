"""Benchmark: CLI start-up medians against `python -c pass` as the floor.

Usage: python bench/startup.py [RUNS]   (default 15 runs per command, after one warm-up run)

Each command runs in a fresh interpreter exactly as the `runbook` console script does
(`from runbook.cli import main; sys.exit(main())`), without a pyenv/venv shim in front, so the
figure is runbook's own start-up. Bytecode is cached (in a temporary PYTHONPYCACHEPREFIX), as it
is for an installed package, even where the environment sets PYTHONDONTWRITEBYTECODE. `list` and
`validate` read the bundled playbooks: answered from the listing cache under the state directory
(a temporary one) once warm, as an operator's second and later runs are; the first run after any
edit (a cold cache, a fresh state directory each time) is printed as a figure beside them. Prints
the median wall time, the time above the floor, and each target with met / NOT met; exit 1 if a
target is not met. Targets: `--help` ≤ 0.15 s; `list` and `validate` ≤ 8× the floor.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

ENTRY = "import sys; from runbook.cli import main; sys.exit(main())"

# (label, argv after `runbook`, target, cold): the target is a median in seconds, or ("×", N) for N
# times the floor, or None (the floor itself, or a figure); cold: a fresh state directory every run.
COMMANDS = [
    ("python -c pass", None, None, False),
    ("runbook --help", ["--help"], 0.15, False),
    ("runbook list", ["list"], ("×", 8), False),
    ("runbook validate", ["validate"], ("×", 8), False),
    ("runbook list, cold", ["list"], None, True),
    ("runbook validate, cold", ["validate"], None, True),
]


def _argv(args: list[str] | None) -> list[str]:
    if args is None:
        return [sys.executable, "-c", "pass"]
    return [sys.executable, "-c", ENTRY, *args]


def median_seconds(args: list[str] | None, runs: int, cwd: str, pycache: str, *, cold: bool = False) -> float:
    argv = _argv(args)
    # Bytecode is cached as an installed package has it (pip compiles at install time), even where
    # the environment sets PYTHONDONTWRITEBYTECODE; the cache goes to a temporary folder, not the tree.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(COLUMNS="120", PYTHONPYCACHEPREFIX=pycache, RUNBOOK_STATE_DIR=os.path.join(cwd, ".state"))
    for _ in range(2):  # warm-up: writes the bytecode cache (and the listing cache), warms the page cache
        subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=False)
    times = []
    for run in range(runs):
        if cold:
            env["RUNBOOK_STATE_DIR"] = os.path.join(cwd, f".state-cold-{run}")
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
        for label, args, target, cold in COMMANDS:
            median = median_seconds(args, runs, cwd, pycache, cold=cold)
            if floor is None:
                floor = median
                print(f"startup {label:22} median {median:.3f}s (the floor)")
                continue
            over = f"+{median - floor:.3f}s over the floor, {median / floor:.1f}×"
            if target is None:
                print(f"startup {label:22} median {median:.3f}s ({over}; a figure)")
                continue
            limit = target[1] * floor if isinstance(target, tuple) else target
            shown = f"≤ {target[1]}× the floor = {limit:.3f}s" if isinstance(target, tuple) else f"≤ {target:.2f}s"
            met = median <= limit
            failed |= not met
            print(f"startup {label:22} median {median:.3f}s ({over}; target {shown}) {'met' if met else 'NOT met'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
