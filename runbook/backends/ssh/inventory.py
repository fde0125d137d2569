"""The `nodes:` section of the config file, and how a node name becomes an SSH target (no network).

The inventory is an allow-list: a node that no entry names or matches is never connected to.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import getpass
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pydantic

from runbook.errors import InvalidInput

DEFAULT_PORT = 22
MAX_HOPS = 4
# Kubernetes node names (DNS-1123 subdomains): what a playbook's `node` param may be.
_NODE = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
# An inventory key: a node name, or a glob of them (`gpu-a100-*`).
_NODE_PATTERN = re.compile(r"[a-z0-9*?]([-a-z0-9.*?]{0,251}[a-z0-9*?])?")
# A host as a socket takes it (name, IPv4, IPv6), with `{name}` standing for the node name.
_HOST = re.compile(r"(\{name\}|[A-Za-z0-9_.:%-])+")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}")
_JUMP_HOP = re.compile(r"(?:(?P<user>[A-Za-z0-9_][A-Za-z0-9_.-]{0,63})@)?"
                       r"(?P<host>\[[0-9A-Fa-f:.%]+\]|[A-Za-z0-9_][A-Za-z0-9_.%-]*)(?::(?P<port>[0-9]{1,5}))?")


def _check_host(value: str | None) -> str | None:
    if value is not None and (not _HOST.fullmatch(value) or value.startswith("-")):
        raise ValueError(f"{value!r} is not a host name or address")
    return value


def _check_user(value: str | None) -> str | None:
    if value is not None and not _USER.fullmatch(value):
        raise ValueError(f"{value!r} is not a user name")
    return value


def _check_jump(value: str | None) -> str | None:
    if value is not None and value != "none":
        for hop in value.split(","):
            if not _JUMP_HOP.fullmatch(hop.strip()):
                raise ValueError(f"jump hop {hop!r} is not an inventory name or [user@]host[:port]")
    return value


class _Endpoint(pydantic.BaseModel):
    """Fields an inventory entry and the section's defaults share."""

    model_config = pydantic.ConfigDict(extra="forbid")

    port: int | None = pydantic.Field(None, ge=1, le=65535)
    user: str | None = None
    key_file: str | None = None
    known_hosts: str | None = None
    # another inventory name, or [user@]host[:port], or a comma-separated chain; "none" ignores ~/.ssh/config's ProxyJump
    jump: str | None = None

    @pydantic.field_validator("user")
    @classmethod
    def _user(cls, value: str | None) -> str | None:
        return _check_user(value)

    @pydantic.field_validator("jump")
    @classmethod
    def _jump(cls, value: str | None) -> str | None:
        return _check_jump(value)


