"""A paramiko SSH server on loopback that logs a client in, then stops answering at a chosen point.

The faults a real sshd cannot be made to show on demand: no answer to authentication, to a channel
open or to an exec request, or a granted exec that never sends output, EOF or an exit status.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paramiko

HANG_POINTS = ("authentication", "channel open", "exec request", "output")
USER = "oncall"


class _Interface(paramiko.ServerInterface):
    """Answers like a server that works, except at `hang`, where it waits until the test ends."""

    def __init__(self, server: SilentServer):
        self.server = server

    def _maybe_hang(self, point: str) -> None:
        if self.server.hang == point:
            self.server.hung.set()
            self.server.released.wait()  # blocks this connection's transport thread: nothing more is answered

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        self._maybe_hang("authentication")
        if username == USER and key.get_base64() == self.server.client_key.get_base64():
            return paramiko.AUTH_SUCCESSFUL
        return paramiko.AUTH_FAILED

    def check_channel_request(self, kind: str, chanid: int) -> int:
        self._maybe_hang("channel open")
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        self.server.commands.append(command.decode("utf-8", "replace"))
        self._maybe_hang("exec request")
        if self.server.hang == "output":
            self.server.hung.set()
        return True  # "output": granted, and then the channel never carries a byte, an EOF or a status


@dataclasses.dataclass
class SilentServer:
    hang: str
    host_key: paramiko.PKey
    client_key: paramiko.PKey
    client_key_file: Path
    known_hosts: Path
    port: int = 0
    commands: list[str] = dataclasses.field(default_factory=list)
    connections: int = 0
    hung: threading.Event = dataclasses.field(default_factory=threading.Event)
    released: threading.Event = dataclasses.field(default_factory=threading.Event)

    def section(self, **changes: Any) -> dict[str, Any]:
        """A `nodes:` section reaching this server as `gpu-node-2`; generous per-phase timeouts, so
        only the command's own deadline can end a hang."""
        generous = {"connect": 60, "banner": 60, "auth": 60, "channel": 60, "keepalive": 0}
        return {"user": USER, "key_file": str(self.client_key_file), "known_hosts": str(self.known_hosts),
                "ssh_config": False, "remote_timeout": False, "timeouts": generous,
                "inventory": {"gpu-node-2": {"host": "127.0.0.1", "port": self.port}}, **changes}


@contextlib.contextmanager
def serve(directory: Path, hang: str) -> Iterator[SilentServer]:
    if hang not in HANG_POINTS:
        raise ValueError(f"hang must be one of {HANG_POINTS}, not {hang!r}")
    client_key = paramiko.ECDSAKey.generate()
    key_file = directory / "client_key"
    client_key.write_private_key_file(str(key_file))
    server = SilentServer(hang=hang, host_key=paramiko.ECDSAKey.generate(), client_key=client_key,
                          client_key_file=key_file, known_hosts=directory / "known_hosts")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.1)
    server.port = listener.getsockname()[1]
    server.known_hosts.write_text(f"[127.0.0.1]:{server.port} {server.host_key.get_name()} "
                                  f"{server.host_key.get_base64()}\n")
    transports: list[paramiko.Transport] = []
    stopping = threading.Event()

    def accept() -> None:
        while not stopping.is_set():
            try:
                sock, _ = listener.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            transport = paramiko.Transport(sock)
            transport.add_server_key(server.host_key)
            transports.append(transport)
            server.connections += 1
            transport.start_server(event=threading.Event(), server=_Interface(server))

    thread = threading.Thread(target=accept, name="silent-sshd", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.released.set()
        stopping.set()
        thread.join(5)
        listener.close()
        for transport in transports:
            transport.close()
