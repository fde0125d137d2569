"""The incident journal: one append-only JSON Lines file per incident, fsynced line by line.

Written before the engine moves on, so a crash loses nothing that happened; a torn last line,
or any line that is not an event, is skipped with a warning naming file and line on read. Secrets are redacted here, when written. The history of
applied actions across all incidents backs the cooldown and budget guards.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import fcntl
import json
import os
import secrets
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from runbook.record import redaction
from runbook.record import safe_fs
from runbook.errors import BackendError, JournalError
from runbook.model import events as ev


class Journal(Protocol):
    incident: str
    run: str

    def record(self, type: str, *, at: dt.datetime, step: str | None = None,
               data: dict[str, Any] | None = None) -> ev.Event: ...

    def events(self) -> list[ev.Event]: ...


class Entry(NamedTuple):
    """An event to append, before the journal gives it its sequence number (`JsonlJournal.extend`)."""
    type: str
    at: dt.datetime
    step: str | None
    data: dict[str, Any]


DRILL_PREFIX = "drill-"
JOURNAL_NAME = "journal.jsonl"


def new_incident_id(at: dt.datetime, playbook: str, *, drill: bool = False) -> str:
    prefix = DRILL_PREFIX if drill else ""
    return f"{prefix}{at.strftime('%Y%m%d-%H%M%S')}-{playbook}-{secrets.token_hex(2)}"


def new_run_id() -> str:
    return secrets.token_hex(4)


def _jsonable(value: Any) -> Any:
    """Plain JSON types only: datetimes as ISO strings, tuples as lists, dataclasses as dicts."""
    if type(value) is redaction.SeriesPoints:  # checked when built: strings and finite numbers
        return value
    if isinstance(value, dt.datetime):
        return ev.iso_ms(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


class MemoryJournal:
    """A journal in memory, for tests and previews."""

    def __init__(self, incident: str = "test-incident", run: str = "test-run"):
        self.incident, self.run = incident, run
        self._events: list[ev.Event] = []

    def record(self, type: str, *, at: dt.datetime, step: str | None = None,
               data: dict[str, Any] | None = None) -> ev.Event:
        event = ev.Event(seq=len(self._events) + 1, at=at, incident=self.incident, run=self.run, type=type,
                         step=step, data=redaction.redact(_jsonable(data or {})))
        self._events.append(event)
        return event

    def events(self) -> list[ev.Event]:
        return list(self._events)


class JsonlJournal:
    """`<state>/incidents/<id>/journal.jsonl`; several runs (and processes) may append to one."""

    def __init__(self, path: Path, *, incident: str, run: str):
        self.path, self.incident, self.run = Path(path), incident, run
        try:
            safe_fs.private_dir(self.path.parent)
            self._fd = _open_journal(self.path)
        except OSError as exc:
            raise JournalError(f"cannot open the journal {self.path}: {safe_fs.reason(exc)}") from None
        self._listeners: list[Any] = []

    @classmethod
    def for_incident(cls, state: Path, incident: str, run: str) -> "JsonlJournal":
        folder = incident_dir(state, incident)
        try:
            safe_fs.private_dir(folder.parent)  # incidents/ itself must not be a link either
        except OSError as exc:
            raise JournalError(f"cannot open the incidents folder {folder.parent}: {safe_fs.reason(exc)}") from None
        return cls(folder / JOURNAL_NAME, incident=incident, run=run)

    def subscribe(self, listener: Any) -> None:
        """`listener(event)` is called after each event is on disk (the CLI's live view)."""
        self._listeners.append(listener)

    def record(self, type: str, *, at: dt.datetime, step: str | None = None,
               data: dict[str, Any] | None = None) -> ev.Event:
        return self._append(lambda _: [Entry(type, at, step, data or {})], read=False)[0]

    def extend(self, choose: Callable[[list[ev.Event]], Sequence[Entry]]) -> list[ev.Event]:
        """Append what `choose` picks, given the events already here, under the journal's lock, with one fsync.

        Two writers (threads or processes) that race to append the same entries append them once:
        the second is shown the first's. The events appended, in order ([] when `choose` picks none).
        """
        return self._append(choose, read=True)

    def _append(self, pick: Callable[[Any], Sequence[Entry]], *, read: bool) -> list[ev.Event]:
        """Under the lock: end a torn line, number the picked entries after the last event, write, fsync."""
        try:
            # The lock makes sequence numbers unique when two processes append to one incident.
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                present = _events_in(self._fd) if read else None
                entries = pick(present)
                if not entries:
                    return []
                size = os.fstat(self._fd).st_size
                if size and os.pread(self._fd, 1, size - 1) != b"\n":
                    # A writer died mid-line: end that torn line so this event stands on its own.
                    safe_fs.write_all(self._fd, b"\n")
                seq = (present[-1].seq if present else 0) if present is not None else _last_seq(self._fd)
                events = [ev.Event(seq=seq + n, at=entry.at, incident=self.incident, run=self.run, type=entry.type,
                                   step=entry.step, data=redaction.redact(_jsonable(entry.data)))
                          for n, entry in enumerate(entries, start=1)]
                lines = "".join(json.dumps(event.to_json(), ensure_ascii=False, separators=(",", ":")) + "\n"
                                for event in events)
                safe_fs.write_all(self._fd, lines.encode("utf-8"))
                os.fsync(self._fd)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        except OSError as exc:
            raise JournalError(f"cannot write the journal {self.path}: {exc.strerror}") from exc
        for event in events:
            self._tell(event)
        return events

    def _tell(self, event: ev.Event) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception as exc:  # noqa: BLE001 - a broken view must never stop the run it shows
                self._listeners.remove(listener)
                self.record(ev.NOTE, at=event.at, data={"message": f"a journal listener failed and was detached: "
                                                                   f"{exc.__class__.__name__}: {exc}"})

    def events(self) -> list[ev.Event]:
        return read_journal(self.path).events

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _open_journal(path: Path) -> int:
    """The journal's descriptor, never through a link; a journal just created is made durable by name too."""
    try:
        fd = safe_fs.open_private(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return safe_fs.open_private(path, os.O_RDWR | os.O_APPEND)
    try:
        # Without this, a crash can keep the fsynced lines but lose the file's entry in the folder.
        safe_fs.fsync_dir(path.parent)
    except OSError:
        os.close(fd)
        raise
    return fd


def _events_in(fd: int) -> list[ev.Event]:
    """Every readable event of the journal we hold, read through its descriptor (never by name again)."""
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return _parse(b"".join(chunks), "").events


def _last_seq(fd: int) -> int:
    """The sequence number of the last complete line, reading only the tail of the file we hold."""
    size = os.fstat(fd).st_size
    chunk = min(size, 65536)
    while True:
        tail = os.pread(fd, chunk, size - chunk)
        lines = [line for line in tail.split(b"\n") if line.strip()]
        for line in reversed(lines if chunk == size else lines[1:]):
            try:
                return ev.parse_line(line).seq
            except ValueError:
                continue  # a torn or corrupt line, which readers skip too: look further back
        if chunk == size:
            return 0
        chunk = min(size, chunk * 4)


@dataclasses.dataclass(frozen=True)
class JournalRead:
    events: list[ev.Event]
    warnings: list[str]


def read_journal(path: Path) -> JournalRead:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise JournalError(f"cannot read the journal {path}: {exc.strerror}") from exc
    return _parse(raw, path)


def _parse(raw: bytes, path: Path | str) -> JournalRead:
    """The events of a journal's bytes; each line that is not one skipped, with a warning naming it."""
    events: list[ev.Event] = []
    warnings: list[str] = []
    lines = raw.split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            events.append(ev.parse_line(line))
        except ValueError as exc:
            last = number == len(lines) or all(not rest.strip() for rest in lines[number:])
            what = "a torn last line (the writer stopped mid-line)" if last else f"an unreadable line ({exc})"
            warnings.append(f"{path}:{number}: skipped {what}")
    return JournalRead(events, warnings)


def incidents_root(state: Path) -> Path:
    return Path(state) / "incidents"


def incident_dir(state: Path, incident: str) -> Path:
    if not incident or "/" in incident or incident.startswith("."):
        raise JournalError(f"not an incident id: {incident!r}")
    return incidents_root(state) / incident


def journal_paths(state: Path, *, modified_since: dt.datetime | None = None) -> Iterator[Path]:
    """Every incident's journal, in name order; a journal that is a link (not one of ours) is left out."""
    root = incidents_root(state)
    try:
        names = sorted(entry.name for entry in os.scandir(root) if not entry.name.startswith("."))
    except (FileNotFoundError, NotADirectoryError):
        return
    cutoff = modified_since.timestamp() if modified_since else None
    base = str(root)
    for name in names:
        # A plain string until it is yielded: with thousands of old incidents, pathlib is most of the cost.
        path = os.path.join(base, name, JOURNAL_NAME)
        try:
            info = os.stat(path, follow_symlinks=False)  # one stat per incident, none per line
        except (FileNotFoundError, NotADirectoryError):
            continue
        if not stat.S_ISREG(info.st_mode):
            continue
        if cutoff is not None and info.st_mtime < cutoff:
            continue  # nothing written since the window opened
        yield Path(path)


@dataclasses.dataclass(frozen=True)
class IncidentSummary:
    id: str
    playbook: str | None
    started: dt.datetime | None
    outcome: str | None
    path: Path
    warnings: tuple[str, ...] = ()


def summarize(path: Path) -> IncidentSummary:
    read = read_journal(path)
    events = read.events
    started = next((e for e in events if e.type == ev.RUN_STARTED), None)
    finished = [e for e in events if e.type == ev.RUN_FINISHED]
    return IncidentSummary(
        id=path.parent.name,
        playbook=_text_or_none(started.data.get("playbook")) if started else None,
        started=events[0].at if events else None,
        outcome=_text_or_none(finished[-1].data.get("outcome")) if finished
        else ("running or interrupted" if events else None),
        path=path,
        warnings=tuple(read.warnings),
    )


def _text_or_none(value: Any) -> str | None:
    """A field shown in a table: whatever a damaged line holds there is shown as text."""
    return None if value is None else str(value)


def list_incidents(state: Path) -> list[IncidentSummary]:
    return sorted((summarize(p) for p in journal_paths(state)),
                  key=lambda s: s.started or dt.datetime.min.replace(tzinfo=dt.timezone.utc))


@dataclasses.dataclass(frozen=True)
class Application:
    """One applied remediation as cooldowns and budgets count it."""

    incident: str
    action: str
    at: dt.datetime
    # Why it is counted without being known to have landed (None: it was applied), for the refusal to say.
    doubt: str | None = dataclasses.field(default=None, compare=False)

    @property
    def key(self) -> tuple[str, str, str]:
        """Identity across copies: the journal keeps milliseconds, so one application read twice matches."""
        return self.incident, self.action, ev.iso_ms(self.at)


# An apply whose outcome could not be read back may have changed the target: it counts as applied.
COUNTED_TYPES = frozenset({ev.ACTION_APPLIED, "action.unknown"})
# A change confirmed whose result never followed in its run may have landed (the process was killed
# between the apply and its record, and a CLI run has no restart to recover it): it counts as
# applied, at its confirmation, until something settles it.
IN_DOUBT_TYPE = ev.ACTION_CONFIRMED
# What settles a confirmed change in its run and step: its result, a new plan (the apply found the
# target moved and changed nothing), the step's end, or a restart's verdict on it; the run's end
# settles every one of that run.
SETTLING_TYPES = frozenset({ev.ACTION_APPLIED, ev.ACTION_UNKNOWN, ev.ACTION_FAILED, ev.ACTION_PLANNED,
                            ev.STEP_FINISHED, ev.RUN_INTERRUPTED})
# What a counted event that is not `action.applied` leaves in doubt, as a refusal says it.
DOUBTS = {ev.ACTION_UNKNOWN: "its apply raised before its result could be read back",
          IN_DOUBT_TYPE: "its run stopped after the yes, before the apply's result was written"}
# An event is stamped before its line is written, so its journal's mtime is no earlier than the
# event; the margin covers file times kept by a coarser clock and a clock stepped back a little.
MTIME_MARGIN = dt.timedelta(minutes=5)


@dataclasses.dataclass
class _Tally:
    """What cooldowns and budgets count of one journal's events, taken in the order written."""

    events: list[ev.Event] = dataclasses.field(default_factory=list)  # applied, or possibly applied
    in_doubt: dict[tuple[str, str | None], ev.Event] = dataclasses.field(default_factory=dict)  # (run, step)

    def add(self, event: ev.Event) -> None:
        if event.type in COUNTED_TYPES:
            self.events.append(event)
        if event.type == IN_DOUBT_TYPE:
            self.in_doubt[(event.run, event.step)] = event
        elif event.type in SETTLING_TYPES:
            self.in_doubt.pop((event.run, event.step), None)
        elif event.type == ev.RUN_FINISHED:
            for key in [key for key in self.in_doubt if key[0] == event.run]:
                del self.in_doubt[key]

    def counted(self) -> list[ev.Event]:
        return [*self.events, *self.in_doubt.values()]


def counted_in(events: list[ev.Event]) -> list[ev.Event]:
    """The events of one journal (in the order written) that cooldowns and budgets count."""
    tally = _Tally()
    for event in events:
        tally.add(event)
    return tally.counted()


@dataclasses.dataclass
class _Counted:
    """What one journal held that guards count, read up to `offset` (the end of its last whole line)."""

    file: tuple[int, int]  # (st_dev, st_ino): a journal replaced by another file is read afresh
    offset: int = 0
    tally: _Tally = dataclasses.field(default_factory=_Tally)
    damaged: list[tuple[int, bytes]] = dataclasses.field(default_factory=list)  # (line number, its first bytes)
    lines: int = 0  # whole lines read so far


_COUNTED: dict[Path, _Counted] = {}
_COUNTED_LOCK = threading.Lock()
# Cheap tests before parsing a line: most lines need no parsing at all.
_COUNTED_MARKERS = tuple(type.encode() for type in (*COUNTED_TYPES, IN_DOUBT_TYPE))
_SETTLING_MARKERS = tuple(type.encode() for type in (*SETTLING_TYPES, ev.RUN_FINISHED))
DAMAGED_KEPT = 4096  # bytes kept of a damaged application line: enough to see whose target it names


def counted_events(path: Path) -> list[ev.Event]:
    """The events of a journal that cooldowns and budgets count, reading only what was appended since
    the last call in this process (journals only grow); a bad line is skipped, as `read_journal` does.

    Counted: each applied change, each whose outcome is unknown, and each confirmed change that
    nothing settled (see IN_DOUBT_TYPE). Every guard check reads every journal written within its
    window: with a few dozen incidents in the last hour, reading each whole on each check cost more
    than the change it guards.
    """
    path = Path(path)
    try:
        info = os.stat(path)
    except OSError as exc:
        raise JournalError(f"cannot read the journal {path}: {exc.strerror}") from exc
    with _COUNTED_LOCK:
        entry = _COUNTED.get(path)
        if entry is None or entry.file != (info.st_dev, info.st_ino) or info.st_size < entry.offset:
            entry = _Counted((info.st_dev, info.st_ino))
        if info.st_size > entry.offset:
            try:
                with open(path, "rb") as handle:
                    handle.seek(entry.offset)
                    chunk = handle.read(info.st_size - entry.offset)
            except OSError as exc:
                raise JournalError(f"cannot read the journal {path}: {exc.strerror}") from exc
            whole = chunk.rfind(b"\n") + 1  # a torn last line is read once it is complete
            tally = entry.tally
            for number, line in enumerate(chunk[:whole].split(b"\n")[:-1], start=entry.lines + 1):
                counted = any(marker in line for marker in _COUNTED_MARKERS)
                if not counted and not (tally.in_doubt and any(marker in line for marker in _SETTLING_MARKERS)):
                    continue
                try:
                    event = ev.parse_line(line)
                except ValueError:
                    if counted:  # may be an application: never skipped
                        entry.damaged.append((number, line[:DAMAGED_KEPT]))
                    continue  # a damaged line that may have settled a change leaves it counted
                tally.add(event)
            entry.offset += whole
            entry.lines += chunk[:whole].count(b"\n")
        _COUNTED[path] = entry
        return entry.tally.counted()


def damaged_counted(path: Path) -> list[tuple[int, bytes]]:
    """The unreadable lines of a journal that name an applied (or possibly applied) change, as
    (line number, its first bytes), read by the last `counted_events(path)`."""
    with _COUNTED_LOCK:
        entry = _COUNTED.get(Path(path))
        return list(entry.damaged) if entry is not None else []


class DamagedHistory(BackendError):
    """A journal line that may record a change to the target cannot be read: the count is unknown."""


def _same_action(event: ev.Event, action: str | None) -> bool:
    """Whether a counted event is an application of `action` (None: of any); a confirmation journaled
    before confirmations named their action may be one of any."""
    named = event.data.get("action")
    return action is None or named == action or (named is None and event.type == IN_DOUBT_TYPE)


def _may_concern(line: bytes, target: str) -> bool:
    """Whether a damaged application line may be about `target`: it names it, or names no target at all."""
    return json.dumps(target)[1:-1].encode() in line or b'"target"' not in line


class History:
    """Applied actions across every incident's journal: what cooldowns and budgets count."""

    def __init__(self, state: Path | None, extra: Journal | None = None):
        self.state, self.extra = state, extra

    def applications(self, target: str, *, since: dt.datetime, action: str | None = None,
                     namespace: str | None = None) -> list[dt.datetime]:
        """When remediations (of `action`, or any) were applied to `target` since then.

        `namespace`, the namespace the change is made in, tells a shared history where the target's
        record lives; the local journals hold every target's.
        """
        return [application.at for application in self.records(target, since=since, action=action,
                                                                namespace=namespace)]

    def records(self, target: str, *, since: dt.datetime, action: str | None = None,
                namespace: str | None = None) -> list[Application]:
        """The remediations (of `action`, or any) applied to `target` since then, oldest first."""
        seen: set[tuple[str, str, int]] = set()
        found: list[Application] = []
        sources: list[list[ev.Event]] = []
        if self.state is not None:
            # Only a journal written to since the window opened can hold an application inside it
            # (such a journal is read whole). Drills act on a simulated world on virtual time: they
            # never count against real targets.
            for path in journal_paths(self.state, modified_since=since - MTIME_MARGIN):
                if path.parent.name.startswith(DRILL_PREFIX):
                    continue
                sources.append(counted_events(path))
                damaged = [number for number, line in damaged_counted(path) if _may_concern(line, target)]
                if damaged:
                    # Skipping it could let a change run again inside its cooldown: refuse to count instead.
                    raise DamagedHistory(
                        f"{path}:{damaged[0]}: an unreadable line may record a change applied to {target}, so its "
                        "cooldown and budget cannot be counted; repair the line from a backup, or move it to a file "
                        "of its own beside the journal once you have checked the target by hand")
        if self.extra is not None:
            sources.append(counted_in(self.extra.events()))
        for events in sources:
            for event in events:
                key = (event.incident, event.run, event.seq)
                if (event.data.get("target") == target and _same_action(event, action)
                        and event.at >= since and key not in seen):
                    seen.add(key)
                    found.append(Application(event.incident, str(event.data.get("action") or ""), event.at,
                                             DOUBTS.get(event.type)))
        return sorted(found, key=lambda a: a.at)
