"""The SSH backend against a real sshd: host keys, timeouts, output caps, quoting, reuse, jump hosts."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import socket
import threading
import time

import paramiko
import pytest

from runbook.backends.ssh.nodes import SshNodes
from runbook.backends.ssh.session import CommandTimedOut, HostKeyRefused
from runbook.errors import BackendUnavailable, InvalidInput
from tests.conftest import missing_integration
from tests.ssh.server import write_key

# values a label or a line of command output could carry; CANARY names a file each would create if run
HOSTILE = ["$(id)", "`id`", ";rm -rf /tmp/runbook-never", "a b", "it's", '"quoted"', "line\nbreak", "*", "~",
           "$HOME", "-n", "\\", "", "\t", "ünï©ødé", "; touch CANARY", "$(touch CANARY)", "`touch CANARY`",
           "&& touch CANARY", "| touch CANARY", "\n touch CANARY", "'; touch CANARY; '", '"; touch CANARY; "']


def fingerprint(public_line: str) -> str:
    kind, data = public_line.split()[:2]
    return paramiko.PKey.from_type_string(kind, base64.b64decode(data)).fingerprint


def dumped(stdout: str) -> list[str]:
    assert stdout.endswith("\0") or stdout == ""
    return stdout.split("\0")[:-1]


def backend(section, **changes) -> SshNodes:
    return SshNodes.from_section({**section, **changes}, server_mode=True)


def test_a_command_runs_with_its_output_exit_code_and_stderr(nodes):
    result = nodes.run("gpu-node-2", ["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=10)
    assert (result.stdout, result.stderr, result.exit_code, result.truncated) == ("out\n", "err\n", 3, False)


@pytest.fixture(scope="module")
def shared_nodes(sshd, tmp_path_factory):
    """One backend for the many small quoting cases (a connection costs ~150 ms here)."""
    known_hosts = sshd.known_hosts(tmp_path_factory.mktemp("shared") / "known_hosts")
    with SshNodes.from_section({"user": sshd.user, "key_file": str(sshd.client_key), "known_hosts": str(known_hosts),
                                "ssh_config": False,
                                "inventory": {"gpu-node-2": {"host": "127.0.0.1", "port": sshd.port}}},
                               server_mode=True) as backend_:
        yield backend_


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_value_arrives_as_one_literal_argument(shared_nodes, world, value):
    nodes = shared_nodes
    canary = world / "CANARY"
    value = value.replace("CANARY", str(canary))
    result = nodes.run("gpu-node-2", ["argv-dump", "first", value, "last"], timeout=10)
    assert result.exit_code == 0, result.stderr
    assert dumped(result.stdout) == ["first", value, "last"]
    assert not canary.exists()


@pytest.mark.parametrize("remote_timeout", [True, False], ids=["wrapped-in-timeout", "bare"])
def test_hostile_values_all_together(section, world, remote_timeout):
    # without the `exec timeout` prefix a naive join would run `; touch …` (checked by hand): test both forms
    values = [v.replace("CANARY", str(world / "CANARY")) for v in HOSTILE]
    with backend(section, remote_timeout=remote_timeout) as nodes:
        assert dumped(nodes.run("gpu-node-2", ["argv-dump", *values], timeout=10).stdout) == values
    assert not (world / "CANARY").exists()


def test_a_hostile_program_name_is_one_word_too(nodes):
    result = nodes.run("gpu-node-2", ["argv-dump; id"], timeout=10)
    assert result.exit_code == 127 and result.stdout == ""
    assert "uid=" not in result.stderr


def test_arguments_no_command_line_can_carry_are_refused(nodes):
    with pytest.raises(InvalidInput, match="NUL"):
        nodes.run("gpu-node-2", ["argv-dump", "a\0b"], timeout=5)
    with pytest.raises(InvalidInput, match="empty"):
        nodes.run("gpu-node-2", [], timeout=5)


def test_one_connection_serves_every_command_of_a_run(nodes, sshd):
    accepted = sshd.log.read_text().count("Accepted publickey")
    for _ in range(3):
        assert nodes.run("gpu-node-2", ["true"], timeout=10).exit_code == 0
    assert len(nodes._connections) == 1
    assert sshd.log.read_text().count("Accepted publickey") == accepted + 1


def test_a_connection_the_server_dropped_is_reopened(nodes, sshd):
    assert nodes.run("gpu-node-2", ["true"], timeout=10).exit_code == 0
    (conn,) = nodes._connections.values()
    for pid in sshd.connection_pids():  # what a restarted sshd or a rebooted node does to an idle connection
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while conn.alive and time.monotonic() < deadline:
        time.sleep(0.02)
    assert nodes.run("gpu-node-2", ["echo", "again"], timeout=10).stdout == "again\n"
    assert next(iter(nodes._connections.values())) is not conn


def test_steps_running_side_by_side_share_the_connection(nodes):
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(nodes.run("gpu-node-2", ["echo", str(i)], timeout=10)))
               for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert sorted(r.stdout for r in results) == [f"{i}\n" for i in range(6)]
    assert len(nodes._connections) == 1


@pytest.fixture
def agent(sshd, tmp_path, monkeypatch):
    """A real ssh-agent holding the client key, as on an operator's laptop."""
    if shutil.which("ssh-agent") is None or shutil.which("ssh-add") is None:
        missing_integration("ssh-agent is not installed (Debian package openssh-client)")
    sock = tmp_path / "agent.sock"
    process = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 5
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        subprocess.run(["ssh-add", "-q", str(sshd.client_key)], check=True, timeout=10, capture_output=True)
        yield sock
    finally:
        process.terminate()
        process.wait(5)


