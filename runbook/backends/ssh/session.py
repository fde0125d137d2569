"""paramiko at work: connecting through jump hosts with strict host keys, and running one command.

Imported on the first node command only; every paramiko and socket error leaves as a `runbook.errors` one,
and every phase of a command, the connect included, ends by the command's one `Deadline`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import select
import shlex
import socket
import threading
import time
from collections.abc import Sequence

import paramiko
from paramiko.common import cMSG_CHANNEL_REQUEST
from paramiko.message import Message

from runbook.backends.base import CommandResult
from runbook.backends.ssh.deadline import Deadline, DeadlinePassed
from runbook.backends.ssh.inventory import Hop, Target, Timeouts
from runbook.errors import BackendUnavailable, CommandFailed, InvalidInput, RunbookError

CHUNK = 32 * 1024
# OpenSSH's MaxSessions defaults to 10 channels per connection; steps side by side stay below it
MAX_CHANNELS = 8
TIMED_OUT = (124, 137)  # coreutils `timeout`: the command got SIGTERM (124), or SIGKILL after --kill-after (137)
# the shell's words when `timeout` itself is missing (bash, dash, busybox ash), not timeout's own
# "failed to run command" for a missing command
_NO_TIMEOUT = re.compile(r"timeout: (?:command )?not found|timeout: No such file")
_KEYSCAN_TYPE = {"ssh-ed25519": "ed25519", "ssh-rsa": "rsa", "ecdsa-sha2-nistp256": "ecdsa",
                 "ecdsa-sha2-nistp384": "ecdsa", "ecdsa-sha2-nistp521": "ecdsa"}


# paramiko's transport thread logs each failure with a traceback; with no handler configured, Python
# would print it on the on-call's terminal. The error we raise says the same in one line.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class HostKeyRefused(BackendUnavailable):
    """The node's host key is unknown or does not match the pinned one: nothing was sent to it."""


class StaleConnection(BackendUnavailable):
    """No session could be opened on a cached connection: nothing ran, so reconnecting is safe."""


class CommandTimedOut(DeadlinePassed):
    """The command passed its deadline and was ended; what it printed until then is kept."""

    def __init__(self, message: str, stdout: str = "", stderr: str = "", *, phase: str = "output"):
        super().__init__(message, phase=phase, stdout=stdout, stderr=stderr)


@dataclasses.dataclass(frozen=True)
class Options:
    timeouts: Timeouts
    allow_agent: bool
    max_output_bytes: int
    remote_timeout: bool


def _known_line(hop: Hop, key: paramiko.PKey) -> str:
    return f"{hop.known_hosts_name} {key.get_name()} {key.get_base64()}"


class _RefuseUnknown(paramiko.MissingHostKeyPolicy):
    """Like paramiko's RejectPolicy, with a message that says how to add the key safely."""

    def __init__(self, hop: Hop, via: Hop | None):
        self.hop, self.via = hop, via

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        hop = self.hop
        files = " or ".join(hop.known_hosts)
        keyscan = (f"ssh-keyscan -p {hop.port} -t {_KEYSCAN_TYPE.get(key.get_name(), key.get_name())} "
                   f"{shlex.quote(hop.host)} >> {shlex.quote(hop.known_hosts[0])}")
        where = f" (run it on {self.via.label}, the jump host)" if self.via else ""
        raise HostKeyRefused(
            f"{hop.label}: host {hop.known_hosts_name} is not in {files}, and runbook never trusts a host key on "
            f"first use. It offered {key.get_name()} {key.fingerprint}. Check that fingerprint on the node "
            f"(`ssh-keygen -lf /etc/ssh/ssh_host_{_KEYSCAN_TYPE.get(key.get_name(), 'ed25519')}_key.pub`), then add "
            f"the key: `{keyscan}`{where}, or append this line: {_known_line(hop, key)}")


def _changed(hop: Hop, exc: paramiko.BadHostKeyException) -> HostKeyRefused:
    got, expected = exc.key, exc.expected_key
    files = " or ".join(hop.known_hosts)
    return HostKeyRefused(
        f"{hop.label}: the host key of {hop.known_hosts_name} CHANGED — {files} pins {expected.get_name()} "
        f"{expected.fingerprint}, the server offered {got.get_name()} {got.fingerprint}. Someone may be "
        f"intercepting the connection, or the node was reinstalled. Check the new fingerprint on the node; only "
        f"then replace the old entry: `ssh-keygen -R {shlex.quote(hop.known_hosts_name)} -f "
        f"{shlex.quote(hop.known_hosts[0])}` and append: {_known_line(hop, got)}")


