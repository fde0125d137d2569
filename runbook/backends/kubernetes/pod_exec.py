"""Exec in a container over the WebSocket channel protocol, with a hard deadline.

The official client's `stream()` swaps its ApiClient's transport while it runs, so each exec gets an
ApiClient of its own, and runs in a worker thread that the deadline can abandon (a hung handshake
has no timeout of its own). No exit status on the error channel means the answer is incomplete:
that is an error, never output passed off as complete.
"""

from __future__ import annotations

import ast
import dataclasses
import re
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


@dataclasses.dataclass
class _Run:
    stdout: list[str] = dataclasses.field(default_factory=list)
    stderr: list[str] = dataclasses.field(default_factory=list)
    sizes: list[int] = dataclasses.field(default_factory=lambda: [0, 0])
    truncated: bool = False
    status: str = ""
    socket: Any = None
    timed_out: bool = False
    error: BaseException | None = None

    def keep(self, index: int, text: str) -> None:
        if not text:
            return
        room = MAX_OUTPUT - self.sizes[index]
        if room < len(text):
            self.truncated = True
            text = text[:max(room, 0)]
        (self.stdout if index == 0 else self.stderr).append(text)
        self.sizes[index] += len(text)


def _handshake(exc: BaseException) -> tuple[int | None, str]:
    """(HTTP status, message) of a refused WebSocket upgrade, from the client's error text."""
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
    """Close the exec WebSocket and its TCP connection.

    After the server's close frame, websocket-client's `close()` returns early without closing the
    socket, so the connection is shut down explicitly too.
    """
    try:
        socket.close()
    except Exception:  # noqa: BLE001 - the connection may already be gone
        pass
    connection = getattr(socket, "sock", None)
    if connection is not None:
        connection.shutdown()


class Executor:
    """Runs each exec on an ApiClient of its own, so concurrent execs (one step fans out over
    pods) and REST calls never share the client whose transport `stream()` swaps."""

    def __init__(self, configuration: Any, *, host: str):
        self._configuration = configuration
        self._host = host

    def run(self, namespace: str, pod: str, container: str, argv: Sequence[str], *, timeout: float) -> CommandResult:
        from kubernetes import client

        where = f"{namespace}/{pod}/{container}"
        run = _Run()
        api_client = client.ApiClient(self._configuration)
        deadline = time.monotonic() + timeout
        worker = threading.Thread(target=self._stream, args=(api_client, namespace, pod, container, list(argv), deadline,
                                                             run), name=f"exec {where}", daemon=True)
        worker.start()
        worker.join(timeout + GRACE)
        if worker.is_alive():
            # Stuck in the handshake or a read: hang up if connected; the worker cleans up when it wakes.
            run.timed_out = True
            if run.socket is not None:
                _hang_up(run.socket)
        return self._result(run, where, " ".join(argv), timeout)

    def _stream(self, api_client: Any, namespace: str, pod: str, container: str, argv: list[str], deadline: float,
                run: _Run) -> None:
        from kubernetes import client
        from kubernetes.stream import stream

        socket = None
        try:
            socket = stream(client.CoreV1Api(api_client).connect_get_namespaced_pod_exec, pod, namespace,
                            command=argv, container=container, stdin=False, stdout=True, stderr=True, tty=False,
                            _preload_content=False)
            run.socket = socket
            while socket.is_open():
                left = deadline - time.monotonic()
                if left <= 0:
                    run.timed_out = True
                    break
                socket.update(timeout=min(left, 0.5))
                self._drain(socket, run)
            self._drain(socket, run)
        except BaseException as exc:  # noqa: BLE001 - reported to the caller's thread
            run.error = exc
        finally:
            if socket is not None:
                _hang_up(socket)
            api_client.close()

    @staticmethod
    def _drain(socket: Any, run: _Run) -> None:
        run.keep(0, socket.read_channel(1))
        run.keep(1, socket.read_channel(2))
        run.status += socket.read_channel(3)
        socket.read_all()  # the client's interleaved copy of stdout+stderr: already taken above

    def _result(self, run: _Run, where: str, shown: str, timeout: float) -> CommandResult:
        if run.timed_out:
            got = sum(run.sizes)
            raise CommandFailed(f"`{shown}` in {where} did not finish within {timeout:g}s (a hung process or GPU?); "
                                f"its partial output ({got} characters) is not used")
        if run.error is not None:
            raise self._error(run.error, where, shown, connected=run.socket is not None) from None
        if not run.status:
            raise CommandFailed(f"the exec stream of `{shown}` in {where} closed before the command's exit status "
                                "arrived (dropped connection?); its output may be incomplete and is not used")
        code, why = exit_status(run.status)
        if code is None:
            raise CommandFailed(f"`{shown}` could not run in {where}: {why}")
        return CommandResult("".join(run.stdout), "".join(run.stderr), code, run.truncated)

    def _error(self, exc: BaseException, where: str, shown: str, *, connected: bool) -> RunbookError:
        status, message = _handshake(exc)
        if status in (401, 403):
            return BackendUnavailable(f"exec `{shown}` in {where}: {message}; runbook's identity needs `get` and "
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