REMOTE_AGENT = ["sh", "-c", 'printf "%s" "${SSH_AUTH_SOCK:-none}"']


def test_the_cli_logs_in_with_the_agent_and_never_forwards_it(section, agent, tmp_path):
    cli = {k: v for k, v in section.items() if k != "key_file"}
    with SshNodes.from_section(cli, server_mode=False, home=tmp_path) as nodes:
        assert nodes.run("gpu-node-2", REMOTE_AGENT, timeout=10).stdout == "none"


def test_the_server_never_uses_the_agent(section, agent, tmp_path):
    with backend(section) as nodes:
        assert nodes._options().allow_agent is False
        assert nodes.run("gpu-node-2", REMOTE_AGENT, timeout=10).stdout == "none"
    write_key(tmp_path / "stranger")
    with backend(section, key_file=str(tmp_path / "stranger")) as nodes, \
            pytest.raises(BackendUnavailable, match="authentication refused"):
        nodes.run("gpu-node-2", ["true"], timeout=5)  # the agent's key would have worked: it was not offered


# ---------------------------------------------------------------------------- host keys

def test_an_unknown_host_key_is_refused_with_the_fix(section, sshd, world, tmp_path):
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    with backend(section, known_hosts=str(empty)) as nodes, pytest.raises(HostKeyRefused) as refused:
        nodes.run("gpu-node-2", ["nvidia-smi", "-L"], timeout=10)
    message = str(refused.value)
    assert f"offered ssh-ed25519 {fingerprint(sshd.host_public)}." in message
    assert f"ssh-keyscan -p {sshd.port} -t ed25519 127.0.0.1 >> {empty}" in message
    assert sshd.known_hosts_line in message  # the exact line to append, once the fingerprint is checked
    assert "never trusts" in message
    assert empty.read_text() == ""  # nothing was added
    assert not (world / "calls.log").exists()  # and nothing ran


def test_a_changed_host_key_is_refused(section, sshd, world, tmp_path):
    other = write_key(tmp_path / "other_host_key")
    pinned = sshd.known_hosts(tmp_path / "pinned", f"[127.0.0.1]:{sshd.port} {other}")
    with backend(section, known_hosts=str(pinned)) as nodes, pytest.raises(HostKeyRefused) as refused:
        nodes.run("gpu-node-2", ["nvidia-smi", "-L"], timeout=10)
    message = str(refused.value)
    assert "CHANGED" in message and "intercepting" in message
    assert f"ssh-keygen -R '[127.0.0.1]:{sshd.port}' -f {pinned}" in message
    assert pinned.read_text() == f"[127.0.0.1]:{sshd.port} {other}\n"
    assert not (world / "calls.log").exists()


def test_a_key_pinned_for_another_port_does_not_count(section, sshd, tmp_path):
    elsewhere = sshd.known_hosts(tmp_path / "kh", f"127.0.0.1 {sshd.host_public}")  # port 22's entry
    with backend(section, known_hosts=str(elsewhere)) as nodes, pytest.raises(HostKeyRefused, match="never trusts"):
        nodes.run("gpu-node-2", ["true"], timeout=10)


