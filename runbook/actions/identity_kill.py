"""Signalling processes by identity: the plan reads each one's start time, the apply signals it only if unchanged.

Shared by `k8s.kill_process` (in a container) and `node.kill_pids` (on a node); the script is `parsers.kill_by_identity`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from runbook.backends.base import CommandResult
from runbook.errors import CommandFailed
from runbook.parsers import kill_by_identity, procs
from runbook.parsers.errors import ParseError
from runbook.parsers.kill_by_identity import Target, Verdict


def read_stats(text: str, where: str) -> dict[int, procs.ProcStat]:
    """PID → its /proc/<pid>/stat, from `cat /proc/<pid>/stat…`; a malformed answer fails naming where it came from."""
    try:
        return {s.pid: s for s in procs.parse_proc_stats(text)}
    except ParseError as exc:
        raise CommandFailed(f"{where}: {exc}") from exc


def signal(run: Callable[[list[str]], CommandResult], sig: str, targets: Sequence[Target], where: str) -> list[Verdict]:
    """Run the check-then-signal script once for `targets`; one verdict per target, in order."""
    out = run(kill_by_identity.argv(sig, targets))
    if out.exit_code != 0:
        raise CommandFailed(f"the kill on {where} exited {out.exit_code}: {out.stderr.strip()[:300]}")
    try:
        verdicts = kill_by_identity.parse_report(out.stdout)
    except ParseError as exc:
        raise CommandFailed(f"{where}: {exc}") from exc
    if [v.pid for v in verdicts] != [t.pid for t in targets]:
        raise CommandFailed(f"the kill on {where} reported on PID {', '.join(str(v.pid) for v in verdicts) or 'none'}, "
                            f"not on the planned {', '.join(str(t.pid) for t in targets)}")
    failed = [v for v in verdicts if v.verdict == "failed"]
    if failed:
        done = [v.pid for v in verdicts if v.verdict == "signalled"]
        raise CommandFailed(f"the kill on {where} failed for "
                            + "; ".join(f"PID {v.pid}: {v.detail or 'no reason given'}" for v in failed)
                            + f" (signalled: {', '.join(map(str, done)) or 'none'})")
    return verdicts


def not_signalled(verdict: Verdict, target: Target) -> dict[str, Any]:
    """Why a planned process was left alone, for the outcome: it ended, or its PID is another process now."""
    if verdict.verdict == "gone":
        return {"pid": verdict.pid, "reason": "gone", "detail": "no such process any more"}
    if verdict.detail == "container":
        return {"pid": verdict.pid, "reason": "changed",
                "detail": f"no longer in container {target.container_id}"}
    now = verdict.detail.removeprefix("start ").strip()
    return {"pid": verdict.pid, "reason": "changed", "detail": f"start time {now or 'unreadable'}, "
                                                               f"planned {target.start_ticks}"}