def _load_key(hop: Hop, allow_agent: bool) -> paramiko.PKey | None:
    """The configured key file, loaded here so a bad file is a config error, not 'authentication failed'."""
    if not hop.key_file_explicit:
        return None
    path = hop.key_files[0]
    try:
        return paramiko.PKey.from_path(path)
    except (paramiko.PasswordRequiredException, TypeError) as exc:
        # an OpenSSH-format key with a passphrase surfaces as cryptography's TypeError, not paramiko's own
        if isinstance(exc, TypeError) and "password" not in str(exc).lower():
            raise InvalidInput(f"key file {path} cannot be used as an SSH private key: {exc}") from None
        if allow_agent:
            return None  # the operator's agent may hold it unlocked; authentication says so if not
        raise InvalidInput(f"key file {path} is encrypted; runbook needs a key without a passphrase "
                           f"(or, on the command line, an ssh-agent holding it)") from None
    except (paramiko.SSHException, OSError, ValueError) as exc:
        raise InvalidInput(f"key file {path} cannot be used as an SSH private key: {exc}") from None


class Connection:
    """The SSH clients of one target: jump hosts first, the node last; closed together."""

    def __init__(self, target: Target, clients: list[paramiko.SSHClient]):
        self.target, self.clients = target, clients
        self.channels = threading.BoundedSemaphore(MAX_CHANNELS)

    @property
    def transport(self) -> paramiko.Transport:
        transport = self.clients[-1].get_transport()
        if transport is None:
            raise paramiko.SSHException("the connection is closed")
        return transport

    @property
    def alive(self) -> bool:
        return all((c.get_transport() is not None and c.get_transport().is_active()) for c in self.clients)

    def close(self) -> None:
        for client in reversed(self.clients):
            _abort(client)


def _abort(client: paramiko.SSHClient) -> None:
    """Close a client from any thread, even mid-handshake: a transport not started yet ignores close(),
    so its socket is closed too, and every paramiko wait on it ends."""
    transport = client.get_transport()
    client.close()
    if transport is not None:
        try:
            transport.sock.close()
        except (OSError, EOFError, paramiko.SSHException):
            pass


def _connect_phase(client: paramiko.SSHClient, hop: Hop, jump: bool) -> str:
    """Which part of the handshake a client is in, for the message when the deadline passes there."""
    transport = client.get_transport()
    if transport is None:
        phase = "TCP connect"
    elif not transport.remote_version:
        phase = "SSH banner"
    elif not transport.initial_kex_done:
        phase = "key exchange"
    elif not transport.is_authenticated():
        phase = "authentication"
    else:
        phase = "connect"
    return f"{phase} with jump host {hop.label}" if jump else phase


def _handshake_problem(transport: paramiko.Transport | None, exc: paramiko.SSHException, opts: Options) -> str | None:
    """What went wrong before login, in words, when paramiko's own message would mislead.

    paramiko says "Error reading SSH protocol banner" whether the port stayed silent or hung up,
    and "No existing session" when a server sent its banner but never finished the key exchange.
    """
    t = opts.timeouts
    banner_error = exc if str(exc).startswith("Error reading SSH protocol banner") else None
    if banner_error is None and transport is not None and not transport.remote_version:
        # the connect timeout ended the wait first; the transport thread may have failed meanwhile
        found = transport.get_exception()
        banner_error = found if found is not None and str(found).startswith("Error reading") else None
        if banner_error is None:
            waited = min(t.connect, t.banner)
            return f"no SSH banner within {waited:g}s: the port accepted the connection but said nothing"
    if banner_error is not None:
        if isinstance(banner_error.__context__, (TimeoutError, socket.timeout)):
            return f"no SSH banner within {t.banner:g}s: the port accepted the connection but said nothing"
        return ("the server closed the connection before sending an SSH banner "
                "(is this port an SSH server, and does it accept this client's address?)")
    text = str(exc)
    if text.startswith("Indecipherable protocol version"):
        return f"the server does not speak SSH: it sent {text.partition(' version ')[2][:80]} instead of a banner"
    if transport is not None and transport.remote_version and not transport.initial_kex_done:
        return (f"the server sent its banner ({transport.remote_version[:80]}) but did not finish the key exchange "
                f"within {t.connect:g}s")
    return None


def _connect_hop(hop: Hop, sock: paramiko.Channel | None, via: Hop | None, opts: Options, deadline: Deadline,
                 *, jump: bool) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    deadline.phase("connect", lambda: _connect_phase(client, hop, jump))
    deadline.on_expiry(lambda: _abort(client))
    try:
        return _connect_client(client, hop, sock, via, opts, deadline)
    except HostKeyRefused:
        raise  # whatever the clock says, a refused host key is the news
    except Exception:
        if deadline.reached():  # what paramiko said once the watchdog closed the socket is noise
            raise deadline.error() from None
        raise


