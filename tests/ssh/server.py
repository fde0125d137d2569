"""A real OpenSSH `sshd` on a loopback port, with throwaway keys, its own config and stand-in tools.

The login's PATH starts with a `bin/` of stand-ins: `nvidia-smi`, `fuser` and `cat` answer from a
world directory the GPU tests fill (outputs made by `runbook.sim.formats`), and small
probes (`argv-dump`, `sleeper`, `blurt`) show what arrived and how commands end.
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from tests.processes import die_with_the_tests

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")
START_TIMEOUT = 10.0

# `alive PID`: the process exists and is not a zombie (a test's killed child stays one until reaped).
_ALIVE = r'''alive() { s=$(/bin/cat "/proc/$1/stat" 2>/dev/null) || return 1; s=${s##*) }; [ "${s%% *}" != Z ]; }'''
# The world's state as the GPU tools see it: the orphan still alive, dead, or the GPU reset since.
_STATE = r'''state=alive
orphan=$(/bin/cat "$W/orphan.pid" 2>/dev/null)
if [ -z "$orphan" ] || ! alive "$orphan"; then state=dead; fi
if [ -e "$W/reset-done" ]; then state=reset; fi'''

STAND_INS = {
    "nvidia-smi": r'''#!/bin/sh
# Stand-in nvidia-smi: the recorded outputs of this world's state; a reset is recorded, not done.
W=@WORLD@
@ALIVE@
printf 'nvidia-smi %s\n' "$*" >> "$W/calls.log"
@STATE@
case "$1" in
  --query-gpu=*) exec /bin/cat "$W/query-gpu.$state" ;;
  --query-compute-apps=*) exec /bin/cat "$W/compute-apps" ;;
  --gpu-reset)
    if [ "$state" = alive ]; then /bin/cat "$W/gpu-reset-in-use"; exit 255; fi
    printf '%s\n' "$3" >> "$W/resets.log"; : > "$W/reset-done"; exec /bin/cat "$W/gpu-reset-ok" ;;
esac
echo "stand-in nvidia-smi: no recorded output for: $*" >&2
exit 2
''',
    "fuser": r'''#!/bin/sh
# Stand-in fuser: `fuser -v` output for the device holders still alive.
W=@WORLD@
@ALIVE@
printf 'fuser %s\n' "$*" >> "$W/calls.log"
@STATE@
[ -s "$W/fuser.$state" ] || exit 1
exec /bin/cat "$W/fuser.$state"
''',
    "cat": r'''#!/bin/sh
# Stand-in cat: recorded /proc/<pid>/cgroup (and /proc/<pid>/stat, where a test put one: the process
# as it would be had its PID been reused) for the world's processes while they live; real cat otherwise.
W=@WORLD@
@ALIVE@
if [ "$#" = 1 ]; then
  case "$1" in
    /proc/*/cgroup|/proc/*/stat)
      pid=${1#/proc/}; pid=${pid%/*}; file=${1##*/}
      if [ -e "$W/$file.$pid" ]; then
        printf 'cat %s\n' "$1" >> "$W/calls.log"
        alive "$pid" || { echo "cat: $1: No such file or directory" >&2; exit 1; }
        exec /bin/cat "$W/$file.$pid"
      fi ;;
  esac
fi
exec /bin/cat "$@"
''',
    # each argument as it arrived, NUL-terminated: the test compares them with what it sent
    "argv-dump": r'''#!/bin/sh
for a in "$@"; do printf '%s\0' "$a"; done
''',
    # `sleeper PIDFILE SECONDS`: records its pid, then sleeps in place (exec keeps the pid)
    "sleeper": r'''#!/bin/sh
echo $$ > "$1"
exec sleep "$2"
''',
    # `blurt BYTES [forever]`: that many bytes of 'x' on stdout (or without end), and a line on stderr
    "blurt": r'''#!/bin/sh
echo "blurting" >&2
if [ "$2" = forever ]; then exec tr '\0' x < /dev/zero; fi
head -c "$1" /dev/zero | tr '\0' x
''',
}


def find_sshd() -> str | None:
    found = shutil.which("sshd")
    return found or next((p for p in SSHD_CANDIDATES if os.access(p, os.X_OK)), None)


def write_key(path: Path) -> str:
    """A new ed25519 key in OpenSSH format at `path` (and `.pub`); returns the public key line."""
    key = ed25519.Ed25519PrivateKey.generate()
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                       serialization.NoEncryption()))
    path.chmod(0o600)
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    path.with_suffix(".pub").write_text(public + "\n")
    return public


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launcher() -> list[str]:
    """How to start sshd: as is, or (root without /run/sshd) with its own /run in a private mount namespace.

    sshd running as root insists on its privilege separation directory /run/sshd; creating it would
    change the machine, a private tmpfs /run changes nothing outside sshd's namespace.
    """
    if os.geteuid() != 0 or os.path.isdir("/run/sshd"):
        return []
    unshare = shutil.which("unshare")
    if unshare is None:
        raise RuntimeError("sshd as root needs /run/sshd, and there is no `unshare` to give it a private one")
    return [unshare, "--mount", "--propagation", "private", "sh", "-c",
            'mount -t tmpfs -o mode=755 runbook-test-run /run && mkdir -m 755 /run/sshd && exec "$@"', "sh"]


@dataclasses.dataclass
class Sshd:
    base: Path
    port: int
    user: str
    client_key: Path
    host_public: str  # "ssh-ed25519 AAAA..."
    process: subprocess.Popen
    log: Path

    @property
    def world(self) -> Path:
        return self.base / "world"

    @property
    def known_hosts_line(self) -> str:
        return f"[127.0.0.1]:{self.port} {self.host_public}"

    def known_hosts(self, path: Path, *lines: str) -> Path:
        path.write_text("".join(line + "\n" for line in (lines or (self.known_hosts_line,))))
        return path

    def connection_pids(self) -> list[int]:
        """The per-connection processes this sshd forked (children of the listener)."""
        pids = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(") ", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == self.process.pid:
                pids.append(int(stat.parent.name))
        return pids

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def start(base: Path, sshd: str) -> Sshd:
    base.mkdir(parents=True, exist_ok=True)
    for d in ("bin", "home", "world"):
        (base / d).mkdir(exist_ok=True)
    host_public = write_key(base / "host_ed25519")
    client_public = write_key(base / "client_ed25519")
    (base / "authorized_keys").write_text(client_public + "\n")
    for name, text in STAND_INS.items():
        script = base / "bin" / name
        script.write_text(text.replace("@WORLD@", str(base / "world")).replace("@ALIVE@", _ALIVE)
                          .replace("@STATE@", _STATE))
        script.chmod(0o755)
    path = f"{base / 'bin'}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
    launcher = _launcher()
    error = ""
    for _ in range(3):  # a free port can be taken between our probe and sshd's bind: try another
        port = free_port()
        config = base / "sshd_config"
        config.write_text(f"""\
ListenAddress 127.0.0.1:{port}
HostKey {base / 'host_ed25519'}
AuthorizedKeysFile {base / 'authorized_keys'}
PidFile none
StrictModes no
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
PrintMotd no
X11Forwarding no
AllowTcpForwarding yes
AllowAgentForwarding yes
MaxStartups 50
MaxSessions 50
SetEnv PATH={path} HOME={base / 'home'}
LogLevel VERBOSE
""")
        log = base / f"sshd-{port}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen([*launcher, sshd, "-D", "-e", "-f", str(config)], stdin=subprocess.DEVNULL,
                                       stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                       preexec_fn=die_with_the_tests)
        server = Sshd(base, port, getpass.getuser(), base / "client_ed25519", host_public, process, log)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and process.poll() is None:
            if _banner(port):
                return server
            time.sleep(0.05)
        server.stop()
        error = log.read_text(errors="replace").strip()[-800:]
        if "Address already in use" not in error:
            break
    raise RuntimeError(f"sshd did not start: {error or 'no output'}")


def _banner(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            return s.recv(64).startswith(b"SSH-2.0-")
    except OSError:
        return False
