"""What the pods' containers answer: scripted exec results (and faults), and their logs.

An argv nobody scripted fails the way a real container does, with the runtime's
"executable file not found" as an InternalError status, never with an invented success.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
from collections.abc import Callable, Sequence

from runbook.sim import commands as sim_commands
from runbook.sim import formats as sim_formats
from runbook.backends.base import CommandResult
from tests.standin.apiserver.errors import ApiError
from tests.standin.apiserver.store import now_utc


@dataclasses.dataclass(frozen=True)
class ExecAnswer:
    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    delay: float = 0.0  # seconds between the output and the end of the command
    hang: bool = False  # the command never ends (until the client goes away)
    drop: bool = False  # the stream breaks after the output, before the exit status
    error: str | None = None  # the command could not start (InternalError), e.g. binary not found
    chunk: int | None = None  # send the output in messages of this many bytes


Handler = Callable[[dict, str, tuple[str, ...]], ExecAnswer | None]


def not_found(argv: Sequence[str]) -> ExecAnswer:
    return ExecAnswer(error=("error executing command in container: failed to exec in container: failed to start "
                             f'exec "{argv[0] if argv else ""}": OCI runtime exec failed: exec failed: unable to start '
                             f'container process: exec: "{argv[0] if argv else ""}": executable file not found in '
                             "$PATH: unknown"))


@dataclasses.dataclass(frozen=True)
class ProcRow:
    """One process of a container as its /proc/<pid>/stat shows it."""

    comm: str
    state: str
    ppid: int
    start_ticks: int


def proc_answer(argv: Sequence[str], table: dict[int, ProcRow],
                on_signal: Callable[[int, str], None]) -> ExecAnswer | None:
    """`cat /proc/<pid>/stat…` and runbook's check-then-signal script, over a container's `table`
    (pid → row); `on_signal(pid, signal)` is told of each signal sent. None: another command."""
    def run(words: Sequence[str]) -> CommandResult:
        if words[:1] == ["kill"] and len(words) == 4 and words[1] == "-s":
            pid = int(words[3])
            if pid not in table:
                return CommandResult("", f"kill: ({pid}) - No such process\n", 1)
            on_signal(pid, words[2])
            return CommandResult("")
        if words[:1] == ["cat"] and all(w.startswith("/proc/") and w.endswith("/stat") for w in words[1:]):
            out, errors = [], []
            for path in words[1:]:
                raw = path.removeprefix("/proc/").removesuffix("/stat")
                row = table.get(int(raw)) if raw.isdigit() else None
                if row is None:
                    errors.append(f"cat: {path}: No such file or directory\n")
                else:
                    out.append(sim_formats.proc_stat(int(raw), row.comm, row.state, row.ppid, row.start_ticks))
            return CommandResult("".join(out), "".join(errors), 1 if errors else 0)
        return CommandResult("", f"sh: 1: {words[0]}: not found\n", 127)

    if sim_commands.is_identity_kill(argv):
        done = sim_commands.identity_kill(argv, lambda words: run(words))
        return ExecAnswer(done.stdout, done.stderr, done.exit_code)
    if argv[:1] == ("cat",) and len(argv) > 1 and all(a.startswith("/proc/") and a.endswith("/stat") for a in argv[1:]):
        done = run(list(argv))
        return ExecAnswer(done.stdout, done.stderr, done.exit_code)
    return None


class Kubelet:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.answers: dict[tuple[str | None, tuple[str, ...]], ExecAnswer] = {}
        self.handlers: list[Handler] = []
        self.execs: list[tuple[str, str, str, tuple[str, ...]]] = []  # (namespace, pod, container, argv)
        self.lines: dict[tuple[str, str, str], list[tuple[dt.datetime, str]]] = {}
        self.previous: dict[tuple[str, str, str], list[tuple[dt.datetime, str]]] = {}  # the container before its restart

    def script(self, argv: Sequence[str], answer: ExecAnswer, *, pod: str | None = None) -> None:
        """`argv` run in `pod` (any pod when None) answers `answer`."""
        with self.lock:
            self.answers[(pod, tuple(argv))] = answer

    def answer(self, pod: dict, container: str, argv: tuple[str, ...]) -> ExecAnswer:
        name, namespace = pod["metadata"]["name"], pod["metadata"]["namespace"]
        with self.lock:
            self.execs.append((namespace, name, container, argv))
            handlers = list(self.handlers)
            scripted = self.answers.get((name, argv)) or self.answers.get((None, argv))
        for handler in handlers:
            answer = handler(pod, container, argv)
            if answer is not None:
                return answer
        return scripted or not_found(argv)

    def log(self, namespace: str, pod: str, container: str, line: str, *, at: dt.datetime | None = None) -> None:
        with self.lock:
            self.lines.setdefault((namespace, pod, container), []).append((at or now_utc(), line))

    def forget(self, namespace: str, pod: str) -> None:
        """A deleted pod's logs go with it; its replacement starts with none."""
        with self.lock:
            for held in (self.lines, self.previous):
                for key in [k for k in held if k[:2] == (namespace, pod)]:
                    del held[key]

    def restart(self, namespace: str, pod: str, container: str) -> None:
        """The container restarted: its log becomes the previous one (`?previous=true`), the new one is empty."""
        with self.lock:
            key = (namespace, pod, container)
            self.previous[key] = self.lines.pop(key, [])

    def read_log(self, pod: dict, container: str | None, *, since_seconds: int | None, tail_lines: int | None,
                 limit_bytes: int | None, timestamps: bool, previous: bool = False) -> bytes:
        name = pod["metadata"]["name"]
        names = [c["name"] for c in pod["spec"].get("containers", [])]
        if container is None:
            if len(names) != 1:
                raise ApiError.bad_request(f"a container name must be specified for pod {name}, choose one of: "
                                           f"[{' '.join(names)}]")
            container = names[0]
        if container not in names:
            raise ApiError.bad_request(f"container {container} is not valid for pod {name}")
        key = (pod["metadata"]["namespace"], name, container)
        with self.lock:
            if previous and key not in self.previous:
                # The kubelet's answer, as the API server passes it on (HTTP 400).
                raise ApiError.bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
            lines = list((self.previous if previous else self.lines).get(key, []))
        if since_seconds is not None:
            cutoff = now_utc() - dt.timedelta(seconds=since_seconds)
            lines = [(at, text) for at, text in lines if at >= cutoff]
        if tail_lines is not None:
            lines = lines[-tail_lines:] if tail_lines else []
        text = "".join((at.strftime("%Y-%m-%dT%H:%M:%S.%fZ") + " " if timestamps else "") + line + "\n"
                       for at, line in lines)
        data = text.encode()
        return data[:limit_bytes] if limit_bytes is not None else data
