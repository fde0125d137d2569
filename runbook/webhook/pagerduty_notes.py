"""Notes back to PagerDuty: the diagnosis and outcome of a run that a PagerDuty incident started, posted once.

An outbox table in the webhook's store holds each note from the moment the run's outcome is known; one
poster thread sends it with the `pagerduty` client (retried with backoff on the service's clock) and
records it as posted, so a duplicate delivery or a restart never posts it twice.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from runbook.record import journal as journals
from runbook.clock import Clock
from runbook.engine.runner import RunResult
from runbook.errors import BackendError, BackendUnavailable, NotConfigured
from runbook.model import events as ev
from runbook.record.redaction import redact_text
from runbook.webhook import left_behind, records
from runbook.webhook.settings import PAGERDUTY_API_TOKEN_ENV, PagerDutyNotes, Secrets
from runbook.webhook.store import IncidentRow, Store

log = logging.getLogger("runbook.webhook")

OUTBOX = """
CREATE TABLE IF NOT EXISTS pagerduty_notes (
  incident TEXT NOT NULL, run TEXT NOT NULL, pd_incident TEXT NOT NULL, content TEXT NOT NULL,
  resolve INTEGER NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, note_id TEXT,
  resolved INTEGER NOT NULL DEFAULT 0, result TEXT, created REAL NOT NULL, updated REAL NOT NULL,
  PRIMARY KEY (incident, run));
