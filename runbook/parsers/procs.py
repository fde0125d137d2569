"""Parsers for process listings: `ps`, `fuser -v /dev/nvidia*`, `/proc/<pid>/stat` and `/cgroup`, container ids.

They answer "who holds the GPU, is it a zombie, which container is it in" from captured text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from runbook.parsers.errors import ParseError, quote

_NEWLINE = re.compile(r"\r\n|\r|\n")
# a pasted terminal session keeps its prompt lines; they are not output
_PROMPT = re.compile(r"[$#] ")
_INT = re.compile(r"[0-9]+", re.ASCII)


def _lines(text: str) -> list[tuple[int, str]]:
    """Non-blank lines that are not shell prompts, with their 1-based numbers."""
    return [(n, line.rstrip()) for n, line in enumerate(_NEWLINE.split(text), 1)
            if line.strip() and not _PROMPT.match(line)]


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int | None
    stat: str
    elapsed_seconds: int | None
    args: str

    @property
    def zombie(self) -> bool:
        return self.stat.startswith("Z")

    @property
    def uninterruptible(self) -> bool:
        return self.stat.startswith("D")

    @property
    def defunct(self) -> bool:
        return self.zombie or self.args.endswith("<defunct>")


_PS_FORMAT = "ps"
_PS_COMMAND = {"COMMAND", "CMD", "ARGS"}
_PS_NAMES = {"PID": "pid", "PPID": "ppid", "STAT": "stat", "S": "stat", "ELAPSED": "elapsed"}
_ETIME = re.compile(r"(?:(?:([0-9]+)-)?([0-9]+):)?([0-9]+):([0-9]+)", re.ASCII)
_ELAPSED = r"[0-9]+|(?:[0-9]+-)?(?:[0-9]+:)?[0-9]+:[0-9]+"
# headerless lines, as after `| grep`: `ps aux` first, its %CPU column tells it apart
_AUX_ROW = re.compile(r"\s*\S+\s+([0-9]+)\s+[0-9.]+\s+[0-9.]+\s+[0-9]+\s+[0-9]+\s+\S+\s+(\S+)\s+\S+\s+\S+(?:\s+(.*))?",
                      re.ASCII)
_EO_ROW = re.compile(rf"\s*([0-9]+)\s+([0-9]+|-)\s+(\S+)\s+({_ELAPSED})(?:\s+(.*))?", re.ASCII)


def _elapsed(raw: str | None, line: int) -> int | None:
    """Seconds from `etimes` (an integer) or `etime` ([[dd-]hh:]mm:ss)."""
    if raw is None or raw == "-":
        return None
    if _INT.fullmatch(raw):
        return int(raw)
    m = _ETIME.fullmatch(raw)
    if not m:
        raise ParseError(f"ELAPSED: expected seconds or [[dd-]hh:]mm:ss, found {quote(raw)}",
                         format=_PS_FORMAT, line=line)
    days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def _ps_header(line: str) -> list[str] | None:
    names = line.split()
    if "PID" in names and names[-1] in _PS_COMMAND:
        return [_PS_NAMES.get(n, n) for n in names[:-1]] + ["args"]
    return None


def _ps_row(fields: dict[str, str], line: int) -> Process:
    pid, ppid = fields.get("pid", ""), fields.get("ppid")
    if not _INT.fullmatch(pid):
        raise ParseError(f"PID: expected an integer, found {quote(pid)}", format=_PS_FORMAT, line=line)
    if ppid is not None and ppid != "-" and not _INT.fullmatch(ppid):
        raise ParseError(f"PPID: expected an integer, found {quote(ppid)}", format=_PS_FORMAT, line=line)
    return Process(pid=int(pid), ppid=int(ppid) if ppid and ppid != "-" else None,
                   stat=fields.get("stat", ""), elapsed_seconds=_elapsed(fields.get("elapsed"), line),
                   args=fields.get("args", ""))


def parse_ps(text: str) -> list[Process]:
    """`ps -eo pid,ppid,stat,etimes,args` or `ps aux[ww]`, with or without the header.

    Columns come from the header by name (COMMAND/CMD/ARGS must be last: it may hold spaces);
    without one, each line is read as `ps aux` or as the -eo form above. `ps aux` has no PPID
    or elapsed time: those are None.
    """
    header: list[str] | None = None
    processes = []
    for lineno, line in _lines(text):
        named = _ps_header(line)
        if named is not None:
            header = named
            continue
        if header is not None:
            values = line.split(None, len(header) - 1)
            if len(values) < len(header) - 1:
                raise ParseError(f"expected {len(header)} columns as in the header, found {len(values)}: "
                                 f"{quote(line)}", format=_PS_FORMAT, line=lineno)
            processes.append(_ps_row(dict(zip(header, values)), lineno))
        elif m := _AUX_ROW.fullmatch(line):
            processes.append(_ps_row({"pid": m[1], "stat": m[2], "args": m[3] or ""}, lineno))
        elif m := _EO_ROW.fullmatch(line):
            processes.append(_ps_row({"pid": m[1], "ppid": m[2], "stat": m[3], "elapsed": m[4],
                                      "args": m[5] or ""}, lineno))
        else:
            raise ParseError(f"expected a `ps` header, a `ps aux` row or a `pid ppid stat etimes args` row, "
                             f"found {quote(line)}", format=_PS_FORMAT, line=lineno)
    return processes


@dataclass(frozen=True)
class FuserEntry:
    path: str
    user: str
    pid: int
    access: str
    command: str


_FUSER_FORMAT = "fuser -v"
# stderr mixed into the capture: sudo's prompt, files fuser could not inspect
_FUSER_NOISE = ("[sudo]", "sudo:", "Cannot stat", "Specified filename", "No such file")
_FUSER_HEADER = re.compile(r"\s*USER\s+PID\s+ACCESS\s+COMMAND")
_FUSER_ROW = re.compile(r"(?:(?P<path>\S.*?):)?\s+(?P<user>\S+)\s+(?P<pid>[0-9]+|kernel)?\s*"
                        r"(?P<access>[.fFrcem]{5}|mount|swap|knfsd)(?:\s+(?P<command>.*))?", re.ASCII)
_FUSER_PATH = re.compile(r"(\S.*):")
# psmisc prints each PID (or "kernel") to stdout and the rest of the row to stderr: captured
# apart, stdout is one run of PIDs and the stderr rows have an empty PID column
_FUSER_PIDS = re.compile(r"(?:\s*(?:[0-9]+|kernel))+\s*", re.ASCII)


def parse_fuser(text: str) -> list[FuserEntry]:
    """`fuser -v FILE...`: one entry per (file, process); `kernel` users (mounts, swap) are skipped.

    Reads the terminal form (2>&1) and also stdout and stderr captured apart and joined in either
    order, matching the PIDs to the rows by position; PIDs with no rows give entries with only `pid`.
    """
    rows: list[tuple[int, str, str, str | None, str, str]] = []  # line, path, user, pid, access, command
    loose: list[str] = []
    path: str | None = None
    after_kernel = False
    for lineno, line in _lines(text):
        if line.lstrip().startswith(_FUSER_NOISE) or _FUSER_HEADER.fullmatch(line):
            continue
        if _FUSER_PIDS.fullmatch(line):
            loose += re.findall(r"[0-9]+|kernel", line)
            continue
        row = _FUSER_ROW.fullmatch(line)
        if row is None:
            if only_path := _FUSER_PATH.fullmatch(line):  # long names are printed alone on their line
                path = only_path[1]
            elif not after_kernel:  # a mount point too long for the kernel row wraps to the next line
                raise ParseError(f"expected 'PATH: USER PID ACCESS COMMAND' or an indented continuation, "
                                 f"found {quote(line)}", format=_FUSER_FORMAT, line=lineno)
            after_kernel = False
            continue
        path = row["path"] or path
        if path is None:
            raise ParseError(f"continuation line before any 'PATH:' line: {quote(line)}",
                             format=_FUSER_FORMAT, line=lineno)
        after_kernel = row["pid"] == "kernel" or row["access"] in ("mount", "swap", "knfsd")
        rows.append((lineno, path, row["user"], row["pid"], row["access"], row["command"] or ""))
    split = [r for r in rows if r[3] is None]
    if split and len(split) != len(rows):
        raise ParseError("some rows have a PID column and some do not", format=_FUSER_FORMAT, line=split[0][0])
    if split or not rows:
        if split and len(loose) != len(split):
            raise ParseError(f"{len(split)} rows without PIDs but {len(loose)} PIDs on stdout",
                             format=_FUSER_FORMAT, line=split[0][0])
        rows = [r[:3] + (pid,) + r[4:] for r, pid in zip(split, loose)] if split else \
            [(0, "", "", pid, "", "") for pid in loose]
    elif loose:
        raise ParseError(f"a line of bare PIDs beside complete rows: {quote(' '.join(loose))}", format=_FUSER_FORMAT)
    return [FuserEntry(path=r[1], user=r[2], pid=int(r[3]), access=r[4], command=r[5])
            for r in rows if r[3] is not None and r[3] != "kernel"]


def fuser_pids(entries: Iterable[FuserEntry]) -> set[int]:
    return {entry.pid for entry in entries}


_CGROUP_FORMAT = "/proc/<pid>/cgroup"
_CGROUP_LINE = re.compile(r"[0-9]+:[^:]*:(.*)", re.ASCII)
# a path segment naming a container: bare id (cgroup v1), `<runtime>-<id>.scope` (systemd
# driver), `...slice:cri-containerd:<id>` (containerd with systemd cgroups, v1 layout)
_CGROUP_ID = re.compile(r"(?:(?P<prefix>[A-Za-z0-9_.:-]*?)[-:])?(?P<id>[0-9a-f]{64})(?:\.scope)?", re.ASCII)
_HEX64 = re.compile(r"[0-9a-f]{64}", re.ASCII)


def parse_cgroup(text: str) -> str | None:
    """The 64-hex container id in `/proc/<pid>/cgroup` (v1 or v2, docker/containerd/cri-o), or None.

    None means the process is not in a container cgroup (or the namespace hides the path).
    """
    found: str | None = None
    for lineno, line in _lines(text):
        m = _CGROUP_LINE.fullmatch(line.strip())
        if m is None:
            raise ParseError(f"expected 'hierarchy-id:controllers:path', found {quote(line)}",
                             format=_CGROUP_FORMAT, line=lineno)
        if found is not None:
            continue
        for segment in reversed(m[1].split("/")):  # the deepest container cgroup is the process's own
            seg = _CGROUP_ID.fullmatch(segment)
            # conmon is cri-o's monitor process, not the container
            if seg and "conmon" not in (seg["prefix"] or ""):
                found = seg["id"]
                break
    return found


def normalize_container_id(container_id: str) -> str:
    """`containerd://<id>`, `docker://<id>`, `cri-o://<id>` (Kubernetes containerStatuses) or a bare id → the id."""
    raw = container_id.strip()
    bare = raw.split("://", 1)[1] if "://" in raw else raw
    if not _HEX64.fullmatch(bare.lower()):
        raise ParseError(f"expected '<runtime>://<64 hex digits>' or 64 hex digits, found {quote(raw)}",
                         format="container id")
    return bare.lower()


@dataclass(frozen=True)
class ProcStat:
    """The fields of `/proc/<pid>/stat` a kill needs: (pid, start_ticks) names one process for a boot's lifetime."""

    pid: int
    comm: str
    state: str  # R S D Z T t X I …
    ppid: int
    start_ticks: int  # field 22: when it started, in clock ticks (USER_HZ) after boot