def test_hashed_known_hosts_entries_are_honoured(section, sshd, tmp_path):
    from paramiko.hostkeys import HostKeys

    hashed = tmp_path / "hashed"
    hashed.write_text(f"{HostKeys.hash_host(f'[127.0.0.1]:{sshd.port}')} {sshd.host_public}\n")
    with backend(section, known_hosts=str(hashed)) as nodes:
        assert nodes.run("gpu-node-2", ["true"], timeout=10).exit_code == 0


def test_certificate_authority_lines_are_refused_at_start_up(section, sshd, tmp_path):
    marked = sshd.known_hosts(tmp_path / "ca", f"@cert-authority *.example {sshd.host_public}", sshd.known_hosts_line)
    with pytest.raises(InvalidInput, match="@cert-authority lines are not supported"):
        backend(section, known_hosts=str(marked))


# ---------------------------------------------------------------------------- timeouts and limits

def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(") ", 1)[1].startswith("Z"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_a_command_past_its_deadline_is_ended_on_the_node(nodes, tmp_path):
    pidfile = tmp_path / "sleeper.pid"
    started = time.monotonic()
    with pytest.raises(CommandTimedOut, match=r"did not finish within 1s and was ended on the node \(SIGTERM\)"):
        nodes.run("gpu-node-2", ["sleeper", str(pidfile), "30"], timeout=1)
    elapsed = time.monotonic() - started
    assert 0.9 <= elapsed < 4, elapsed
    assert _gone(int(pidfile.read_text()), within=3)
    assert nodes.run("gpu-node-2", ["true"], timeout=5).exit_code == 0  # the connection is still good


def test_without_the_remote_timeout_the_local_deadline_still_holds(section, tmp_path):
    pidfile = tmp_path / "sleeper.pid"
    started = time.monotonic()
    with backend(section, remote_timeout=False) as nodes, pytest.raises(CommandTimedOut, match="within 1s"):
        nodes.run("gpu-node-2", ["sleeper", str(pidfile), "5"], timeout=1)
    assert time.monotonic() - started < 3
    pid = int(pidfile.read_text())
    if not _gone(pid, within=0.5):  # a root login ignores the SSH signal request: end it here
        os.kill(pid, 9)


def test_a_command_exiting_124_by_itself_is_not_a_timeout(nodes):
    assert nodes.run("gpu-node-2", ["sh", "-c", "exit 124"], timeout=5).exit_code == 124


def test_a_missing_command_is_exit_127_not_a_backend_error(nodes):
    result = nodes.run("gpu-node-2", ["no-such-tool", "-q"], timeout=5)
    assert result.exit_code == 127 and "no-such-tool" in result.stderr


def test_large_output_is_capped_and_says_so(section):
    with backend(section, max_output_bytes=64 * 1024) as nodes:
        result = nodes.run("gpu-node-2", ["blurt", str(200 * 1024)], timeout=20)
    assert result.truncated and result.exit_code == 0
    assert result.stdout == "x" * 64 * 1024 and result.stderr == "blurting\n"


def test_output_without_end_is_cut_off_and_ended(section):
    started = time.monotonic()
    with backend(section, max_output_bytes=64 * 1024) as nodes:
        result = nodes.run("gpu-node-2", ["blurt", "0", "forever"], timeout=20)
        assert result.truncated and result.exit_code == -1 and len(result.stdout) == 64 * 1024
        assert nodes.run("gpu-node-2", ["true"], timeout=5).exit_code == 0
    assert time.monotonic() - started < 10


def test_output_within_the_cap_is_whole(nodes):
    result = nodes.run("gpu-node-2", ["blurt", str(300 * 1024)], timeout=20)
    assert not result.truncated and len(result.stdout) == 300 * 1024


# ---------------------------------------------------------------------------- reaching the host

def test_nothing_listening_is_unavailable(section):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: refused
        with backend(section, inventory={"gpu-node-2": {"host": "127.0.0.1", "port": port}}) as nodes, \
                pytest.raises(BackendUnavailable, match="connection refused"):
            nodes.run("gpu-node-2", ["true"], timeout=5)


def test_a_server_that_never_speaks_is_given_up_on_at_the_banner_timeout(section):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        started = time.monotonic()
        with backend(section, inventory={"gpu-node-2": {"host": "127.0.0.1", "port": port}},
                     timeouts={"connect": 1, "banner": 1, "auth": 1}) as nodes, \
                pytest.raises(BackendUnavailable, match="gpu-node-2"):
            nodes.run("gpu-node-2", ["true"], timeout=5)
        assert time.monotonic() - started < 4


def test_a_key_the_node_does_not_know_is_refused(section, tmp_path):
    write_key(tmp_path / "stranger")
    with backend(section, key_file=str(tmp_path / "stranger")) as nodes, \
            pytest.raises(BackendUnavailable, match="authentication refused"):
        nodes.run("gpu-node-2", ["true"], timeout=5)


def test_a_file_that_is_no_key_is_a_config_error(section, tmp_path):
    (tmp_path / "not-a-key").write_text("hello\n")
    with backend(section, key_file=str(tmp_path / "not-a-key")) as nodes, \
            pytest.raises(InvalidInput, match="cannot be used as an SSH private key"):
        nodes.run("gpu-node-2", ["true"], timeout=5)


def test_an_encrypted_key_is_a_config_error_for_the_server(section, tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    locked = tmp_path / "locked"
    locked.write_bytes(ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.BestAvailableEncryption(b"pw")))
    with backend(section, key_file=str(locked)) as nodes, pytest.raises(InvalidInput, match="encrypted"):
        nodes.run("gpu-node-2", ["true"], timeout=5)


def test_a_node_outside_the_inventory_is_never_contacted(nodes):
    with pytest.raises(InvalidInput, match="not in the nodes inventory"):
        nodes.run("gpu-node-9", ["true"], timeout=5)
    with pytest.raises(InvalidInput, match="not a valid node name"):
        nodes.run("gpu-node-2; id", ["true"], timeout=5)


def test_through_a_jump_host(section, sshd):
    inventory = {"bastion": {"host": "127.0.0.1", "port": sshd.port},
                 "gpu-node-2": {"host": "127.0.0.1", "port": sshd.port, "jump": "bastion"}}
    with backend(section, inventory=inventory) as nodes:
        assert nodes.run("gpu-node-2", ["echo", "via bastion"], timeout=10).stdout == "via bastion\n"
        conn = next(iter(nodes._connections.values()))
        assert len(conn.clients) == 2


def test_a_jump_host_with_an_unknown_key_is_refused_too(section, sshd, tmp_path):
    other = write_key(tmp_path / "other")
    inventory = {"bastion": {"host": "127.0.0.1", "port": sshd.port, "known_hosts": str(
                     sshd.known_hosts(tmp_path / "bastion_kh", f"[127.0.0.1]:{sshd.port} {other}"))},
                 "gpu-node-2": {"host": "127.0.0.1", "port": sshd.port, "jump": "bastion"}}
    with backend(section, inventory=inventory) as nodes, pytest.raises(HostKeyRefused, match="bastion: .*CHANGED"):
        nodes.run("gpu-node-2", ["true"], timeout=10)


def test_ssh_config_supplies_what_the_inventory_leaves_unset(section, sshd, tmp_path):
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(f"""\
Host bastion-alias
    HostName 127.0.0.1
    Port {sshd.port}
    IdentityFile {sshd.client_key}
Host gpu-*
    HostName 127.0.0.1
    Port {sshd.port}
    User {sshd.user}
    IdentityFile {sshd.client_key}
    ProxyJump bastion-alias
    StrictHostKeyChecking no
""")
    with SshNodes.from_section({"known_hosts": section["known_hosts"], "ssh_config": str(ssh_config),
                                "inventory": {"gpu-*": {}}}, server_mode=False, home=tmp_path) as nodes:
        target = nodes.resolve("gpu-node-7")
        assert (target.hop.host, target.hop.port, target.hop.user) == ("127.0.0.1", sshd.port, sshd.user)
        assert [h.label for h in target.jumps] == ["bastion-alias"]
        # StrictHostKeyChecking no in the ssh config changes nothing: the pinned file decides
        assert nodes.run("gpu-node-7", ["echo", "ok"], timeout=10).stdout == "ok\n"
