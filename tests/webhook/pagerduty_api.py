"""A stand-in for api.pagerduty.com over real HTTPS on 127.0.0.1, for the PagerDuty note tests.

It checks each request as the REST API v2 documents it, stores notes in memory, and answers scripted
statuses first (`script[(method, kind)]`); `lose_answer` stores a note and never answers.
"""

from __future__ import annotations

import http.server
import json
import ssl
import threading
from pathlib import Path

from runbook.webhook.settings import PagerDutyNotes
from tests.standin.apiserver.tls import make_certificates

TOKEN = "y_NbAkKc66ryYTWUXYEu"
FROM = "oncall-bot@example.com"
ACCEPT = "application/vnd.pagerduty+json;version=2"


class FakePagerDuty:
    """Notes and incidents in memory; `script[(method, kind)]` lists the statuses to answer first."""

    def __init__(self, folder: Path):
        # A throwaway CA and a certificate for 127.0.0.1: the client verifies TLS as it would PagerDuty's.
        self.cert, server_cert, key = make_certificates(folder / "tls")
        self.notes: dict[str, list[dict]] = {}
        self.resolved: list[str] = []
        self.requests: list[tuple[str, str]] = []
        self.violations: list[str] = []
        self.script: dict[tuple[str, str], list[int]] = {}
        self.lose_answer = threading.Event()  # store the next note, then answer nothing until released
        self.release = threading.Event()
        self._lock = threading.Lock()
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                fake._serve(self, "GET")

            def do_POST(self):
                fake._serve(self, "POST")

            def do_PUT(self):
                fake._serve(self, "PUT")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(server_cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def settings(self, **changes) -> PagerDutyNotes:
        return PagerDutyNotes(**{"from_email": FROM, "api_url": self.url, "ca_file": str(self.cert), **changes})

    def posted(self, incident: str) -> list[dict]:
        return [n for n in self.notes.get(incident, []) if n["content"]]

    def _check(self, handler, method: str, body: bytes):
        # What the REST API v2 documents for every call: the token, the version in Accept, JSON bodies, From.
        headers = handler.headers
        want = {"Authorization": f"Token token={TOKEN}", "Accept": ACCEPT}
        if method in ("POST", "PUT"):
            want.update({"Content-Type": "application/json", "From": FROM})
        for name, value in want.items():
            if headers.get(name) != value:
                self.violations.append(f"{method} {handler.path}: {name} is {headers.get(name)!r}, not {value!r}")
        if method in ("POST", "PUT"):
            try:
                return json.loads(body)
            except ValueError:
                self.violations.append(f"{method} {handler.path}: the body is not JSON")
        return None

    def _serve(self, handler, method: str):
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        parts = handler.path.strip("/").split("/")
        kind = "notes" if len(parts) == 3 and parts[0] == "incidents" and parts[2] == "notes" else \
            "incident" if len(parts) == 2 and parts[0] == "incidents" else "other"
        with self._lock:
            self.requests.append((method, handler.path))
            doc = self._check(handler, method, body)
            scripted = self.script.get((method, kind)) or []
            status = scripted.pop(0) if scripted else None
        if status is not None:
            return self._answer(handler, status, {"error": {"message": "scripted", "code": 2020}})
        if kind == "notes" and method == "POST":
            note = doc.get("note") if isinstance(doc, dict) else None
            if set(doc or {}) != {"note"} or not isinstance(note, dict) or set(note) != {"content"} \
                    or not isinstance(note["content"], str):
                self.violations.append(f"POST {handler.path}: the body is not {{'note': {{'content': str}}}}: {doc}")
                return self._answer(handler, 400, {"error": {"message": "Invalid Input Provided", "code": 2001}})
            with self._lock:
                stored = {"id": f"PN{len(self.requests):05d}", "content": note["content"],
                          "created_at": "2026-03-14T03:20:00Z",
                          "user": {"id": "PXPGF42", "type": "user_reference", "summary": FROM}}
                self.notes.setdefault(parts[1], []).append(stored)
            if self.lose_answer.is_set():
                self.lose_answer.clear()
                self.release.wait(15)  # the client's read timeout ends it first
                return
            return self._answer(handler, 201, {"note": stored})
        if kind == "notes" and method == "GET":
            return self._answer(handler, 200, {"notes": list(self.notes.get(parts[1], []))})
        if kind == "incident" and method == "PUT":
            incident = doc.get("incident") if isinstance(doc, dict) else None
            if incident != {"type": "incident_reference", "status": "resolved"}:
                self.violations.append(f"PUT {handler.path}: unexpected body {doc}")
                return self._answer(handler, 400, {"error": {"message": "Invalid Input Provided", "code": 2001}})
            self.resolved.append(parts[1])
            return self._answer(handler, 200, {"incident": {"id": parts[1], "type": "incident", "status": "resolved"}})
        self.violations.append(f"unexpected {method} {handler.path}")
        return self._answer(handler, 404, {"error": {"message": "Not Found", "code": 2100}})

    @staticmethod
    def _answer(handler, status: int, doc: dict):
        raw = json.dumps(doc).encode()
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(raw)))
            handler.end_headers()
            handler.wfile.write(raw)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass
