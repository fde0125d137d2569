"""Exec in a container over the WebSocket channel protocol, with a hard deadline.

Each exec is one WebSocket (websocket-client) on one TLS context built once from the client's
configuration, with the same headers, proxy and TLS settings as the official client's `stream()`;
it runs in a worker thread that the deadline can abandon (a hung handshake has no timeout of its
own). No exit status on the error channel means the answer is incomplete: that is an error, never
output passed off as complete.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import ssl
import threading
import time
from collections.abc import Sequence
from typing import Any

from runbook.backends.base import CommandResult
from runbook.backends.kubernetes.objects import exit_status
from runbook.errors import BackendUnavailable, CommandFailed, NotFound, RunbookError

MAX_OUTPUT = 4 * 1024 * 1024  # characters kept per stream; the rest is counted as truncated
GRACE = 0.5  # seconds past the deadline for the worker to notice it and hang up
# The API server's 400 for a container the pod does not have (not one that is only not running yet).
_NO_SUCH_CONTAINER = re.compile(r"^container \S+ is not valid for pod ")
# What the official client offers: v5 adds a close signal for stdin (unused here); output reads the same.
CHANNEL_PROTOCOLS = "v5.channel.k8s.io,v4.channel.k8s.io"
STDOUT, STDERR, STATUS = 1, 2, 3


@dataclasses.dataclass
class _Run:
    stdout: list[str] = dataclasses.field(default_factory=list)
    stderr: list[str] = dataclasses.field(default_factory=list)
    sizes: list[int] = dataclasses.field(default_factory=lambda: [0, 0])
    truncated: bool = False
    status: str = ""
    socket: Any = None
    connected: bool = False  # the upgrade was answered: a later failure is a broken stream, not an unreachable server
    timed_out: bool = False
    error: BaseException | None = None
    status_bytes: list[bytes] = dataclasses.field(default_factory=list)

    def keep(self, index: int, data: bytes) -> None:
        if not data:
            return
        room = MAX_OUTPUT - self.sizes[index]
        if room < len(data):
            self.truncated = True
            data = data[:max(room, 0)]
        (self.stdout if index == 0 else self.stderr).append(data)
        self.sizes[index] += len(data)

    def frame(self, data: bytes) -> None:
        """One channel frame: its first byte names the channel (1 stdout, 2 stderr, 3 status)."""
        if len(data) < 2:
            return  # the server's empty frame opening each channel
        channel, payload = data[0], data[1:]
        if channel == STDOUT:
            self.keep(0, payload)
        elif channel == STDERR:
            self.keep(1, payload)
        elif channel == STATUS:
            self.status_bytes.append(payload[:65536])

    @staticmethod
    def text(parts: list[bytes]) -> str:
        # Decoded once, at the end: a character split across two frames stays whole.
        return b"".join(parts).decode("utf-8", errors="replace")


def _handshake(exc: BaseException) -> tuple[int | None, str]:
    """(HTTP status, message) of a refused WebSocket upgrade, from the error or its text."""
    code = getattr(exc, "status_code", None)
    if isinstance(code, int):
        message = ""
        body = getattr(exc, "resp_body", None)
        if body:
            import json

            try:
                message = json.loads(body.decode("utf-8", "replace") if isinstance(body, bytes) else body).get("message", "")
            except (ValueError, AttributeError):
                message = ""
        return code, message or re.sub(r"\s+", " ", str(exc))[:300]
    text = str(getattr(exc, "reason", "") or exc)
    status = re.search(r"Handshake status (\d{3})", text)
    message = ""
    # websocket-client appends the refused upgrade's body after its headers, as bytes (b'…') or text.
    body = re.search(r"-\+-\+- (b'.*'|\{\"kind\".*\})\s*$", text, re.S)
    if body:
        try:
            import json

            raw = body.group(1)
            data = ast.literal_eval(raw).decode("utf-8", "replace") if raw.startswith("b'") else raw
            message = json.loads(data).get("message", "")
        except (ValueError, SyntaxError, AttributeError):
            message = ""
    return (int(status.group(1)) if status else None), message or re.sub(r"\s+", " ", text)[:300]


def _hang_up(socket: Any) -> None:
    """Drop the exec WebSocket's connection at once.

    Not a closing handshake: after the server's close frame (answered when it was read) there is
    nothing left to say, and a deadline's hang-up must not wait for a server that is not answering.
    """
    try:
        socket.shutdown()
    except Exception:  # noqa: BLE001 - the connection may already be gone
        pass


class _ReadAheadTLSSocket(ssl.SSLSocket):
    """A TLS socket whose `recv` reads what the connection already holds and hands it out from there.

    websocket-client reads the upgrade's answer one byte per `recv`: about 230 TLS reads per exec,
    each letting go of the GIL and taking it back, which a fan-out of 16 execs turns into a queue.
    One TLS read (up to a record) serves them all; frames are read the same way.
    """

    _ahead = b""

    def recv(self, buflen: int = 1024, flags: int = 0) -> bytes:
        if flags:
            return super().recv(buflen, flags)
        if not self._ahead:
            data = super().recv(max(buflen, READ_AHEAD))
            if len(data) <= buflen:
                return data
            self._ahead = data
        data, self._ahead = self._ahead[:buflen], self._ahead[buflen:]
        return data

    def pending(self) -> int:
        return len(self._ahead) + super().pending()


READ_AHEAD = 16 * 1024  # one TLS record at most


class Executor:
    """Runs each exec on a WebSocket of its own (concurrent execs of one step's fan-out never share
    one), all on one TLS context: building a context and loading its CA per exec cost more CPU than
    the exec's own frames."""

    def __init__(self, configuration: Any, *, host: str):
        self._configuration = configuration
        self._host = host
        self._tls: ssl.SSLContext | None = None
        self._tls_lock = threading.Lock()

    def _context(self) -> ssl.SSLContext:
        """The TLS settings the official client's `stream()` would use, as one context."""
        with self._tls_lock:
            if self._tls is None:
                conf = self._configuration
                if conf.verify_ssl:
                    import certifi

                    context = ssl.create_default_context(cafile=conf.ssl_ca_cert or certifi.where())
                    if conf.assert_hostname is not None:
                        context.check_hostname = bool(conf.assert_hostname)
                else:
                    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                    context.check_hostname = False
                    context.verify_mode = ssl.CERT_NONE
                if conf.cert_file:
                    context.load_cert_chain(conf.cert_file, conf.key_file)
                context.sslsocket_class = _ReadAheadTLSSocket
                self._tls = context
            return self._tls

    def _connect_options(self, url: str, timeout: float) -> dict[str, Any]:
        from kubernetes.stream.ws_client import websocket_proxycare

        conf = self._configuration
        # Read per exec: the kubeconfig's refresh hook renews an expiring token (an exec plugin's).
        header = [f"{auth['key']}: {auth['value']}" for auth in conf.auth_settings().values()
                  if auth.get("in") == "header" and auth.get("value")]
        header.append(f"sec-websocket-protocol: {CHANNEL_PROTOCOLS}")
        options: dict[str, Any] = {"header": header, "timeout": timeout}
        if conf.proxy or conf.proxy_headers:
            options = websocket_proxycare(options, conf, url, None)
        return options

    def _tls_options(self) -> dict[str, Any]:
        sslopt: dict[str, Any] = {"context": self._context()}
        if self._configuration.tls_server_name:
            sslopt["server_hostname"] = self._configuration.tls_server_name
        return sslopt

    def _url(self, namespace: str, pod: str, container: str, argv: list[str]) -> str:
        from urllib.parse import quote, urlencode

        from kubernetes.stream.ws_client import get_websocket_url

        query = [("command", arg) for arg in argv] + [("container", container), ("stderr", "true"),
                                                      ("stdin", "false"), ("stdout", "true"), ("tty", "false")]
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}/exec"
        return get_websocket_url(self._host.rstrip("/") + path + "?" + urlencode(query))

    def run(self, namespace: str, pod: str, container: str, argv: Sequence[str], *, timeout: float) -> CommandResult:
        where = f"{namespace}/{pod}/{container}"
        run = _Run()
        deadline = time.monotonic() + timeout
        worker = threading.Thread(target=self._stream, args=(namespace, pod, container, list(argv), deadline, run),
                                  name=f"exec {where}", daemon=True)
        worker.start()
        worker.join(timeout + GRACE)
        if worker.is_alive():
            # Stuck in the handshake or a read: hang up if connected; the worker cleans up when it wakes.
            run.timed_out = True
            if run.socket is not None:
                _hang_up(run.socket)
        return self._result(run, where, " ".join(argv), timeout)

    def _stream(self, namespace: str, pod: str, container: str, argv: list[str], deadline: float, run: _Run) -> None:
        import websocket

        socket = None
        try:
            url = self._url(namespace, pod, container, argv)
            socket = websocket.WebSocket(sslopt=self._tls_options(), skip_utf8_validation=True)
            run.socket = socket
            socket.connect(url, **self._connect_options(url, max(deadline - time.monotonic(), 0.001)))
            run.connected = True
            while socket.connected:
                left = deadline - time.monotonic()
                if left <= 0:
                    run.timed_out = True
                    break
                socket.settimeout(min(left, 0.5))
                try:
                    opcode, data = socket.recv_data(control_frame=True)
                except websocket.WebSocketTimeoutException:
                    continue
                except websocket.WebSocketConnectionClosedException:
                    break
                if opcode == websocket.ABNF.OPCODE_CLOSE:
                    break
                if opcode in (websocket.ABNF.OPCODE_BINARY, websocket.ABNF.OPCODE_TEXT):
                    run.frame(data if isinstance(data, bytes) else str(data).encode())
        except BaseException as exc:  # noqa: BLE001 - reported to the caller's thread
            if isinstance(exc, websocket.WebSocketTimeoutException):
                run.timed_out = True  # raised by reads only: connected, and the upgrade's answer did not come in time
            else:
                run.error = exc
        finally:
            run.status = _Run.text(run.status_bytes)
            if socket is not None:
                _hang_up(socket)

    def _result(self, run: _Run, where: str, shown: str, timeout: float) -> CommandResult:
        if run.timed_out:
            got = sum(run.sizes)
            raise CommandFailed(f"`{shown}` in {where} did not finish within {timeout:g}s (a hung process or GPU?); "
                                f"its partial output ({got} characters) is not used")
        if run.error is not None:
            raise self._error(run.error, where, shown, connected=run.connected) from None
        if not run.status:
            raise CommandFailed(f"the exec stream of `{shown}` in {where} closed before the command's exit status "
                                "arrived (dropped connection?); its output may be incomplete and is not used")
        code, why = exit_status(run.status)
        if code is None:
            raise CommandFailed(f"`{shown}` could not run in {where}: {why}")
        return CommandResult(_Run.text(run.stdout), _Run.text(run.stderr), code, run.truncated)

    def _error(self, exc: BaseException, where: str, shown: str, *, connected: bool) -> RunbookError:
        status, message = _handshake(exc)
        if status in (401, 403):
            said = message.strip().rstrip(":").rstrip()
            if status == 403 and said.endswith("forbidden"):
                # A real apiserver (1.35+) refusing the upgrade's second check, `create`, gives no reason.
                said += " (the API server gave no reason: since Kubernetes 1.35 a WebSocket exec needs `create` " \
                        "on pods/exec as well as `get`)"
            return BackendUnavailable(f"exec `{shown}` in {where}: {said}; runbook's identity needs `get` and "
                                      "`create` on pods/exec (see deploy/rbac.yaml)")
        if status == 404:
            return NotFound(f"exec `{shown}` in {where}: {message}")
        if status == 400 and _NO_SUCH_CONTAINER.search(message):
            return NotFound(f"exec `{shown}` in {where}: {message}")
        if status is not None:
            return CommandFailed(f"exec `{shown}` in {where} was refused (HTTP {status}): {message}")
        if not connected:
            return BackendUnavailable(f"exec `{shown}` in {where}: cannot reach the Kubernetes API at {self._host}: "
                                      f"{message}")
        return CommandFailed(f"the exec stream of `{shown}` in {where} broke: {message}; its output is not used")

    def close(self) -> None:
        """Nothing to release: each exec closes its own client."""