CREATE INDEX IF NOT EXISTS pagerduty_notes_state ON pagerduty_notes (state);
"""
# Note states: `pending` (not sent, or PagerDuty said no), `sending` (sent, answer unknown: it may exist,
# so it is looked for before it is sent again), `posted`, `failed` (gave up; journaled).
OPEN_STATES = ("pending", "sending")
PD_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")  # the incident id goes into a URL path
MARKER = "runbook run {run}"  # the note's last line: how a resent note is recognised after a crash
LIST_LIMIT = 12  # findings or actions listed in a note; the rest are counted
GIVEN_UP_SHOWN = 1  # /readyz names the latest given-up note and counts the rest
RETENTION = 7 * 86400.0  # how long a settled note's row is kept (the service passes webhook.dedupe_retention)


class _Retryable(BackendUnavailable):  # private: caught in this module, never raised out of it
    """429, 5xx or a connection error: worth another try. `maybe_sent`: the request may have arrived."""

    def __init__(self, message: str, *, maybe_sent: bool):
        super().__init__(message)
        self.maybe_sent = maybe_sent


class _Permanent(BackendError):
    """Any other refusal (401, 403, 404, 400): trying again would not help."""


# What a 401 or 403 means here, and the fix: every later note would be refused the same way.
TOKEN_REFUSED = (f"the API token is refused: set {PAGERDUTY_API_TOKEN_ENV} to a PagerDuty REST API token "
                 f"that may write notes (a read-only or revoked token cannot), then restart the server")


class NotesApi(Protocol):
    def post_note(self, pd_incident: str, content: str) -> str: ...

    def has_note(self, pd_incident: str, marker: str) -> bool: ...

    def resolve(self, pd_incident: str) -> None: ...

    def close(self) -> None: ...


# -- the note ---------------------------------------------------------------------------------

def pd_incident_of(row: IncidentRow) -> str | None:
    """The PagerDuty incident id of a webhook incident, or None when it did not come from PagerDuty."""
    if row.source != "pagerduty":
        return None
    found = str(row.alert.get("fingerprint") or "")
    return found if PD_ID.fullmatch(found) else None


def _listed(lines: list[str], what: str) -> list[str]:
    shown = lines[:LIST_LIMIT]
    if len(lines) > LIST_LIMIT:
        shown.append(f"- … and {len(lines) - LIST_LIMIT} more {what} (see the journal)")
    return shown or ["- none"]


ENDED_WELL = ("resolved", "proposed")  # any other outcome's note says what it left behind and that a person must look
RESUMED = "before the restart"  # how recovery's skip reason ends: the step was applied by the interrupted run


def compose(row: IncidentRow, result: RunResult, state: Path, *, max_chars: int) -> str:
    """The note: playbook, outcome, key findings, the actions applied or proposed, where the journal and RCA are."""
    findings = [f"- {s.id}: {s.summary}" for s in result.steps if s.kind != "remediation" and s.summary]
    actions = []
    for step in result.steps:
        if step.kind == "remediation" and step.status == "skipped" and step.summary.endswith(RESUMED):
            actions.append(f"- applied {RESUMED}: {step.id} ({step.uses}): {step.summary}")
            continue
        if step.kind != "remediation" or step.status not in ("changed", "proposed", "refused", "failed"):
            continue
        word = {"changed": "applied", "proposed": "waiting for approval"}.get(step.status, step.status)
        line = f"- {word}: {step.id} ({step.uses}): {step.summary}"
        if step.status == "proposed" and "runbook approve" not in step.summary:
            line += f" — approve with `runbook approve {row.id} {step.id}`"
        actions.append(line)
    actions += [f"- rolled back: {a.action} on {a.target}" for a in result.actions if a.rolled_back]
    head = [f"runbook: playbook {result.playbook} ended {result.outcome.upper()}", f"{result.reason}", ""]
    body = ["Key findings:", *_listed(findings, "findings"), "", "Actions:", *_listed(actions, "actions")]
    if result.outcome not in ENDED_WELL:
        body += ["", "The run did not end well.", *left_behind.lines(left_behind.read(state, row.id, result.run))]
    return _bounded(row, result.run, state, head + body, max_chars=max_chars)


def compose_unfinished(row: IncidentRow, run: str, why: str, state: Path, *, max_chars: int) -> str:
    """The note of a run that raised out of the service, or that a restart found interrupted: it did not
    finish; what it changed before (from the journal) and that a person must look."""
    left = left_behind.read(state, row.id, run)
    head = [f"runbook: playbook {left.playbook or row.playbook or '?'} DID NOT FINISH", why, ""]
    findings = [f"- {line}" for line in left.findings]
    body = ["Key findings:", *_listed(findings, "findings"), "", *left_behind.lines(left),
            "Nothing more will be tried for this incident until a person acts."]
    return _bounded(row, run, state, head + body, max_chars=max_chars)


def _bounded(row: IncidentRow, run: str, state: Path, lines: list[str], *, max_chars: int) -> str:
    folder = journals.incident_dir(state, row.id)
    tail = ["", f"Incident journal: {row.id} ({folder / 'journal.jsonl'})",
            f"RCA: `runbook rca {row.id}` writes {folder / 'rca.md'}", MARKER.format(run=run)]
    # Redacted like the journal: a token in a command's output must not travel to PagerDuty.
    text = redact_text("\n".join(lines))
    room = max_chars - len("\n".join(tail)) - 2
    if len(text) > room:
        text = text[:max(0, room - 2)].rstrip() + " …"
    return text + "\n" + "\n".join(tail)


# -- the client -------------------------------------------------------------------------------

_NOT_SENT = ("ConnectError", "ConnectTimeout", "PoolTimeout", "UnsupportedProtocol")
# Any count below -1 makes the library hand back a 429 or 5xx at once (0 keeps its default of retrying 429
# without end, -1 retries for ever): its own backoff sleeps on the wall clock, holds the thread and cannot be
# bounded; ours runs on the service's clock with a limit.
_HAND_BACK = -2


class PagerDutyRest:
    """The `pagerduty` REST API v2 client, with its retries handed to us and its errors sorted for them."""

    def __init__(self, token: str, settings: PagerDutyNotes):
        import ssl

        import pagerduty  # lazily: only a server that posts notes needs it

        verify: Any = ssl.create_default_context(cafile=settings.ca_file) if settings.ca_file else True
        self._pagerduty = pagerduty
        self.client = pagerduty.RestApiV2Client(token, default_from=settings.from_email,
                                                base_url=settings.api_url.rstrip("/"), verify=verify)
        self.client.timeout = settings.timeout
        self.client.max_network_attempts = 0
        self.client.retry = {status: _HAND_BACK for status in (429, 500, 502, 503, 504)}
        # We log each failure with its incident; the library's own lines would say it twice, less clearly.
        self.client.log = logging.getLogger("runbook.webhook.pagerduty_client")
        self.client.log.setLevel(logging.CRITICAL)

    def _call(self, method: str, path: str, what: str, **kw: Any) -> Any:
        try:
            response = self.client.request(method, path, **kw)
        except self._pagerduty.HttpError as exc:  # the library raises a 401 itself
            raise _Permanent(f"{what}: PagerDuty answered {exc.response.status_code}: {TOKEN_REFUSED}")
        except self._pagerduty.Error as exc:
            cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else ""
            raise _Retryable(f"{what}: cannot reach PagerDuty ({cause or exc})", maybe_sent=cause not in _NOT_SENT)
        status = response.status_code
        if response.is_success:
            return response
        detail = _error_detail(response)
        if status == 429 or status >= 500:
            raise _Retryable(f"{what}: PagerDuty answered {status}{detail}", maybe_sent=False)
        if status in (401, 403):
            raise _Permanent(f"{what}: PagerDuty answered {status}{detail}: {TOKEN_REFUSED}")
        raise _Permanent(f"{what}: PagerDuty answered {status}{detail}")

    def post_note(self, pd_incident: str, content: str) -> str:
        response = self._call("POST", f"/incidents/{pd_incident}/notes", f"note on {pd_incident}",
                              json={"note": {"content": content}})
        note = _json(response).get("note")
        return str(note.get("id", "")) if isinstance(note, dict) else ""

    def has_note(self, pd_incident: str, marker: str) -> bool:
        response = self._call("GET", f"/incidents/{pd_incident}/notes", f"notes of {pd_incident}")
        notes = _json(response).get("notes")
        return any(isinstance(n, dict) and marker in str(n.get("content", "")) for n in notes or [])

    def resolve(self, pd_incident: str) -> None:
        self._call("PUT", f"/incidents/{pd_incident}", f"resolving {pd_incident}",
                   json={"incident": {"type": "incident_reference", "status": "resolved"}})

    def close(self) -> None:
        self.client.close()


def _json(response: Any) -> dict[str, Any]:
    try:
        found = response.json()
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _error_detail(response: Any) -> str:
    error = _json(response).get("error")
    message = error.get("message") if isinstance(error, dict) else None
    return f" ({str(message)[:200]})" if message else ""


# -- the outbox and its poster ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Note:
    incident: str
    run: str
    pd_incident: str
    content: str
    resolve: bool
    state: str
    attempts: int
    resolved: bool

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> "Note":
        return cls(row["incident"], row["run"], row["pd_incident"], row["content"], bool(row["resolve"]),
                   row["state"], row["attempts"], bool(row["resolved"]))


class Notes:
    """What the service calls: `owe` and `run_ended` from the worker, `start`/`stop`/`sweep` with the service."""

    def __init__(self, *, store: Store, state: Path, clock: Clock, settings: PagerDutyNotes,
                 api: Callable[[], NotesApi], retention: float = RETENTION):
        self.store, self.state, self.clock, self.settings = store, state, clock, settings
        self.retention = retention
        self._api_factory, self._api = api, None
        self._queue: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._busy = threading.Condition()
        self._waiting: set[tuple[str, str]] = set()
        self._thread: threading.Thread | None = None
        with store.transaction() as db:  # statement by statement: executescript would commit the transaction
            for statement in filter(str.strip, OUTBOX.split(";")):
                db.execute(statement)

    @classmethod
    def configured(cls, *, settings: PagerDutyNotes, secrets: Secrets, store: Store, state: Path,
                   clock: Clock, retention: float = RETENTION) -> "Notes | None":
        """Notes when an API token is set (NotConfigured without the `From` email PagerDuty requires); else None."""
        if not secrets.pagerduty_api:
            return None
        if not settings.from_email:
            raise NotConfigured(f"{PAGERDUTY_API_TOKEN_ENV} is set, but PagerDuty notes need a `From` email: set "
                                f"webhook.pagerduty_notes.from_email to a PagerDuty user's email in the config file "
                                f"(or unset {PAGERDUTY_API_TOKEN_ENV} to post no notes)")
        token = secrets.pagerduty_api
        return cls(store=store, state=state, clock=clock, settings=settings,
                   api=lambda: PagerDutyRest(token, settings), retention=retention)

    # -- from the worker ----------------------------------------------------------------------

    def owe(self, db: sqlite3.Connection, row: IncidentRow, result: RunResult) -> None:
        """Record the note a run owes, in the transaction that records its outcome; never raises into the run."""
        try:
            pd_incident = pd_incident_of(row)
            if pd_incident is None or result.outcome in ("dry_run", "interrupted"):
                return
            content = compose(row, result, self.state, max_chars=self.settings.max_chars)
            at = self.clock.now().timestamp()
            # (incident, run) is the key: the same run's note is never owed twice.
            db.execute("INSERT OR IGNORE INTO pagerduty_notes (incident, run, pd_incident, content, resolve, state, "
                       "created, updated) VALUES (?, ?, ?, ?, ?, 'pending', ?, ?)",
                       (row.id, result.run, pd_incident, content,
                        int(self.settings.resolve and result.outcome == "resolved"), at, at))
        except Exception:  # a note is a courtesy: it must never fail the run that earned it
            log.exception("incident %s: the PagerDuty note could not be recorded", row.id)

    def unfinished(self, row: IncidentRow, run: str, why: str) -> None:
        """Owe and offer the note of a run that did not finish (it raised, or a restart left it to a person):
        what its journal says it changed, and that a person must look. Never raises."""
        try:
            pd_incident = pd_incident_of(row)
            if pd_incident is None:
                return
            content = compose_unfinished(row, run, why, self.state, max_chars=self.settings.max_chars)
            at = self.clock.now().timestamp()
            with self.store.transaction() as db:
                db.execute("INSERT OR IGNORE INTO pagerduty_notes (incident, run, pd_incident, content, resolve, "
                           "state, created, updated) VALUES (?, ?, ?, ?, 0, 'pending', ?, ?)",
                           (row.id, run, pd_incident, content, at, at))
            self._offer((row.id, run))
        except Exception:
            log.exception("incident %s: the PagerDuty note of the unfinished run could not be recorded", row.id)

    def problems(self) -> list[str]:
        """The notes given up within the retention, latest first: shown by /readyz (they do not make it fail:
        the webhooks must keep arriving), each with the reason, so a refused token is seen before the next page."""
        with self.store.transaction() as db:
            rows = db.execute("SELECT incident, pd_incident, result FROM pagerduty_notes WHERE state = 'failed' "
                              "ORDER BY updated DESC LIMIT ?", (GIVEN_UP_SHOWN,)).fetchall()
            count = db.execute("SELECT COUNT(*) FROM pagerduty_notes WHERE state = 'failed'").fetchone()[0]
        if not rows:
            return []
        latest = rows[0]
        return [f"{count} PagerDuty note(s) given up; the latest, for incident {latest['incident']} (PagerDuty "
                f"{latest['pd_incident']}): {latest['result'] or 'no reason recorded'}"]

    def run_ended(self, row: IncidentRow, result: RunResult) -> None:
        """Hand the run's note, once committed, to the poster thread: the worker does not wait for PagerDuty."""
        if pd_incident_of(row) is not None:
            self._offer((row.id, result.run))

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="runbook-webhook-pagerduty-notes", daemon=True)
        self._thread.start()
        self.sweep()

    def stop(self, timeout: float) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)
        if self._api is not None and not (self._thread and self._thread.is_alive()):
            self._api.close()  # still posting: the daemon thread keeps its connection until the process ends

    def sweep(self) -> None:
        """Offer every note still owed (after a restart, or one queued while the poster was busy); forget
        settled ones older than the retention (only an open note can be sent twice, so only those must stay)."""
        cutoff = self.clock.now().timestamp() - self.retention
        with self.store.transaction() as db:
            db.execute("DELETE FROM pagerduty_notes WHERE updated < ? AND (state = 'failed' OR "
                       "(state = 'posted' AND NOT (resolve = 1 AND resolved = 0)))", (cutoff,))
        for note in self.owed():
            self._offer((note.incident, note.run))

    def owed(self) -> list[Note]:
        with self.store.transaction() as db:
            rows = db.execute("SELECT * FROM pagerduty_notes WHERE state IN ('pending', 'sending') OR "
                              "(state = 'posted' AND resolve = 1 AND resolved = 0) ORDER BY created").fetchall()
        return [Note.from_row(r) for r in rows]

    def note(self, incident: str, run: str) -> Note | None:
        with self.store.transaction() as db:
            found = db.execute("SELECT * FROM pagerduty_notes WHERE incident = ? AND run = ?",
                               (incident, run)).fetchone()
        return Note.from_row(found) if found else None

    def wait_idle(self, timeout: float) -> bool:
        """Block until no note is queued or being posted (tests and shutdown); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._busy:
            while self._waiting:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._busy.wait(left)
        return True

    def _offer(self, key: tuple[str, str]) -> None:
        with self._busy:
            if key in self._waiting:
                return
            self._waiting.add(key)
        self._queue.put(key)

    def _loop(self) -> None:
        while True:
            key = self._queue.get()
            if key is None:
                return
            try:
                self._deliver(*key)
            except Exception:
                log.exception("incident %s: posting the PagerDuty note failed unexpectedly", key[0])
            finally:
                with self._busy:
                    self._waiting.discard(key)
                    self._busy.notify_all()

    # -- posting ------------------------------------------------------------------------------

    def _set(self, note: Note, **columns: Any) -> None:
        columns["updated"] = self.clock.now().timestamp()
        names = ", ".join(f"{name} = ?" for name in columns)
        with self.store.transaction() as db:
            db.execute(f"UPDATE pagerduty_notes SET {names} WHERE incident = ? AND run = ?",
                       (*columns.values(), note.incident, note.run))

    def _journal(self, about: Note, message: str, **data: Any) -> None:
        try:
            records.write(self.state, about.incident, ev.NOTE, at=self.clock.now(),
                          data={"message": message, "pagerduty": {"incident": about.pd_incident, "run": about.run,
                                                                  **data}})
        except Exception:
            log.exception("incident %s: cannot journal the PagerDuty note's fate: %s", about.incident, message)

    def _client(self) -> NotesApi:
        if self._api is None:
            self._api = self._api_factory()
        return self._api

    def _retrying(self, note: Note, what: str, attempt: Callable[[], Any],
                  on_failure: Callable[[_Retryable], None] = lambda exc: None) -> Any:
        """`attempt()` until it succeeds, with doubling waits on the clock; _Permanent or the last _Retryable raise."""
        wait = self.settings.backoff
        for n in range(1, self.settings.attempts + 1):
            try:
                return attempt()
            except _Retryable as exc:
                on_failure(exc)
                if n == self.settings.attempts:
                    raise
                log.warning("incident %s: %s (attempt %d of %d); again in %gs", note.incident, exc, n,
                            self.settings.attempts, wait)
                self.clock.sleep(wait)
                wait = min(self.settings.max_backoff, wait * 2)
        raise AssertionError("unreachable")  # attempts >= 1

    def _deliver(self, incident: str, run: str) -> None:
        note = self.note(incident, run)
        if note is None:
            return
        if note.state in OPEN_STATES:
            note = self._post(note)
            if note is None:
                return
        if note.state == "posted" and note.resolve and not note.resolved:
            self._resolve(note)

    def _post(self, note: Note) -> Note | None:
        api = self._client()
        unknown = [note.state == "sending"]  # a crash or a lost answer: the note may already be there

        def attempt() -> str | None:
            if unknown[0] and api.has_note(note.pd_incident, MARKER.format(run=note.run)):
                return None  # posted before; posting again would say it twice
            self._set(note, state="sending", attempts=note.attempts + 1)
            return api.post_note(note.pd_incident, note.content)

        def failed(exc: _Retryable) -> None:
            unknown[0] = unknown[0] or exc.maybe_sent
            self._set(note, state="sending" if unknown[0] else "pending")

        try:
            note_id = self._retrying(note, f"note on {note.pd_incident}", attempt, failed)
        except (_Retryable, _Permanent) as exc:
            self._set(note, state="failed", result=str(exc)[:1000])
            log.error("incident %s: no note on PagerDuty incident %s: %s", note.incident, note.pd_incident, exc)
            self._journal(note, f"could not post the outcome to PagerDuty incident {note.pd_incident}: {exc}",
                          state="failed")
            return None
        self._set(note, state="posted", note_id=note_id or "", result=None)
        self._journal(note, f"posted the outcome as a note on PagerDuty incident {note.pd_incident}",
                      state="posted", note=note_id)
        return dataclasses.replace(note, state="posted")

    def _resolve(self, note: Note) -> None:
        api = self._client()
        try:
            self._retrying(note, f"resolving {note.pd_incident}", lambda: api.resolve(note.pd_incident))
        except (_Retryable, _Permanent) as exc:
            self._set(note, resolved=-1, result=str(exc)[:1000])  # -1: given up; not tried again
            log.error("incident %s: PagerDuty incident %s not resolved: %s", note.incident, note.pd_incident, exc)
            self._journal(note, f"could not resolve PagerDuty incident {note.pd_incident}: {exc}", state="unresolved")
            return
        self._set(note, resolved=1)
        self._journal(note, f"resolved PagerDuty incident {note.pd_incident}: the run resolved it", state="resolved")

