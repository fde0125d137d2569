"""Misbehaving Prometheus stand-ins on loopback: one that never answers, one that errs, and a
proxy to the real server that stops (closes its port) after a number of answers.

Each is a context manager; leaving it closes its socket and joins its thread.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import urllib.request
from typing import Any


class Hanging:
    """Accepts connections (the kernel's backlog does) and never answers a byte."""

    def __enter__(self) -> "Hanging":
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.socket.close()


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


class _Base:
    """A threaded HTTP server whose handler calls `self.answer(handler)`."""

    def __enter__(self):
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                outer.requests.append({"path": self.path, "headers": dict(self.headers)})
                outer.answer(self)

            do_POST = do_GET

            def log_message(self, *args: Any) -> None:  # keep the test output clean
                pass

        self.requests: list[dict[str, Any]] = []
        self.server = _Server(("127.0.0.1", 0), Handler)
        scheme = "http"
        if getattr(self, "tls", None) is not None:  # an ssl.SSLContext: serve HTTPS instead
            self.server.socket = self.tls.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.thread.is_alive():
            self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def answer(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        raise NotImplementedError


def _send(handler: http.server.BaseHTTPRequestHandler, status: int, body: bytes,
          content_type: str = "application/json") -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class Erring(_Base):
    """Answers every request with `status` and `body` (Prometheus' JSON error shape by default)."""

    def __init__(self, status: int, error: str = "", body: bytes | None = None, content_type: str = "application/json",
                 tls: Any = None):
        self.status, self.content_type, self.tls = status, content_type, tls
        self.body = body if body is not None else json.dumps(
            {"status": "error", "errorType": "internal", "error": error}).encode()

    def answer(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        _send(handler, self.status, self.body, self.content_type)


class StoppingProxy(_Base):
    """Forwards the first `answers` requests to `target`, then closes its port for good."""

    def __init__(self, target: str, answers: int):
        self.target, self.left = target, answers
        self.lock = threading.Lock()

    def answer(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        with self.lock:
            if self.left <= 0:  # already "stopped": a request racing the close gets no answer either
                handler.close_connection = True
                return
            self.left -= 1
            last = self.left == 0
        with urllib.request.urlopen(self.target + handler.path, timeout=10) as upstream:
            _send(handler, upstream.status, upstream.read())
        if last:  # as if Prometheus were stopped right after this answer
            threading.Thread(target=self.stop, daemon=True).start()


class CountingProxy(_Base):
    """Forwards every request to `target` asking Prometheus for its query stats (`stats=all`), and keeps
    per request its endpoint (`query` or `query_range`) and the samples Prometheus evaluated for it."""

    def __init__(self, target: str):
        self.target = target
        self.lock = threading.Lock()
        self.counted: list[tuple[str, int]] = []

    def answer(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        path = handler.path + ("&" if "?" in handler.path else "?") + "stats=all"
        with urllib.request.urlopen(self.target + path, timeout=10) as upstream:
            status, body = upstream.status, upstream.read()
        endpoint = handler.path.split("?", 1)[0].rsplit("/", 1)[-1]
        if endpoint in ("query", "query_range"):
            stats = (json.loads(body).get("data") or {}).get("stats") or {}
            with self.lock:
                self.counted.append((endpoint, int((stats.get("samples") or {}).get("totalQueryableSamples", 0))))
        _send(handler, status, body)

    def samples(self, endpoint: str | None = None) -> int:
        return sum(n for kind, n in self.counted if endpoint in (None, kind))

    def asked(self, endpoint: str) -> int:
        return sum(kind == endpoint for kind, _ in self.counted)
