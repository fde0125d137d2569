"""Parsers for TCP socket tables: `/proc/net/tcp[6]`, `ss -tln[H]`, `netstat -tuln` and `netstat -lnp`.

They answer "is anything listening on the serving port" without needing the tools on the host.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

from runbook.parsers.errors import ParseError, quote

_NEWLINE = re.compile(r"\r\n|\r|\n")

# include/net/tcp_states.h
_KERNEL_STATES = {
    0x01: "ESTABLISHED", 0x02: "SYN_SENT", 0x03: "SYN_RECV", 0x04: "FIN_WAIT1", 0x05: "FIN_WAIT2",
    0x06: "TIME_WAIT", 0x07: "CLOSE", 0x08: "CLOSE_WAIT", 0x09: "LAST_ACK", 0x0A: "LISTEN",
    0x0B: "CLOSING", 0x0C: "NEW_SYN_RECV",
}
# ss spells states its own way; netstat already uses the kernel names
_SS_STATES = {
    "ESTAB": "ESTABLISHED", "SYN-SENT": "SYN_SENT", "SYN-RECV": "SYN_RECV", "FIN-WAIT-1": "FIN_WAIT1",
    "FIN-WAIT-2": "FIN_WAIT2", "TIME-WAIT": "TIME_WAIT", "UNCONN": "CLOSE", "CLOSE-WAIT": "CLOSE_WAIT",
    "LAST-ACK": "LAST_ACK", "LISTEN": "LISTEN", "CLOSING": "CLOSING", "SYN-RECV-NEW": "NEW_SYN_RECV",
}
_STATE_NAMES = set(_KERNEL_STATES.values()) | set(_SS_STATES)


@dataclass(frozen=True)
class Socket:
    local_address: str  # as printed, without [] around IPv6; "*" for any address in ss
    local_port: int
    state: str  # kernel names: LISTEN, ESTABLISHED, TIME_WAIT, ...


def _lines(text: str) -> list[tuple[int, str]]:
    return [(n, line.strip()) for n, line in enumerate(_NEWLINE.split(text), 1) if line.strip()]


_PROC_FORMAT = "/proc/net/tcp"
_PROC_HEADER = re.compile(r"sl\s+local_address\s.*")
_PROC_ROW = re.compile(r"[0-9]+:\s+([0-9A-Fa-f]{8}|[0-9A-Fa-f]{32}):([0-9A-Fa-f]{4})\s+"
                       r"(?:[0-9A-Fa-f]{8}|[0-9A-Fa-f]{32}):[0-9A-Fa-f]{4}\s+([0-9A-Fa-f]{2})(?:\s.*)?", re.ASCII)


def _proc_address(hex_address: str) -> str:
    # the kernel prints each 32-bit word in host order: little-endian on every serving platform
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    if len(words) == 4:
        return str(ipaddress.IPv4Address(words))
    address = ipaddress.IPv6Address(words)
    # spelled as ss and Python ≥ 3.13 spell it, so the two sources compare equal
    return f"::ffff:{address.ipv4_mapped}" if address.ipv4_mapped else str(address)


def parse_proc_net_tcp(text: str) -> list[Socket]:
    """`/proc/net/tcp` or `/proc/net/tcp6` (or both concatenated): every socket with its state."""
    sockets = []
    for lineno, line in _lines(text):
        if _PROC_HEADER.fullmatch(line):
            continue
        m = _PROC_ROW.fullmatch(line)
        if m is None:
            raise ParseError(f"expected 'sl: local_address rem_address st ...' (hex), found {quote(line)}",
                             format=_PROC_FORMAT, line=lineno)
        state = _KERNEL_STATES.get(int(m[3], 16))
        if state is None:
            raise ParseError(f"unknown TCP state code {m[3]!r}", format=_PROC_FORMAT, line=lineno)
        sockets.append(Socket(local_address=_proc_address(m[1]), local_port=int(m[2], 16), state=state))
    return sockets


_SS_FORMAT = "ss -tln / netstat -tln"
_SS_HEADER = re.compile(r"(?:Netid\s+)?State\s+Recv-Q\s.*|Proto\s+Recv-Q\s.*|Active Internet connections.*")
# netstat without -t goes on with UNIX domain (and, where built in, Bluetooth, IPX, AX.25...) sections,
# each with its own header and rows; none of them holds a TCP socket.
_OTHER_SECTION = re.compile(r"Active (?!Internet connections).*(?:sockets|connections)\b.*")
# What netstat -p prints (to stderr, often pasted in with 2>&1) when not run as root.
_NOT_ROOT_NOTICE = re.compile(r"\(Not all processes could be identified.*|will not be shown, you would have to be root.*")
_ENDPOINT = re.compile(r"(?:\[(?P<v6>[^\]]*)\]|(?P<host>.*)):(?P<port>[0-9]+|\*|[A-Za-z][A-Za-z0-9+._\-]*)", re.ASCII)
_TCP = {"tcp", "tcp6", "tcp4"}
_OTHER_PROTOCOLS = {"udp", "udp6", "udp4", "raw", "raw6", "u_str", "u_dgr", "u_seq", "p_raw", "p_dgr",
                    "nl", "mptcp", "sctp", "dccp", "unix", "v_str", "v_dgr", "xdp", "tipc", "udplite"}
_QUEUE = re.compile(r"[0-9]+", re.ASCII)

# Without -n, ss and netstat print a port by the name the host's /etc/services gives it. Only names
# that mean one TCP port in every common services file (Debian/Ubuntu netbase, RHEL/UBI `setup`,
# IANA) are read back; any other name is refused with the way to get numbers, never guessed.
_SERVICES = {"ssh": 22, "smtp": 25, "domain": 53, "http": 80, "sunrpc": 111, "https": 443, "ipp": 631,
             "irdmi": 8000, "webcache": 8080}
# Names printed for different ports depending on the host, spelled out in the refusal.
_HOST_DEPENDENT = {"http-alt": "591, 8008 or 8080"}


def _service_port(name: str, raw: str, lineno: int) -> int:
    port = _SERVICES.get(name)
    if port is not None:
        return port
    means = (f" ({name!r} is port {_HOST_DEPENDENT[name]}, depending on the host's /etc/services)"
             if name in _HOST_DEPENDENT else "")
    raise ParseError(f"the port in {quote(raw)} is the service name {name!r}, not a number{means}; "
                     "runbook does not guess which port a name means on that host: run the tool with -n for "
                     "numeric ports (netstat -tlnp, ss -tln)", format=_SS_FORMAT, line=lineno)


def _endpoint(raw: str, lineno: int) -> tuple[str, int]:
    m = _ENDPOINT.fullmatch(raw)
    if m is None or m["port"] == "*" or not (m["v6"] is not None or m["host"]):
        raise ParseError(f"expected a local address such as 0.0.0.0:8000 or [::]:8000, found {quote(raw)}",
                         format=_SS_FORMAT, line=lineno)
    address = m["v6"] if m["v6"] is not None else m["host"]
    if not m["port"].isdigit():
        return address, _service_port(m["port"], raw, lineno)
    port = int(m["port"])
    if port > 65535:
        raise ParseError(f"port {port} out of range in {quote(raw)}", format=_SS_FORMAT, line=lineno)
    return address, port


def parse_ss_listening(text: str) -> list[Socket]:
    """TCP sockets from `ss -tln`, `ss -tlnH`, `ss -tuln`, `netstat -tuln` or `netstat -lnp`; UDP and
    other rows are skipped, and so are netstat's UNIX domain (and other non-Internet) sections.

    Address spellings: `0.0.0.0:8000`, `[::]:8000`, `*:8000`, `127.0.0.53%lo:53`, netstat's `:::8000`;
    without -n, `localhost:smtp` (only service names with one port on every host, see `_SERVICES`).
    """
    sockets = []
    other_section = False
    for lineno, line in _lines(text):
        if _OTHER_SECTION.fullmatch(line):
            other_section = True
            continue
        if line.startswith("Active Internet connections"):
            other_section = False
        if other_section or _SS_HEADER.fullmatch(line) or _NOT_ROOT_NOTICE.fullmatch(line):
            continue
        fields = line.split()
        protocol = fields[0].lower()
        if protocol in _OTHER_PROTOCOLS:
            continue
        if protocol in _TCP and len(fields) >= 6 and _QUEUE.fullmatch(fields[1]):
            # netstat: Proto Recv-Q Send-Q Local Foreign State
            local, state = fields[3], fields[5]
        else:
            if protocol in _TCP:  # ss with more than one protocol: Netid State Recv-Q ...
                fields = fields[1:]
            if len(fields) < 5 or not (_QUEUE.fullmatch(fields[1]) and _QUEUE.fullmatch(fields[2])):
                raise ParseError(f"expected 'State Recv-Q Send-Q Local:Port Peer:Port' (ss) or "
                                 f"'Proto Recv-Q Send-Q Local Foreign State' (netstat), found {quote(line)}",
                                 format=_SS_FORMAT, line=lineno)
            state, local = fields[0], fields[3]
        if state not in _STATE_NAMES:
            raise ParseError(f"unknown socket state {quote(state)}", format=_SS_FORMAT, line=lineno)
        address, port = _endpoint(local, lineno)
        sockets.append(Socket(local_address=address, local_port=port, state=_SS_STATES.get(state, state)))
    return sockets


def is_listening(sockets: Iterable[Socket], port: int) -> bool:
    """True when some socket listens on `port`, on any address."""
    return any(s.state == "LISTEN" and s.local_port == port for s in sockets)
