"""The `Nodes` backend over SSH (paramiko): commands on GPU hosts named in the config's inventory.

Strict host keys, no agent forwarding, one connection per host; paramiko loads on first use. Each command
has one deadline over every phase, the connect included; a connection that ran into one is never reused.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runbook.backends.base import Cluster, CommandResult
from runbook.backends.ssh.deadline import Deadline, DeadlinePassed
from runbook.backends.ssh.inventory import HostEntry, Inventory, NodesSection, Target, Timeouts
from runbook.config import Config
from runbook.errors import BackendUnavailable, InvalidInput

if TYPE_CHECKING:
    from runbook.backends.ssh.session import Connection, Options

__all__ = ["HostEntry", "NodesSection", "SshNodes", "Timeouts", "connect"]


def connect(config: Config, *, server_mode: bool, cluster: Cluster | None = None) -> SshNodes | None:
    """The nodes backend from the config's `nodes:` section, or None when there is none.

    `server_mode` (the webhook server): no ssh-agent, no ~/.ssh keys or config unless named, and
    every node needs an explicit key and known_hosts file. `cluster` is not consulted for
    addresses: a node's address comes from the inventory, never from the Kubernetes API.
    """
    raw = config.sections.get("nodes")
    if not raw:
        return None
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"{config.path or 'the config file'}: `nodes:` must be a mapping (defaults and inventory:)")
    section = config.section_model("nodes", NodesSection)
    source = str(config.path) if config.path else "the config file"
    return SshNodes(Inventory(section, server_mode=server_mode, source=source), server_mode=server_mode)


class SshNodes:
    """`Nodes.run` over SSH; connections are opened on first use and kept until `close()`.

    Thread-safe: steps that run side by side share one connection per host.
    """

    def __init__(self, inventory: Inventory, *, server_mode: bool):
        self.inventory = inventory
        self.server_mode = server_mode
        self._connections: dict[tuple, Connection] = {}
        self._lock = threading.Lock()
        self._connecting: dict[tuple, threading.Lock] = {}

    @classmethod
    def from_section(cls, section: NodesSection | dict[str, Any], *, server_mode: bool,
                     home: Path | None = None) -> SshNodes:
        """Built straight from a section (tests, embedding); `connect` is the usual way."""
        model = section if isinstance(section, NodesSection) else NodesSection.model_validate(section)
        return cls(Inventory(model, server_mode=server_mode, home=home), server_mode=server_mode)

    def _options(self) -> Options:
        from runbook.backends.ssh.session import Options

        s = self.inventory.section
        return Options(timeouts=s.timeouts, allow_agent=s.agent and not self.server_mode,
                       max_output_bytes=s.max_output_bytes, remote_timeout=s.remote_timeout)

    def resolve(self, node: str) -> Target:
        """Where `node` is reached (raises InvalidInput for a node outside the inventory)."""
        return self.inventory.resolve(node)

    def _connection(self, target: Target, opts: Options, deadline: Deadline) -> Connection:
        from runbook.backends.ssh.session import open_connection

        with self._lock:
            gate = self._connecting.setdefault(target.key, threading.Lock())
        # one handshake per host, even when steps run side by side; the others wait for it, within their deadline
        deadline.phase("wait for another command's SSH handshake")
        if not gate.acquire(timeout=deadline.left()):
            raise BackendUnavailable(f"ssh {target.node}: another command's SSH handshake with it did not finish "
                                     f"within this command's deadline ({deadline.seconds:g}s); not started")
        try:
            with self._lock:
                conn = self._connections.get(target.key)
            if conn is not None and not conn.alive:
                self._discard(target.key, conn)
                conn = None
            if conn is None:
                conn = open_connection(target, opts, deadline)
                with self._lock:
                    self._connections[target.key] = conn
            return conn
        finally:
            gate.release()

    def _discard(self, key: tuple, conn: Connection) -> None:
        with self._lock:
            if self._connections.get(key) is conn:
                del self._connections[key]
        conn.close()

    def run(self, node: str, argv: Sequence[str], *, timeout: float) -> CommandResult:
        from runbook.backends.ssh.session import check_argv, deadline_seconds, shown_command

        argv = check_argv(argv)
        if not timeout > 0:
            raise InvalidInput(f"a command timeout must be positive, not {timeout!r}")
        target = self.resolve(node)
        opts = self._options()
        with Deadline(node, deadline_seconds(timeout, opts), command=shown_command(argv)) as deadline:
            return self._run(target, argv, timeout, opts, deadline)

    def _run(self, target: Target, argv: list[str], timeout: float, opts: Options, deadline: Deadline) -> CommandResult:
        from runbook.backends.ssh.session import StaleConnection, execute

        conn = self._connection(target, opts, deadline)
        try:
            return execute(conn, argv, timeout=timeout, opts=opts, deadline=deadline)
        except DeadlinePassed:
            self._discard(target.key, conn)  # closed already by the watchdog; out of the cache too
            raise
        except StaleConnection:
            if conn.alive:
                raise  # the server refused a session on a working connection: reconnecting changes nothing
            # nothing ran: the connection died since its last use; one fresh try, within the same deadline
            self._discard(target.key, conn)
        conn = self._connection(target, opts, deadline)
        try:
            return execute(conn, argv, timeout=timeout, opts=opts, deadline=deadline)
        except DeadlinePassed:
            self._discard(target.key, conn)
            raise

    def close(self) -> None:
        with self._lock:
            connections, self._connections = list(self._connections.values()), {}
        for conn in connections:
            conn.close()

    def __enter__(self) -> SshNodes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