def _connect_client(client: paramiko.SSHClient, hop: Hop, sock: paramiko.Channel | None, via: Hop | None,
                    opts: Options, deadline: Deadline) -> paramiko.SSHClient:
    t = opts.timeouts
    where = f"{hop.label} ({hop.user}@{hop.host}:{hop.port}{f' via {via.label}' if via else ''})"
    try:
        for path in hop.known_hosts:
            try:
                client.load_system_host_keys(path)  # "system" keys are read-only: paramiko never writes them back
            except FileNotFoundError:
                pass  # an absent default ~/.ssh/known_hosts knows no host; the refusal says how to create it
        client.set_missing_host_key_policy(_RefuseUnknown(hop, via))
        pkey = _load_key(hop, opts.allow_agent)
        client.connect(hop.host, hop.port, username=hop.user, pkey=pkey,
                       key_filename=None if hop.key_file_explicit else (list(hop.key_files) or None),
                       timeout=deadline.bounded(t.connect), banner_timeout=deadline.bounded(t.banner),
                       auth_timeout=deadline.bounded(t.auth), channel_timeout=deadline.bounded(t.channel),
                       allow_agent=opts.allow_agent, look_for_keys=opts.allow_agent and not hop.key_files,
                       sock=sock)
    except RunbookError:
        client.close()
        raise
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise _changed(hop, exc) from None
    except paramiko.AuthenticationException as exc:
        client.close()
        keys = ", ".join(hop.key_files) or ("the agent's and ~/.ssh keys" if opts.allow_agent else "no key")
        raise BackendUnavailable(f"ssh {where}: authentication refused (tried {keys}): {exc}") from None
    except paramiko.SSHException as exc:
        handshake = _handshake_problem(client.get_transport(), exc, opts)
        client.close()
        if "no authentication methods" in str(exc).lower():
            raise BackendUnavailable(f"ssh {where}: no key to log in with: set key_file for it in nodes "
                                     f"(or IdentityFile in the ssh config)") from None
        raise BackendUnavailable(f"ssh {where}: {handshake or exc or type(exc).__name__}") from None
    except (TimeoutError, socket.timeout):
        client.close()
        raise BackendUnavailable(f"ssh {where}: no answer within {t.connect:g}s") from None
    except socket.gaierror as exc:
        client.close()
        raise BackendUnavailable(f"ssh {where}: cannot resolve {hop.host}: {exc.strerror}") from None
    except (OSError, EOFError) as exc:
        transport = client.get_transport()
        client.close()
        reason = "connection refused" if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError) else \
            (getattr(exc, "strerror", None) or str(exc) or type(exc).__name__)
        if transport is not None and transport.remote_version and not transport.initial_kex_done:
            reason = f"the server sent its banner ({transport.remote_version[:80]}) then dropped the key exchange: {reason}"
        raise BackendUnavailable(f"ssh {where}: {reason}") from None
    transport = client.get_transport()
    if transport is not None and t.keepalive:
        transport.set_keepalive(max(1, int(t.keepalive)))
    if transport is not None and isinstance(transport.sock, socket.socket):
        # small request/answer packets: Nagle's algorithm plus delayed ACKs cost ~45 ms per command (measured)
        transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return client


def open_connection(target: Target, opts: Options, deadline: Deadline) -> Connection:
    """Connect hop by hop, within the command's deadline; each jump host opens a direct-tcpip channel
    that carries the next hop."""
    clients: list[paramiko.SSHClient] = []
    hops = [*target.jumps, target.hop]
    try:
        for i, hop in enumerate(hops):
            sock = None
            via = hops[i - 1] if i else None
            if clients:
                transport = clients[-1].get_transport()
                deadline.phase(f"channel open on jump host {via.label}")
                try:
                    if transport is None:
                        raise paramiko.SSHException("the connection is closed")
                    sock = transport.open_channel("direct-tcpip", (hop.host, hop.port), ("127.0.0.1", 0),
                                                  timeout=deadline.bounded(opts.timeouts.channel))
                except (paramiko.SSHException, OSError, EOFError) as exc:
                    if deadline.reached():
                        raise deadline.error() from None
                    raise BackendUnavailable(f"ssh {hop.label}: jump host {via.label} could not reach "
                                             f"{hop.host}:{hop.port}: {exc or type(exc).__name__}") from None
            clients.append(_connect_hop(hop, sock, via, opts, deadline, jump=hop is not target.hop))
    except BaseException:
        for client in reversed(clients):
            client.close()
        raise
    return Connection(target, clients)


