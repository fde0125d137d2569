"""The check-then-signal script the kill actions run on nodes and in containers, and its report.

One fixed text: the actions, the simulated world and the test servers all speak exactly it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from runbook.parsers.errors import ParseError, quote

# Positional parameters: $1 the signal, then (pid, start ticks, container id or "-") per process.
# Nothing is ever put into this text: a value is an argument, never shell code. For each process
# it reads the container (when named) and then the start time — field 22 of /proc/<pid>/stat,
# the last check before the signal — and signals only when both still are the plan's. A PID that
# came back as another process has another start time. `cat` and `kill` come from PATH (not the
# shell's builtin kill) so that what checks and what signals are always the same system's view.
SCRIPT = r"""set -f
sig=$1
shift
starttime() { [ "$#" -ge 20 ] || return 0; shift 19; now=$1; }
while [ "$#" -ge 3 ]; do
  pid=$1 start=$2 cid=$3
  shift 3
  case $pid in ''|*[!0-9]*) printf 'failed %s not a process id\n' "$pid"; continue ;; esac
  if [ "$cid" != - ]; then
    cg=$(cat "/proc/$pid/cgroup" 2>/dev/null) || { printf 'gone %s\n' "$pid"; continue; }
    case $cg in *"$cid"*) ;; *) printf 'changed %s container\n' "$pid"; continue ;; esac
  fi
  st=$(cat "/proc/$pid/stat" 2>/dev/null) || { printf 'gone %s\n' "$pid"; continue; }
  rest=${st##*) }
  now=
  starttime $rest
  if [ "$now" != "$start" ]; then printf 'changed %s start %s\n' "$pid" "$now"; continue; fi
  if err=$(env kill -s "$sig" "$pid" 2>&1); then
    printf 'signalled %s\n' "$pid"
  else
    printf 'failed %s %s\n' "$pid" "$(printf '%s' "$err" | tr '\n' ' ')"
  fi
done
"""

NAME = "runbook-kill"  # $0 of the script: what `ps` on the node shows while it runs

Outcome = Literal["signalled", "gone", "changed", "failed"]


@dataclass(frozen=True)
class Target:
    pid: int
    start_ticks: int
    container_id: str | None = None  # checked in /proc/<pid>/cgroup when given


@dataclass(frozen=True)
class Verdict:
    pid: int
    verdict: Outcome
    detail: str = ""  # changed: "container" or "start <ticks>"; failed: kill's message


def argv(signal: str, targets: Iterable[Target]) -> list[str]:
    """`sh -c SCRIPT runbook-kill SIGNAL pid start cid …`: every value a separate word."""
    words = ["sh", "-c", SCRIPT, NAME, signal]
    for t in targets:
        words += [str(int(t.pid)), str(int(t.start_ticks)), t.container_id or "-"]
    return words


_FORMAT = "runbook-kill report"
_LINE = re.compile(r"(signalled|gone|changed|failed) ([0-9]+)(?: (.*))?", re.ASCII)
_NOT_A_PID = re.compile(r"failed (.*) not a process id")


def parse_report(text: str) -> list[Verdict]:
    """One verdict per process, in the order given; a value that was no PID is refused by name."""
    verdicts = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _LINE.fullmatch(line.rstrip())
        if m is None:
            bad = _NOT_A_PID.fullmatch(line.rstrip())
            if bad is not None:
                raise ParseError(f"{quote(bad[1])} was refused as a process id", format=_FORMAT, line=lineno)
            raise ParseError(f"expected 'signalled|gone|changed|failed PID [detail]', found {quote(line)}",
                             format=_FORMAT, line=lineno)
        verdicts.append(Verdict(int(m[2]), m[1], (m[3] or "").strip()))  # type: ignore[arg-type]
    return verdicts