class HostEntry(_Endpoint):
    host: str | None = None  # default: the node name, through ~/.ssh/config's HostName
    kubernetes_node: list[str] = []  # the names the cluster gives this host, when they differ

    @pydantic.field_validator("host")
    @classmethod
    def _host(cls, value: str | None) -> str | None:
        return _check_host(value)

    @pydantic.field_validator("kubernetes_node", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @pydantic.field_validator("kubernetes_node")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _NODE.fullmatch(name):
                raise ValueError(f"{name!r} is not a Kubernetes node name")
        return value


class Timeouts(pydantic.BaseModel):
    """Per-phase limits; each is also capped by what is left of the command's one deadline (its timeout,
    plus kill_after + 3s with remote_timeout), which no phase outlives."""

    model_config = pydantic.ConfigDict(extra="forbid")

    connect: float = pydantic.Field(10.0, gt=0, le=300)  # TCP connect, and the key exchange
    banner: float = pydantic.Field(15.0, gt=0, le=300)
    auth: float = pydantic.Field(15.0, gt=0, le=300)
    channel: float = pydantic.Field(10.0, gt=0, le=300)  # opening a session or a jump channel
    keepalive: float = pydantic.Field(15.0, ge=0, le=600)  # 0 turns keepalives off
    kill_after: float = pydantic.Field(2.0, ge=0, le=60)  # SIGTERM at the deadline, SIGKILL this much later


class NodesSection(_Endpoint):
    """`nodes:`: defaults for every host, then `inventory:` (node name or glob → host entry)."""

    inventory: dict[str, HostEntry] = pydantic.Field(min_length=1)
    ssh_config: str | bool | None = None  # None: ~/.ssh/config if present (never in server mode); False: off
    agent: bool = True  # offer the ssh-agent's keys (the CLI only; never in server mode)
    remote_timeout: bool = True  # wrap commands in `timeout` so the node ends them even if we vanish
    max_output_bytes: int = pydantic.Field(1024 * 1024, ge=1024, le=64 * 1024 * 1024)  # per stream
    timeouts: Timeouts = Timeouts()

    @pydantic.field_validator("inventory")
    @classmethod
    def _keys(cls, value: dict[str, HostEntry]) -> dict[str, HostEntry]:
        for key in value:
            if not _NODE_PATTERN.fullmatch(key):
                raise ValueError(f"inventory key {key!r} is not a node name or a glob of node names")
        return value

    @pydantic.model_validator(mode="after")
    def _aliases_unique(self) -> NodesSection:
        seen: dict[str, str] = {}
        for key, entry in self.inventory.items():
            for alias in entry.kubernetes_node:
                if alias in seen or (alias in self.inventory and alias != key):
                    raise ValueError(f"kubernetes_node {alias!r} of {key!r} also names {seen.get(alias, alias)!r}")
                seen[alias] = key
        return self


@dataclasses.dataclass(frozen=True)
class Hop:
    """One SSH connection to make: where, as whom, with which keys, checked against which host keys."""

    label: str  # what messages call it: the node name, or the jump host's spec
    host: str
    port: int
    user: str
    key_files: tuple[str, ...]
    key_file_explicit: bool  # from runbook's config: must load, or the config is wrong
    known_hosts: tuple[str, ...]

    @property
    def known_hosts_name(self) -> str:
        """The name known_hosts files use for this host (OpenSSH's `[host]:port` off port 22)."""
        return self.host if self.port == DEFAULT_PORT else f"[{self.host}]:{self.port}"


@dataclasses.dataclass(frozen=True)
class Target:
    node: str
    hop: Hop
    jumps: tuple[Hop, ...] = ()  # connected in order; each tunnels to the next, the last to `hop`

    @property
    def key(self) -> tuple:
        """Targets with the same key share one connection."""
        return tuple((h.host, h.port, h.user, h.key_files, h.known_hosts) for h in (*self.jumps, self.hop))


def _expand(path: str) -> str:
    return os.path.expanduser(os.path.expandvars(path))


class Inventory:
    """Resolves node names to targets: runbook's config first, `~/.ssh/config` for what it leaves unset."""

    def __init__(self, section: NodesSection, *, server_mode: bool, source: str = "the config file",
                 home: Path | None = None):
        self.section = section
        self.server_mode = server_mode
        self.source = source
        self.home = home if home is not None else Path.home()
        self.ssh_config_path = self._ssh_config_path()
        self._ssh_config: Any = None
        self._check_files()

    # -- configuration checks, once, at start-up ----------------------------------------------

    def _ssh_config_path(self) -> str | None:
        value = self.section.ssh_config
        if value is False:
            return None
        if isinstance(value, str):
            path = _expand(value)
            if not os.path.isfile(path):
                raise InvalidInput(f"nodes.ssh_config: {path} does not exist ({self.source})")
            return path
        if value is True or (value is None and not self.server_mode):
            path = str(self.home / ".ssh" / "config")
            if os.path.isfile(path):
                return path
            if value is True:
                raise InvalidInput(f"nodes.ssh_config: true, but {path} does not exist ({self.source})")
        return None  # server mode reads an ssh config only when it is named explicitly

    def _check_files(self) -> None:
        endpoints = [("nodes", self.section), *((f"nodes.inventory.{k}", e) for k, e in self.section.inventory.items())]
        for where, endpoint in endpoints:
            for field in ("key_file", "known_hosts"):
                value = getattr(endpoint, field)
                if value is not None and not os.path.isfile(_expand(value)):
                    raise InvalidInput(f"{where}.{field}: {_expand(value)} does not exist ({self.source})")
            if endpoint.known_hosts is not None:
                check_known_hosts(_expand(endpoint.known_hosts))

    # -- resolution ---------------------------------------------------------------------------

    def entry(self, node: str) -> tuple[str, HostEntry]:
        """The inventory entry for a node name: by key, by `kubernetes_node`, then by glob (in file order)."""
        if not isinstance(node, str) or not _NODE.fullmatch(node):
            raise InvalidInput(f"node {node!r} is not a valid node name (lowercase letters, digits, '-' and '.')")
        inventory = self.section.inventory
        if node in inventory:  # a node name has no glob characters, so this is an exact entry
            return node, inventory[node]
        for key, entry in inventory.items():
            if node in entry.kubernetes_node:
                return key, entry
        for key, entry in inventory.items():
            if any(c in key for c in "*?") and fnmatch.fnmatchcase(node, key):
                return key, entry
        raise InvalidInput(f"node {node!r} is not in the nodes inventory of {self.source} "
                           f"(entries: {', '.join(inventory)}); add it under nodes.inventory")

    def resolve(self, node: str) -> Target:
        key, entry = self.entry(node)
        # a glob stands for many hosts: the node's own name is the host; otherwise the inventory name is
        name = node if any(c in key for c in "*?") else key
        alias = entry.host.replace("{name}", name) if entry.host else name
        _check_host(alias)
        hop, jump = self._hop(node, alias, entry)
        return Target(node, hop, self._jumps(jump, seen={key}))

    def _lookup(self, alias: str) -> Mapping[str, Any]:
        if self.ssh_config_path is None:
            return {}
        if self._ssh_config is None:
            from paramiko.config import SSHConfig  # noqa: PLC0415 - heavy, only when an ssh config is read

            try:
                self._ssh_config = SSHConfig.from_path(self.ssh_config_path)
            except Exception as exc:  # paramiko raises ConfigParseError and plain errors alike
                raise InvalidInput(f"cannot read the ssh config {self.ssh_config_path}: {exc}") from None
        try:
            found = dict(self._ssh_config.lookup(alias))
        except Exception as exc:
            raise InvalidInput(f"{self.ssh_config_path}: cannot look up {alias!r}: {exc}") from None
        if "proxycommand" in found and str(found["proxycommand"]).lower() != "none":
            raise InvalidInput(f"{self.ssh_config_path} sets ProxyCommand for {alias!r}; runbook does not run local "
                               f"commands to connect — use ProxyJump, or `jump:` in nodes.inventory")
        return found

    def _hop(self, label: str, alias: str, entry: _Endpoint | None, *, user: str | None = None,
             port: int | None = None, default_jump: bool = True) -> tuple[Hop, str | None]:
        """One hop: runbook's entry, then the section's defaults, then ~/.ssh/config, then built-ins.

        The host goes through ~/.ssh/config's HostName as `ssh ALIAS` would.
        """
        found = self._lookup(alias)
        defaults = self.section
        host = str(found.get("hostname") or alias)
        _check_host(host)

        def pick(field: str, ssh_key: str | None) -> Any:
            for source in (entry, defaults):
                value = getattr(source, field, None) if source is not None else None
                if value is not None:
                    return value
            return found.get(ssh_key) if ssh_key else None

        chosen_port = port or pick("port", "port") or DEFAULT_PORT
        try:
            chosen_port = int(chosen_port)
        except ValueError:
            raise InvalidInput(f"{self.ssh_config_path}: Port {chosen_port!r} for {alias!r} is not a number") from None
        chosen_user = user or pick("user", "user")
        if chosen_user is None:
            if self.server_mode:
                raise InvalidInput(f"no SSH user for node {label!r}: set nodes.user or user: in its inventory entry")
            chosen_user = getpass.getuser()
        _check_user(chosen_user)
        key_file = (entry.key_file if entry is not None else None) or defaults.key_file
        if key_file is not None:
            keys, explicit = (_expand(key_file),), True
        else:
            keys = tuple(p for p in (_expand(f) for f in found.get("identityfile", [])) if os.path.isfile(p))
            explicit = False
        if self.server_mode and not keys:
            raise InvalidInput(f"no SSH key for node {label!r} in server mode: set nodes.key_file (or key_file: in "
                               f"its inventory entry); the webhook server never uses an agent or ~/.ssh keys")
        # the section's `jump` is for nodes; a jump host goes on only by its own `jump` or ProxyJump
        jump = pick("jump", "proxyjump") if default_jump else \
            (entry.jump if entry is not None and entry.jump is not None else found.get("proxyjump"))
        return Hop(label, host, chosen_port, chosen_user, keys, explicit, self._known_hosts(label, entry, found)), jump

    def _known_hosts(self, label: str, entry: _Endpoint | None, found: Mapping[str, Any]) -> tuple[str, ...]:
        configured = (entry.known_hosts if entry is not None else None) or self.section.known_hosts
        if configured is not None:
            return (_expand(configured),)
        if "userknownhostsfile" in found:
            files = tuple(_expand(f) for f in str(found["userknownhostsfile"]).split())
            for f in files:
                if os.path.isfile(f):
                    check_known_hosts(f)
            return files
        if self.server_mode:
            raise InvalidInput(f"no known_hosts file for node {label!r} in server mode: set nodes.known_hosts "
                               f"to a file holding the GPU nodes' host keys")
        path = str(self.home / ".ssh" / "known_hosts")
        if os.path.isfile(path):
            check_known_hosts(path)
        return (path,)

    def _jumps(self, spec: str | None, *, seen: set[str]) -> tuple[Hop, ...]:
        """The hops before a target, in connection order; inventory names resolve with their own jumps."""
        if spec is None or spec.strip().lower() == "none":
            return ()
        hops: list[Hop] = []
        for raw in (h.strip() for h in spec.split(",")):
            m = _JUMP_HOP.fullmatch(raw)
            if m is None:
                raise InvalidInput(f"jump hop {raw!r} is not an inventory name or [user@]host[:port]")
            if raw in self.section.inventory:
                if raw in seen:
                    raise InvalidInput(f"jump hosts loop back to {raw!r}: {' -> '.join([*seen, raw])}")
                entry = self.section.inventory[raw]
                hop, further = self._hop(raw, entry.host or raw, entry, default_jump=False)
                hops += [*self._jumps(further, seen=seen | {raw}), hop]
            else:
                host = m["host"].strip("[]")
                hop, _ = self._hop(raw, host, None, user=m["user"],
                                   port=int(m["port"]) if m["port"] else None)
                hops.append(hop)  # a ProxyJump of a jump host outside the inventory is not followed
            if len(hops) > MAX_HOPS:
                raise InvalidInput(f"more than {MAX_HOPS} jump hosts before a node")
        return tuple(hops)


def check_known_hosts(path: str) -> None:
    """Refuse known_hosts files with markers paramiko cannot honour (it would misread the whole file)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                if line.lstrip().startswith("@"):
                    marker = line.split(None, 1)[0]
                    raise InvalidInput(
                        f"{path}:{lineno}: {marker} lines are not supported (paramiko cannot honour CA-signed or "
                        f"revoked host keys); give runbook a known_hosts file with plain host key lines for the GPU nodes")
    except OSError as exc:
        raise InvalidInput(f"cannot read known_hosts file {path}: {exc.strerror}") from None