# ---------------------------------------------------------------------------- running a command

def check_argv(argv: Sequence[str]) -> list[str]:
    argv = list(argv)
    if not argv:
        raise InvalidInput("an empty command")
    for arg in argv:
        if not isinstance(arg, str):
            raise InvalidInput(f"command argument {arg!r} is not a string")
        if "\0" in arg:
            raise InvalidInput(f"command argument {arg!r} contains a NUL byte, which no command line can carry")
    if argv[0].startswith("-"):
        raise InvalidInput(f"command {argv[0]!r} starts with '-'")
    return argv


def command_line(argv: Sequence[str], *, timeout: float, kill_after: float, remote_timeout: bool) -> str:
    """The string the remote shell runs: argv quoted word by word (the shell sees each as one literal).

    With `remote_timeout`, coreutils `timeout` ends the command at its deadline on the node itself,
    even when this process or the network is gone by then; whole seconds suit busybox's too.
    """
    quoted = shlex.join(argv)
    if not remote_timeout:
        return quoted
    return f"exec timeout -k {max(1, math.ceil(kill_after))} {max(1, math.ceil(timeout))} {quoted}"


class _Capped:
    """Keeps the first `limit` bytes of a stream and counts the rest."""

    def __init__(self, limit: int):
        self.limit, self.data, self.received = limit, bytearray(), 0

    def add(self, chunk: bytes) -> None:
        self.received += len(chunk)
        room = self.limit - len(self.data)
        if room > 0:
            self.data += chunk[:room]

    @property
    def truncated(self) -> bool:
        return self.received > len(self.data)

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


def _signal(chan: paramiko.Channel, name: str) -> None:
    """RFC 4254 "signal" request. OpenSSH acts on it for non-root logins only (for root, sshd 9.2 logs
    "session signalling requires privilege separation"), hence `timeout` on the node as the main way.

    paramiko has no public call for it; the message is built like its own `resize_pty` builds one.
    """
    try:
        if not chan.transport.clear_to_send.is_set():
            return  # mid key re-exchange a send would wait up to 30 s; the connection is closed next anyway
        m = Message()
        m.add_byte(cMSG_CHANNEL_REQUEST)
        m.add_int(chan.remote_chanid)
        m.add_string("signal")
        m.add_boolean(False)
        m.add_string(name)
        chan.transport._send_user_message(m)  # noqa: SLF001 - see the docstring
    except Exception:  # best effort: closing the channel follows anyway
        pass


def shown_command(argv: Sequence[str]) -> str:
    """argv as a shell would take it, cut to a length a message can carry."""
    shown = shlex.join(argv)
    return shown if len(shown) <= 200 else shown[:197] + "..."


def deadline_seconds(timeout: float, opts: Options) -> float:
    """The whole command's deadline: its timeout, plus the time the node's `timeout` needs to end it.

    The node's own `timeout` ends the command; the margin covers a node that stopped answering.
    """
    return timeout + ((math.ceil(opts.timeouts.kill_after) + 3.0) if opts.remote_timeout else 0.0)


def execute(conn: Connection, argv: Sequence[str], *, timeout: float, opts: Options,
            deadline: Deadline) -> CommandResult:
    """Run argv on the connection's node; output capped per stream; ended at the deadline."""
    label = conn.target.node
    shown = shown_command(argv)
    # waiting behind other commands is not a hang of this connection: nothing is closed for it
    deadline.phase("wait for a free channel")
    if not conn.channels.acquire(timeout=deadline.left()):
        raise BackendUnavailable(f"`{shown}` on {label}: {MAX_CHANNELS} commands were running there until this "
                                 f"one's deadline ({deadline.seconds:g}s); not started")
    try:
        # from here on, a deadline passed means this connection hangs: closed, so no command reuses it half-open
        deadline.on_expiry(conn.close)
        return _execute(conn, argv, shown, timeout=timeout, opts=opts, deadline=deadline)
    finally:
        conn.channels.release()


