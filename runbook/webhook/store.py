"""The webhook's durable state in `<state>/webhook/state.sqlite3`: dedupe keys, incidents, proposals,
and the journal lines a commit still owes to an incident's journal.

SQLite in WAL mode with `synchronous=FULL`: a commit is on disk before the 2xx, survives restarts,
and `BEGIN IMMEDIATE` makes check-then-insert atomic across threads and processes. Everything
stored goes through the journal's redaction, in a 0600 file (SQLite gives its -wal and -shm the
same mode) in a 0700 directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import errno
import json
import os
import sqlite3
import threading
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from runbook.record import safe_fs
from runbook.errors import JournalError
from runbook.record.redaction import redact, redact_text

SCHEMA = """
CREATE TABLE IF NOT EXISTS seen (key TEXT PRIMARY KEY, source TEXT NOT NULL, incident TEXT, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS seen_at ON seen (at);
CREATE TABLE IF NOT EXISTS incidents (
  id TEXT PRIMARY KEY, source TEXT NOT NULL, source_key TEXT NOT NULL UNIQUE, playbook TEXT,
  params TEXT NOT NULL, alert TEXT NOT NULL, state TEXT NOT NULL, job TEXT NOT NULL DEFAULT 'first',
  owner TEXT, outcome TEXT, opened REAL NOT NULL, updated REAL NOT NULL, closed REAL);
CREATE INDEX IF NOT EXISTS incidents_state ON incidents (state);
CREATE TABLE IF NOT EXISTS proposals (
  id INTEGER PRIMARY KEY AUTOINCREMENT, incident TEXT NOT NULL, step TEXT NOT NULL, run TEXT NOT NULL,
  action TEXT NOT NULL, target TEXT NOT NULL, summary TEXT NOT NULL, diff TEXT NOT NULL,
  created REAL NOT NULL, expires REAL NOT NULL, state TEXT NOT NULL, by TEXT, result TEXT);
CREATE INDEX IF NOT EXISTS proposals_incident ON proposals (incident, step);
CREATE TABLE IF NOT EXISTS owed (
  id INTEGER PRIMARY KEY AUTOINCREMENT, incident TEXT NOT NULL, type TEXT NOT NULL, step TEXT,
  data TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS owed_incident ON owed (incident);
"""

# Incident states. A job is waiting in `pending` (first run), `approved` (a human said yes) and
# `interrupted` (its process died mid-run); `running` is held by one worker.
WAITING = ("pending", "approved", "interrupted")


@dataclasses.dataclass(frozen=True)
class IncidentRow:
    id: str
    source: str
    source_key: str
    playbook: str | None
    params: dict[str, Any]
    alert: dict[str, Any]
    state: str
    job: str
    owner: str | None
    outcome: str | None
    opened: float
    updated: float
    closed: float | None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> "IncidentRow":
        data = dict(row)
        data["params"] = json.loads(data["params"])
        data["alert"] = json.loads(data["alert"])
        return cls(**data)


@dataclasses.dataclass(frozen=True)
class OwedLine:
    """A journal event committed with the store and not yet appended to the incident's journal."""
    id: int
    incident: str
    type: str
    step: str | None
    data: dict[str, Any]
    at: dt.datetime

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> "OwedLine":
        return cls(row["id"], row["incident"], row["type"], row["step"], json.loads(row["data"]),
                   dt.datetime.fromtimestamp(row["at"], dt.timezone.utc))


@dataclasses.dataclass(frozen=True)
class ProposalRow:
    id: int
    incident: str
    step: str
    run: str
    action: str
    target: str
    summary: str
    diff: list[str]
    created: float
    expires: float
    state: str  # pending | approved | applied | unchanged | refused | failed | expired | closed
    by: str | None
    result: str | None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> "ProposalRow":
        data = dict(row)
        data["diff"] = json.loads(data["diff"])
        return cls(**data)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _private_file(path: Path, *, create: bool) -> None:
    """The file 0600 and ours, never through a link; created when asked, else checked if it exists."""
    try:
        fd = safe_fs.open_private(path, os.O_RDWR | (os.O_CREAT if create else 0))
    except FileNotFoundError:
        if create:
            raise
        return
    try:
        owner = os.fstat(fd).st_uid
        if owner != os.geteuid():
            raise OSError(errno.EPERM, f"owned by uid {owner}, not by uid {os.geteuid()} that runs runbook",
                          str(path))
    finally:
        os.close(fd)


class Store:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.RLock()
        try:
            safe_fs.private_dir(self.path.parent)
            _private_file(self.path, create=True)
            for suffix in ("-wal", "-shm"):
                _private_file(self.path.with_name(self.path.name + suffix), create=False)
        except OSError as exc:
            where = exc.filename or self.path
            raise JournalError(f"cannot open the webhook state {where}: {exc.strerror or exc}; it must be a "
                               f"regular file (not a link) owned by the user running runbook, in a directory "
                               f"only that user can write: remove it or fix its owner") from exc
        try:
            self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(SCHEMA)
        except sqlite3.Error as exc:
            raise JournalError(f"cannot open the webhook state {self.path}: {exc}") from exc

    @contextlib.contextmanager
    def transaction(self, *, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """One writer at a time, across threads (the lock) and processes (BEGIN IMMEDIATE).

        `durable=False` commits without waiting for the disk (WAL, synchronous=NORMAL): only for a
        change that a crash may lose, because the next pass makes it again (settling a journal line
        already on disk); the next durable commit puts it on disk with its own.
        """
        with self._lock:
            if not durable:
                self._db.execute("PRAGMA synchronous=NORMAL")
            try:
                yield from self._transaction()
            finally:
                if not durable:
                    self._db.execute("PRAGMA synchronous=FULL")

    def _transaction(self) -> Iterator[sqlite3.Connection]:
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise JournalError(f"cannot write the webhook state {self.path}: {exc}") from exc
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        try:
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            raise JournalError(f"cannot commit the webhook state {self.path}: {exc}") from exc

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise JournalError(f"cannot read the webhook state {self.path}: {exc}") from exc

    def ping(self) -> None:
        self._query("SELECT 1")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- dedupe ----------------------------------------------------------------------------

    @staticmethod
    def seen(db: sqlite3.Connection, key: str) -> str | None:
        """The incident a key was seen for ('' when it led to none), or None if it is new."""
        row = db.execute("SELECT incident FROM seen WHERE key = ?", (key,)).fetchone()
        return None if row is None else (row["incident"] or "")

    @staticmethod
    def remember(db: sqlite3.Connection, key: str, source: str, incident: str | None, at: float) -> None:
        db.execute("INSERT OR IGNORE INTO seen (key, source, incident, at) VALUES (?, ?, ?, ?)",
                   (key, source, incident, at))

    def forget_before(self, cutoff: float) -> int:
        with self.transaction() as db:
            return db.execute("DELETE FROM seen WHERE at < ?", (cutoff,)).rowcount

    def forget_keys_before(self, cutoff: float) -> list[str]:
        """Forget the dedupe keys older than `cutoff`; the keys forgotten (their shared claims go too)."""
        with self.transaction() as db:
            keys = [r["key"] for r in db.execute("SELECT key FROM seen WHERE at < ?", (cutoff,)).fetchall()]
            db.execute("DELETE FROM seen WHERE at < ?", (cutoff,))
            return keys

    def seen_count(self) -> int:
        return int(self._query("SELECT count(*) AS n FROM seen")[0]["n"])

    # -- incidents -------------------------------------------------------------------------

    @staticmethod
    def incident_by_key(db: sqlite3.Connection, source_key: str) -> IncidentRow | None:
        row = db.execute("SELECT * FROM incidents WHERE source_key = ?", (source_key,)).fetchone()
        return IncidentRow.from_row(row) if row else None

    @staticmethod
    def add_incident(db: sqlite3.Connection, *, id: str, source: str, source_key: str, playbook: str | None,
                     params: dict[str, Any], alert: dict[str, Any], state: str, at: float) -> None:
        db.execute("INSERT INTO incidents (id, source, source_key, playbook, params, alert, state, opened, updated) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (id, source, source_key, playbook, json.dumps(redact(params)), json.dumps(redact(alert)), state,
                    at, at))

    def incident(self, incident: str) -> IncidentRow | None:
        rows = self._query("SELECT * FROM incidents WHERE id = ?", (incident,))
        return IncidentRow.from_row(rows[0]) if rows else None

    def incidents(self, *states: str) -> list[IncidentRow]:
        """Oldest first; incidents opened at the same moment in the order they were stored."""
        if not states:
            return [IncidentRow.from_row(r) for r in self._query("SELECT * FROM incidents ORDER BY opened, rowid")]
        marks = ",".join("?" * len(states))
        return [IncidentRow.from_row(r) for r in
                self._query(f"SELECT * FROM incidents WHERE state IN ({marks}) ORDER BY opened, rowid", states)]

    def runnable(self) -> list[IncidentRow]:
        """The incidents waiting for a run whose journal owes nothing, oldest first."""
        marks = ",".join("?" * len(WAITING))
        return [IncidentRow.from_row(r) for r in self._query(
            f"SELECT * FROM incidents WHERE state IN ({marks}) AND NOT EXISTS "
            f"(SELECT 1 FROM owed WHERE owed.incident = incidents.id) ORDER BY opened, rowid", WAITING)]

    @staticmethod
    def waiting_count(db: sqlite3.Connection) -> int:
        marks = ",".join("?" * len(WAITING))
        return int(db.execute(f"SELECT count(*) AS n FROM incidents WHERE state IN ({marks})", WAITING).fetchone()["n"])

    def claim(self, incident: str, owner: str, at: float) -> IncidentRow | None:
        """Take a waiting incident for one run; None when it is not waiting (done, closed, taken) or
        when its journal does not hold its alert yet (a run never starts before that is on disk)."""
        with self.transaction() as db:
            row = db.execute("SELECT * FROM incidents WHERE id = ?", (incident,)).fetchone()
            if row is None or row["state"] not in WAITING or Store.owes(db, incident):
                return None
            db.execute("UPDATE incidents SET state = 'running', owner = ?, updated = ? WHERE id = ?",
                       (owner, at, incident))
            return IncidentRow.from_row(row)

    def set_state(self, incident: str, state: str, at: float, *, job: str | None = None,
                  outcome: str | None = None, db: sqlite3.Connection | None = None) -> None:
        sql = ("UPDATE incidents SET state = ?, updated = ?, owner = NULL, job = coalesce(?, job), "
               "outcome = coalesce(?, outcome) WHERE id = ?")
        outcome = redact_text(outcome) if outcome is not None else None  # an error message may quote a secret
        if db is not None:
            db.execute(sql, (state, at, job, outcome, incident))
            return
        with self.transaction() as tx:
            tx.execute(sql, (state, at, job, outcome, incident))

    @staticmethod
    def mark_closed(db: sqlite3.Connection, incident: str, at: float) -> str:
        """Record the resolution; a waiting first run is dropped. Returns the state before."""
        row = db.execute("SELECT state FROM incidents WHERE id = ?", (incident,)).fetchone()
        db.execute("UPDATE incidents SET closed = coalesce(closed, ?), updated = ? WHERE id = ?", (at, at, incident))
        if row["state"] in ("pending", "approved", "proposed", "done", "unmatched", "refused", "recorded"):
            db.execute("UPDATE incidents SET state = 'closed' WHERE id = ?", (incident,))
        return str(row["state"])

    # -- proposals -------------------------------------------------------------------------

    @staticmethod
    def add_proposal(db: sqlite3.Connection, *, incident: str, step: str, run: str, action: str, target: str,
                     summary: str, diff: list[str], created: float, expires: float, state: str = "pending") -> int:
        cur = db.execute("INSERT INTO proposals (incident, step, run, action, target, summary, diff, created, "
                         "expires, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         (incident, step, run, action, redact_text(target), redact_text(summary),
                          json.dumps(redact(diff)), created, expires, state))
        return int(cur.lastrowid or 0)

    @staticmethod
    def latest_proposal(db: sqlite3.Connection, incident: str, step: str) -> ProposalRow | None:
        row = db.execute("SELECT * FROM proposals WHERE incident = ? AND step = ? ORDER BY id DESC LIMIT 1",
                         (incident, step)).fetchone()
        return ProposalRow.from_row(row) if row else None

    def proposal(self, incident: str, step: str) -> ProposalRow | None:
        with self._lock:
            return self.latest_proposal(self._db, incident, step)

    def proposals(self, *states: str, incident: str | None = None) -> list[ProposalRow]:
        sql, args = "SELECT * FROM proposals WHERE 1 = 1", []
        if states:
            sql += f" AND state IN ({','.join('?' * len(states))})"
            args.extend(states)
        if incident:
            sql += " AND incident = ?"
            args.append(incident)
        return [ProposalRow.from_row(r) for r in self._query(sql + " ORDER BY id", tuple(args))]

    @staticmethod
    def set_proposal(db: sqlite3.Connection, proposal: int, state: str, *, by: str | None = None,
                     result: str | None = None) -> None:
        db.execute("UPDATE proposals SET state = ?, by = coalesce(?, by), result = coalesce(?, result) WHERE id = ?",
                   (state, by, redact_text(result) if result is not None else None, proposal))

    # -- journal lines owed ----------------------------------------------------------------

    @staticmethod
    def owe(db: sqlite3.Connection, incident: str, type: str, *, at: float, data: dict[str, Any],
            step: str | None = None) -> None:
        """Commit a journal event with the store; it is appended to the journal after the commit."""
        db.execute("INSERT INTO owed (incident, type, step, data, at) VALUES (?, ?, ?, ?, ?)",
                   (incident, type, step, json.dumps(redact(data), ensure_ascii=False), at))

    @staticmethod
    def owes(db: sqlite3.Connection, incident: str) -> bool:
        return db.execute("SELECT 1 FROM owed WHERE incident = ? LIMIT 1", (incident,)).fetchone() is not None

    @staticmethod
    def owed(db: sqlite3.Connection, incidents: Collection[str] | None = None) -> list[OwedLine]:
        """The lines still owed (to these incidents, or to all), in the order they were committed."""
        if incidents is None:
            rows = db.execute("SELECT * FROM owed ORDER BY id").fetchall()
        else:
            wanted = sorted(set(incidents))
            rows = []
            for start in range(0, len(wanted), 500):  # SQLite binds at most 999 parameters
                chunk = wanted[start:start + 500]
                rows += db.execute(f"SELECT * FROM owed WHERE incident IN ({','.join('?' * len(chunk))})",
                                   chunk).fetchall()
            rows.sort(key=lambda row: row["id"])
        return [OwedLine.from_row(row) for row in rows]

    def owed_now(self, incidents: Collection[str] | None = None) -> list[OwedLine]:
        """`owed`, read outside any transaction (a journal writer reads what it is to write)."""
        with self._lock:
            try:
                return Store.owed(self._db, incidents)
            except sqlite3.Error as exc:
                raise JournalError(f"cannot read the webhook state {self.path}: {exc}") from exc

    @staticmethod
    def settle(db: sqlite3.Connection, line: int) -> None:
        """The owed line is in the journal now."""
        db.execute("DELETE FROM owed WHERE id = ?", (line,))

    def owed_count(self) -> int:
        return int(self._query("SELECT count(*) AS n FROM owed")[0]["n"])
