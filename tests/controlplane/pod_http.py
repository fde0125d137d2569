"""The pods' HTTP ports on their own addresses (kwok hands them out of 127.244.0.0/16, on loopback),
answering a GET as the scenario's twin pod does: `http.probe` reaches them as it reaches a pod.

An answer is sent as it is; a refusal resets the connection; a hang holds it unanswered until the
client gives up, and the scenario's clock moves by as long as the client waited (as the drill's does).
"""

from __future__ import annotations

import http.server
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

HOLD_AT_MOST = 300.0  # seconds: http.probe's longest timeout


class PodPorts:
    """One small HTTP server per (pod address, port); each GET is answered as the twin pod answers it."""

    def __init__(self, lock: threading.RLock):
        self.lock = lock
        self.world: Any = None
        self.twin_address: dict[str, str] = {}  # a real pod's IP -> its twin's IP in the world
        self.servers: list[http.server.ThreadingHTTPServer] = []

    def open(self, world: Any, twin_address: dict[str, str], ports: Iterable[int]) -> None:
        """Listen on every real pod address at `ports`, answering as the world's twin pods do."""
        self.close()
        with self.lock:
            self.world, self.twin_address = world, dict(twin_address)
        for address in sorted(twin_address):
            for port in sorted(set(ports)):
                try:
                    server = http.server.ThreadingHTTPServer((address, port), self._handler())
                except OSError as exc:
                    self.close()
                    raise AssertionError(f"cannot listen on the pod address {address}:{port} ({exc}); is something "
                                         f"else listening on 0.0.0.0:{port}?") from exc
                server.daemon_threads = True
                threading.Thread(target=server.serve_forever, daemon=True, name=f"pod-{address}:{port}").start()
                self.servers.append(server)

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()
        self.servers = []
        with self.lock:
            self.world, self.twin_address = None, {}

    def _ask(self, address: str, port: int, path: str) -> Any:
        with self.lock:
            twin = self.twin_address.get(address)
            if self.world is None or twin is None:
                return None
            return self.world.http.answer(f"http://{twin}:{port}{path}")

    def _waited(self, seconds: float) -> None:
        with self.lock:
            if self.world is not None:
                self.world.state.wait(seconds)

    def _handler(self) -> Callable[..., http.server.BaseHTTPRequestHandler]:
        ports = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802 - the http.server interface
                address, port = self.connection.getsockname()[:2]
                answer = ports._ask(address, port, self.path.split("?", 1)[0])
                if answer is None or (answer.response is None and not answer.hangs):
                    self._reset()
                elif answer.hangs:
                    ports._waited(self._hold())
                    self.close_connection = True
                else:
                    body = answer.response.body.encode()
                    self.send_response(answer.response.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            def _hold(self) -> float:
                """Answer nothing until the client closes the connection; how long that took."""
                started = time.monotonic()
                while time.monotonic() - started < HOLD_AT_MOST:
                    readable, _, _ = select.select([self.connection], [], [], 1.0)
                    if readable and not self.connection.recv(4096):
                        break
                return time.monotonic() - started

            def _reset(self) -> None:
                # SO_LINGER 0: the close sends a RST, as a port nobody listens on answers a connect.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True

            def log_message(self, *args):
                pass

        return Handler