def _execute(conn: Connection, argv: Sequence[str], shown: str, *, timeout: float, opts: Options,
             deadline: Deadline) -> CommandResult:
    label = conn.target.node
    grace = deadline_seconds(timeout, opts) - timeout
    deadline.phase("channel open")
    try:
        chan = conn.transport.open_session(timeout=deadline.bounded(opts.timeouts.channel))
    except (paramiko.SSHException, OSError, EOFError) as exc:
        if deadline.reached():
            raise deadline.error() from None
        raise StaleConnection(f"{label}: cannot open an SSH session: {exc or type(exc).__name__}") from None
    out, err = _Capped(opts.max_output_bytes), _Capped(opts.max_output_bytes)
    # past this much output the command is a runaway: closing the channel ends it (SIGPIPE)
    drain_limit = 4 * opts.max_output_bytes
    # what the connect left of the timeout: the node ends the command at the caller's deadline, not later
    remote_seconds = max(1.0, deadline.left() - grace)
    line = command_line(argv, timeout=remote_seconds, kill_after=opts.timeouts.kill_after,
                        remote_timeout=opts.remote_timeout)
    # the watchdog's last word to a command still running at the deadline, before the connection closes
    deadline.on_expiry(lambda: _signal(chan, "KILL"), first=True)
    try:
        deadline.phase("exec request")
        started = time.monotonic()
        chan.exec_command(line)  # paramiko waits for the reply without a timeout: the watchdog ends that wait
        chan.shutdown_write()  # no stdin: a command that reads it gets EOF, not a hang
        deadline.phase("output")
        while True:
            while chan.recv_ready() and out.received + err.received <= drain_limit:
                out.add(chan.recv(CHUNK))
            while chan.recv_stderr_ready() and out.received + err.received <= drain_limit:
                err.add(chan.recv_stderr(CHUNK))
            if out.received + err.received > drain_limit:
                _signal(chan, "KILL")
                return CommandResult(out.text(), err.text(), -1, truncated=True)
            if chan.eof_received and not chan.recv_ready() and not chan.recv_stderr_ready():
                deadline.phase("exit status")
                if chan.status_event.wait(deadline.left()):
                    break
            elif chan.closed:
                break
            if deadline.reached():
                break
            left = deadline.left()
            if not (chan.recv_ready() or chan.recv_stderr_ready() or chan.eof_received):
                select.select([chan], [], [], min(left, 1.0))
        if deadline.reached():  # the watchdog closed the channel: whatever it holds now is no exit status
            raise _timed_out(deadline, shown, timeout, grace, out, err, opts)
        code = chan.recv_exit_status()
    except DeadlinePassed as exc:
        if exc.phase in ("output", "exit status") and not isinstance(exc, CommandTimedOut):
            raise _timed_out(deadline, shown, timeout, grace, out, err, opts) from None
        raise
    except (paramiko.SSHException, OSError, EOFError) as exc:
        if deadline.reached():
            if deadline.passed_in in ("output", "exit status"):
                raise _timed_out(deadline, shown, timeout, grace, out, err, opts) from None
            raise deadline.error() from None
        raise BackendUnavailable(f"`{shown}` on {label}: the connection failed: {exc or type(exc).__name__}") from None
    finally:
        try:
            chan.close()
        except (paramiko.SSHException, OSError, EOFError):
            pass  # the watchdog closed the connection under it: the channel is gone with it
    elapsed = time.monotonic() - started
    if opts.remote_timeout and code in TIMED_OUT and elapsed >= math.ceil(remote_seconds) - 0.05:
        raise CommandTimedOut(f"`{shown}` on {label} did not finish within {timeout:g}s and was ended on the node "
                              f"({'SIGTERM' if code == 124 else 'SIGKILL'}){_tail(err)}", out.text(), err.text())
    if opts.remote_timeout and code == 127 and _NO_TIMEOUT.search(err.text()[:300]) and not out.received:
        raise CommandFailed(f"{label} has no `timeout` command (coreutils) to bound commands with; install it, "
                            f"or set nodes.remote_timeout: false")
    return CommandResult(out.text(), err.text(), code, truncated=out.truncated or err.truncated)


def _timed_out(deadline: Deadline, shown: str, timeout: float, grace: float, out: _Capped, err: _Capped,
               opts: Options) -> CommandTimedOut:
    """The command ran into its deadline: it got SIGKILL (best effort) and the connection was closed."""
    phase = deadline.passed_in or "output"
    waited = "its exit status had not come" if phase == "exit status" else "its output had not ended"
    why = (f"nor was it ended on the node within {grace:g}s more (is the node answering?)"
           if opts.remote_timeout else "remote_timeout is off: the command may still run, except for non-root "
           "logins, where sshd passes on SIGKILL")
    return CommandTimedOut(f"`{shown}` on {deadline.node} did not finish within {timeout:g}s: {waited} (the "
                           f"{phase} phase) at the command's deadline of {deadline.seconds:g}s, {why}; the connection "
                           f"was closed{_tail(err)}", out.text(), err.text(), phase=phase)


def _tail(err: _Capped) -> str:
    text = err.text().strip()
    return f": {text[-300:]}" if text else ""