_STAT_FORMAT = "/proc/<pid>/stat"
# comm is in parentheses and may itself hold spaces and ')': the last ") " ends it
_STAT_HEAD = re.compile(r"([0-9]+) \((.*)\) (.*)", re.ASCII | re.DOTALL)
_STAT_MIN_FIELDS = 20  # fields 3 to 22 at least; kernels since 2.6 print 44 to 52


def _stat_line(line: str, lineno: int | None) -> ProcStat:
    m = _STAT_HEAD.fullmatch(line.strip())
    if m is None:
        raise ParseError(f"expected 'PID (COMM) STATE PPID …', found {quote(line)}", format=_STAT_FORMAT, line=lineno)
    rest = m[3].split()
    if len(rest) < _STAT_MIN_FIELDS:
        raise ParseError(f"expected at least 22 fields, found {len(rest) + 2}: {quote(line)}",
                         format=_STAT_FORMAT, line=lineno)
    state, ppid, start = rest[0], rest[1], rest[19]
    for name, value in (("ppid (field 4)", ppid), ("starttime (field 22)", start)):
        if not _INT.fullmatch(value):
            raise ParseError(f"{name}: expected an integer, found {quote(value)}", format=_STAT_FORMAT, line=lineno)
    return ProcStat(pid=int(m[1]), comm=m[2], state=state, ppid=int(ppid), start_ticks=int(start))


def parse_proc_stat(text: str) -> ProcStat:
    """One `/proc/<pid>/stat` (one line; comm may hold spaces and parentheses)."""
    lines = [line for line in _NEWLINE.split(text) if line.strip()]
    if len(lines) != 1:
        raise ParseError(f"expected one line, found {len(lines)}", format=_STAT_FORMAT)
    return _stat_line(lines[0], None)


def parse_proc_stats(text: str) -> list[ProcStat]:
    """Several `/proc/<pid>/stat` files printed one after another (`cat /proc/1/stat /proc/7/stat`)."""
    return [_stat_line(line, lineno) for lineno, line in enumerate(_NEWLINE.split(text), 1) if line.strip()]
