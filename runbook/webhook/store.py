"""The webhook's durable state in `<state>/webhook/state.sqlite3`: dedupe keys, incidents, proposals.

SQLite in WAL mode with `synchronous=FULL`: a commit is on disk before the 2xx, survives restarts,
and `BEGIN IMMEDIATE` makes check-then-insert atomic across threads and processes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runbook.errors import JournalError

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


class Store:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.RLock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(SCHEMA)
        except sqlite3.Error as exc:
            raise JournalError(f"cannot open the webhook state {self.path}: {exc}") from exc

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One writer at a time, across threads (the lock) and processes (BEGIN IMMEDIATE)."""
        with self._lock:
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
                   (id, source, source_key, playbook, json.dumps(params), json.dumps(alert), state, at, at))

    def incident(self, incident: str) -> IncidentRow | None:
        rows = self._query("SELECT * FROM incidents WHERE id = ?", (incident,))
        return IncidentRow.from_row(rows[0]) if rows else None

    def incidents(self, *states: str) -> list[IncidentRow]:
        if not states:
            return [IncidentRow.from_row(r) for r in self._query("SELECT * FROM incidents ORDER BY opened")]
        marks = ",".join("?" * len(states))
        return [IncidentRow.from_row(r)
                for r in self._query(f"SELECT * FROM incidents WHERE state IN ({marks}) ORDER BY opened", states)]

    def claim(self, incident: str, owner: str, at: float) -> IncidentRow | None:
        """Take a waiting incident for one run; None when it is not waiting (done, closed, taken)."""
        with self.transaction() as db:
            row = db.execute("SELECT * FROM incidents WHERE id = ?", (incident,)).fetchone()
            if row is None or row["state"] not in WAITING:
                return None
            db.execute("UPDATE incidents SET state = 'running', owner = ?, updated = ? WHERE id = ?",
                       (owner, at, incident))
            return IncidentRow.from_row(row)

    def set_state(self, incident: str, state: str, at: float, *, job: str | None = None,
                  outcome: str | None = None, db: sqlite3.Connection | None = None) -> None:
        sql = ("UPDATE incidents SET state = ?, updated = ?, owner = NULL, job = coalesce(?, job), "
               "outcome = coalesce(?, outcome) WHERE id = ?")
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
                         (incident, step, run, action, target, summary, json.dumps(diff), created, expires, state))
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
                   (state, by, result, proposal))
