"""Socket-table parsers: /proc/net/tcp[6], ss and netstat, on realistic samples and generated tables.

The generated tables render the same sockets through each format and expect the same answer back.
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.parsers.errors import ParseError
from runbook.parsers.sockets import Socket, is_listening, parse_proc_net_tcp, parse_ss_listening

PROC_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 2712394 1 0000000000000000 100 0 0 10 0
   1: 3500007F:0035 00000000:0000 0A 00000000:00000000 00:00000000 00000000   101        0 17854 1 0000000000000000 100 0 0 10 5
   2: 0100007F:1F40 0100007F:C8A6 06 00000000:00000000 03:000012A4 00000000     0        0 0 3 0000000000000000
   3: 0A00000A:1F40 0B00000A:D431 01 00000000:00000000 02:00000A2B 00000000  1000        0 2719876 2 0000000000000000 20 4 30 10 -1
"""
PROC_TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 2712395 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:0016 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 21234 1 0000000000000000 100 0 0 10 0
   2: 0000000000000000FFFF00000100007F:1F40 0000000000000000FFFF00000100007F:D2F0 01 00000000:00000000 00:00000000 00000000  1000        0 4 1 0 20 4 30 10 -1
   3: 000080FE00000000FF4A1D02215E7FFE:1F40 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 5 1 0 100 0 0 10 0
