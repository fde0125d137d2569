"""Issue 18, items 1 and 2: the socket tables people actually type — `netstat -lnp` with its UNIX
section, and `netstat -lp` / `ss -tl` without `-n`, whose ports are service names.

The outputs are written here in net-tools' and iproute2's layouts (column widths as printed).
"""

from __future__ import annotations

import pytest

from runbook.parsers.errors import ParseError
from runbook.parsers.sockets import Socket, is_listening, parse_ss_listening

# `netstat -lnp` as root (net-tools 2.10): no -t, so UDP, raw and the UNIX domain section follow.
NETSTAT_LNP = """\
Active Internet connections (only servers)
Proto Recv-Q Send-Q Local Address           Foreign Address         State       PID/Program name    
tcp        0      0 127.0.0.53:53           0.0.0.0:*               LISTEN      612/systemd-resolve 
tcp        0      0 0.0.0.0:22              0.0.0.0:*               LISTEN      901/sshd: /usr/sbin 
tcp        0      0 0.0.0.0:8000            0.0.0.0:*               LISTEN      1/python3           
tcp6       0      0 :::22                   :::*                    LISTEN      901/sshd: /usr/sbin 
udp        0      0 127.0.0.53:53           0.0.0.0:*                           612/systemd-resolve 
udp        0      0 0.0.0.0:68              0.0.0.0:*                           588/dhclient        
raw6       0      0 :::58                   :::*                    7           661/NetworkManager  
Active UNIX domain sockets (only servers)
Proto RefCnt Flags       Type       State         I-Node   PID/Program name     Path
unix  2      [ ACC ]     STREAM     LISTENING     22155    1/systemd            /run/systemd/private
unix  2      [ ACC ]     SEQPACKET  LISTENING     14043    1/systemd            /run/udev/control
unix  2      [ ACC ]     STREAM     LISTENING     28714    1180/python3         @/tmp/tcp 0 0 0.0.0.0:9000 x LISTEN
unix  2      [ ]         DGRAM                    9876     -                    /run/systemd/notify
"""

# The same host without -n: hosts and ports by name (a Debian/Ubuntu /etc/services), as a user
# without root sees it (netstat's notice, which goes to stderr, pasted in with 2>&1).
NETSTAT_LP = """\
(Not all processes could be identified, non-owned process info
 will not be shown, you would have to be root to see it all.)
Active Internet connections (only servers)
Proto Recv-Q Send-Q Local Address           Foreign Address         State       PID/Program name    
tcp        0      0 localhost:domain        0.0.0.0:*               LISTEN      -                   
tcp        0      0 0.0.0.0:ssh             0.0.0.0:*               LISTEN      -                   
tcp        0      0 localhost:smtp          0.0.0.0:*               LISTEN      -                   
tcp        0      0 0.0.0.0:8000            0.0.0.0:*               LISTEN      1/python3           
tcp6       0      0 [::]:ssh                [::]:*                  LISTEN      -                   
tcp6       0      0 ip6-localhost:ipp       [::]:*                  LISTEN      -                   
udp        0      0 localhost:domain        0.0.0.0:*                           -                   
Active UNIX domain sockets (only servers)
Proto RefCnt Flags       Type       State         I-Node   PID/Program name     Path
unix  2      [ ACC ]     STREAM     LISTENING     22155    -                    /run/systemd/private
"""


def test_netstat_lnp_reads_the_internet_section_and_skips_the_unix_one():
    sockets = parse_ss_listening(NETSTAT_LNP)
    assert sockets == [Socket("127.0.0.53", 53, "LISTEN"), Socket("0.0.0.0", 22, "LISTEN"),
                       Socket("0.0.0.0", 8000, "LISTEN"), Socket("::", 22, "LISTEN")]
    assert is_listening(sockets, 8000)
    assert not is_listening(sockets, 9000)  # the UNIX socket path that looks like a row is not read


def test_netstat_lnp_with_crlf_and_a_second_capture_after_the_unix_section():
    second = ("Active Internet connections (only servers)\n"
              "Proto Recv-Q Send-Q Local Address           Foreign Address         State       PID/Program name\n"
              "tcp        0      0 0.0.0.0:8001            0.0.0.0:*               LISTEN      7/python3\n")
    sockets = parse_ss_listening((NETSTAT_LNP + second).replace("\n", "\r\n"))
    assert [s.local_port for s in sockets] == [53, 22, 8000, 22, 8001]


def test_netstat_without_n_reads_well_known_service_names():
    sockets = parse_ss_listening(NETSTAT_LP)
    assert sockets == [Socket("localhost", 53, "LISTEN"), Socket("0.0.0.0", 22, "LISTEN"),
                       Socket("localhost", 25, "LISTEN"), Socket("0.0.0.0", 8000, "LISTEN"),
                       Socket("::", 22, "LISTEN"), Socket("ip6-localhost", 631, "LISTEN")]
    assert is_listening(sockets, 8000) and is_listening(sockets, 25)


def test_ss_without_n_on_a_rhel_host_reads_irdmi_as_8000():
    # ss -tl on a RHEL/UBI image: its /etc/services names 8000 `irdmi` and 8080 `webcache`.
    text = ("State  Recv-Q Send-Q Local Address:Port  Peer Address:Port Process\n"
            "LISTEN 0      4096         0.0.0.0:irdmi      0.0.0.0:*\n"
            "LISTEN 0      128          0.0.0.0:webcache   0.0.0.0:*\n"
            "LISTEN 0      128             [::]:ssh           [::]:*\n")
    assert parse_ss_listening(text) == [Socket("0.0.0.0", 8000, "LISTEN"), Socket("0.0.0.0", 8080, "LISTEN"),
                                        Socket("::", 22, "LISTEN")]


def test_a_service_name_whose_port_depends_on_the_host_asks_for_n_and_is_never_guessed():
    # Debian's /etc/services calls 8080 http-alt; RHEL's calls 591 and 8008 http-alt (8080 is webcache).
    text = ("State  Recv-Q Send-Q Local Address:Port  Peer Address:Port Process\n"
            "LISTEN 0      4096         0.0.0.0:http-alt   0.0.0.0:*\n")
    with pytest.raises(ParseError) as info:
        parse_ss_listening(text)
    message = str(info.value)
    assert "'http-alt'" in message and "-n" in message and "591, 8008 or 8080" in message
    assert info.value.line == 2


def test_an_unknown_service_name_asks_for_numeric_output():
    text = ("Active Internet connections (only servers)\n"
            "Proto Recv-Q Send-Q Local Address           Foreign Address         State\n"
            "tcp        0      0 0.0.0.0:jetdirect       0.0.0.0:*               LISTEN\n")
    with pytest.raises(ParseError, match=r"service name.*'jetdirect'.*netstat -tlnp.*ss -tln") as info:
        parse_ss_listening(text)
    assert info.value.line == 3
