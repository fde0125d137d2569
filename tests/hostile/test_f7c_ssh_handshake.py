"""Finding 7 of issue 13: a port that does not complete an SSH handshake is reported as what it did.

paramiko's own words ("No existing session", "Error reading SSH protocol banner") name neither the
silence nor the hang-up; a raw loopback socket plays each misbehaving server.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import paramiko
import pytest

from runbook.backends.ssh.nodes import SshNodes
from runbook.errors import BackendUnavailable


@contextlib.contextmanager
def misbehaving_server(mode: str) -> Iterator[int]:
    """A loopback listener that, per connection: says nothing (`silent`), hangs up at once (`hangup`),
    or sends an SSH banner and then nothing (`banner-only`)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(0.1)
    stopping = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        while not stopping.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            if mode == "hangup":
                conn.close()
                continue
            if mode == "banner-only":
                conn.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
            held.append(conn)  # kept open and silent until the test ends

    thread = threading.Thread(target=accept, name=f"f7c-{mode}", daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stopping.set()
        thread.join(5)
        listener.close()
        for conn in held:
            conn.close()


def failure(tmp_path, port: int, *, connect: float, banner: float) -> str:
    key = paramiko.ECDSAKey.generate()
    key.write_private_key_file(str(tmp_path / "key"))
    (tmp_path / "known_hosts").write_text("")
    section = {"user": "oncall", "key_file": str(tmp_path / "key"), "known_hosts": str(tmp_path / "known_hosts"),
               "ssh_config": False, "remote_timeout": False,
               "timeouts": {"connect": connect, "banner": banner, "auth": 5, "channel": 5, "keepalive": 0},
               "inventory": {"gpu-node-2": {"host": "127.0.0.1", "port": port}}}
    with SshNodes.from_section(section, server_mode=True) as nodes, pytest.raises(BackendUnavailable) as caught:
        nodes.run("gpu-node-2", ["nvidia-smi"], timeout=10)
    return str(caught.value)


def test_f7_a_silent_port_is_no_banner_not_no_existing_session(tmp_path):
    with misbehaving_server("silent") as port:
        message = failure(tmp_path, port, connect=0.5, banner=5)
    assert "No existing session" not in message
    assert "gpu-node-2" in message and "no SSH banner within 0.5s" in message, message


def test_f7_a_port_that_hangs_up_is_not_called_a_banner_timeout(tmp_path):
    with misbehaving_server("hangup") as port:
        message = failure(tmp_path, port, connect=2, banner=2)
    assert "closed the connection before sending an SSH banner" in message, message
    assert "within" not in message


def test_f7_a_banner_without_key_exchange_is_named(tmp_path):
    with misbehaving_server("banner-only") as port:
        message = failure(tmp_path, port, connect=0.5, banner=5)
    assert "No existing session" not in message
    assert "SSH-2.0-OpenSSH_9.2p1" in message and "key exchange" in message, message