"""


def test_proc_net_tcp_v4():
    assert parse_proc_net_tcp(PROC_TCP.replace("\n", "\r\n")) == [
        Socket("0.0.0.0", 8000, "LISTEN"), Socket("127.0.0.53", 53, "LISTEN"),
        Socket("127.0.0.1", 8000, "TIME_WAIT"), Socket("10.0.0.10", 8000, "ESTABLISHED")]


def test_proc_net_tcp6_and_concatenation():
    sockets = parse_proc_net_tcp(PROC_TCP + "\n" + PROC_TCP6)
    assert sockets[4:] == [Socket("::", 8080, "LISTEN"), Socket("::1", 22, "LISTEN"),
                           Socket("::ffff:127.0.0.1", 8000, "ESTABLISHED"),
                           Socket("fe80::21d:4aff:fe7f:5e21", 8000, "LISTEN")]
    assert is_listening(sockets, 8080) and is_listening(sockets, 8000) and not is_listening(sockets, 9000)


def test_proc_net_tcp_errors_and_empty():
    assert parse_proc_net_tcp("") == []
    with pytest.raises(ParseError, match="expected 'sl: local_address") as info:
        parse_proc_net_tcp(PROC_TCP + "garbage\n")
    assert (info.value.line, info.value.format) == (6, "/proc/net/tcp")
    with pytest.raises(ParseError, match="unknown TCP state code 'FF'"):
        parse_proc_net_tcp("0: 00000000:1F40 00000000:0000 FF 0\n")


SS_TLN = """\
State      Recv-Q Send-Q Local Address:Port               Peer Address:Port
LISTEN     0      4096   127.0.0.53%lo:53                 0.0.0.0:*
LISTEN     0      128          0.0.0.0:22                 0.0.0.0:*
LISTEN     0      4096               *:8000                     *:*
LISTEN     0      128             [::]:22                    [::]:*
LISTEN     0      4096   [::ffff:127.0.0.1]:9400               *:*      users:(("dcgm-exporter",pid=77,fd=3))
"""


def test_ss_tln():
    sockets = parse_ss_listening(SS_TLN)
    assert sockets == [Socket("127.0.0.53%lo", 53, "LISTEN"), Socket("0.0.0.0", 22, "LISTEN"),
                       Socket("*", 8000, "LISTEN"), Socket("::", 22, "LISTEN"),
                       Socket("::ffff:127.0.0.1", 9400, "LISTEN")]
    assert is_listening(sockets, 8000)
    headerless = "\n".join(SS_TLN.splitlines()[1:])
    assert parse_ss_listening(headerless) == sockets


def test_ss_tuln_netid_and_established():
    text = ("Netid State  Recv-Q Send-Q Local Address:Port Peer Address:Port Process\r\n"
            "udp   UNCONN 0      0      127.0.0.53%lo:53        0.0.0.0:*\r\n"
            "tcp   LISTEN 0      4096         0.0.0.0:8000      0.0.0.0:*\r\n"
            "tcp   ESTAB  0      0          10.0.0.10:8000    10.0.0.11:54321\r\n")
    assert parse_ss_listening(text) == [Socket("0.0.0.0", 8000, "LISTEN"), Socket("10.0.0.10", 8000, "ESTABLISHED")]


def test_netstat_tuln():
    text = ("Active Internet connections (only servers)\n"
            "Proto Recv-Q Send-Q Local Address           Foreign Address         State\n"
            "tcp        0      0 0.0.0.0:8000            0.0.0.0:*               LISTEN\n"
            "tcp6       0      0 :::22                   :::*                    LISTEN\n"
            "udp        0      0 0.0.0.0:68              0.0.0.0:*\n"
            "tcp        0      0 10.0.0.10:8000          10.0.0.11:54321         TIME_WAIT\n")
    assert parse_ss_listening(text) == [Socket("0.0.0.0", 8000, "LISTEN"), Socket("::", 22, "LISTEN"),
                                        Socket("10.0.0.10", 8000, "TIME_WAIT")]
    assert not is_listening(parse_ss_listening(text), 68)


@pytest.mark.parametrize(("text", "fragment"), [
    ("hello world\n", "expected 'State Recv-Q Send-Q"),
    ("LISTEN 0 128 0.0.0.0 0.0.0.0:*\n", "expected a local address"),
    ("LISTEN 0 128 0.0.0.0:99999 0.0.0.0:*\n", "port 99999 out of range"),
    ("WAITING 0 128 0.0.0.0:80 0.0.0.0:*\n", "unknown socket state"),
])
def test_ss_errors(text, fragment):
    with pytest.raises(ParseError, match=fragment) as info:
        parse_ss_listening(text)
    assert info.value.line == 1


def test_ss_empty():
    assert parse_ss_listening("") == []
    assert parse_ss_listening("State Recv-Q Send-Q Local Address:Port Peer Address:Port Process\n") == []


# -- generated ------------------------------------------------------------------------------------

STATE_CODES = {"ESTABLISHED": 1, "SYN_SENT": 2, "TIME_WAIT": 6, "CLOSE_WAIT": 8, "LISTEN": 10}
SS_NAMES = {"ESTABLISHED": "ESTAB", "SYN_SENT": "SYN-SENT", "TIME_WAIT": "TIME-WAIT", "CLOSE_WAIT": "CLOSE-WAIT",
            "LISTEN": "LISTEN"}


def canonical(address) -> str:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return f"::ffff:{address.ipv4_mapped}"
    return str(address)


def proc_hex(address) -> str:
    raw = address.packed
    return b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4)).hex().upper()


entries = st.lists(st.tuples(st.ip_addresses(), st.integers(0, 65535), st.sampled_from(sorted(STATE_CODES))),
                   max_size=12)


@settings(max_examples=200, deadline=None)
@given(entries)
def test_proc_and_ss_round_trip_agree(rows):
    expected = [Socket(canonical(a), port, state) for a, port, state in rows]
    proc = PROC_TCP.splitlines()[0] + "\n" + "".join(
        f"{i:4}: {proc_hex(a)}:{port:04X} {proc_hex(a)}:0000 {STATE_CODES[state]:02X} 00000000:00000000 "
        f"00:00000000 00000000  1000        0 {i} 1 0000000000000000 100 0 0 10 0\n"
        for i, (a, port, state) in enumerate(rows))
    assert parse_proc_net_tcp(proc) == expected

    def ss_address(s: Socket) -> str:
        return f"[{s.local_address}]" if ":" in s.local_address else s.local_address
    ss = "".join(f"{SS_NAMES[s.state]:<10} 0      4096   {ss_address(s)}:{s.local_port}   *:*\n" for s in expected)
    assert parse_ss_listening(ss) == expected
    netstat = "".join(f"tcp6       0      0 {s.local_address}:{s.local_port}   :::*   {s.state}\n" for s in expected)
    assert parse_ss_listening(netstat) == expected
    for port in {s.local_port for s in expected}:
        assert is_listening(expected, port) == any(s.state == "LISTEN" and s.local_port == port for s in expected)


@pytest.mark.parametrize("parser", [parse_proc_net_tcp, parse_ss_listening])
@settings(max_examples=200, deadline=None)
@given(text=st.text())
def test_arbitrary_text_raises_only_parse_error(parser, text):
    try:
        parser(text)
    except ParseError as error:
        assert error.format and (error.line is None or error.line >= 1)
