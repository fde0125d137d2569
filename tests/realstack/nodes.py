"""A scenario's GPU nodes as real sshd logins: each node is one test sshd whose stand-in tools
(`nvidia-smi`, `fuser`, `cat`, `kill`, `ps`…) ask the simulated world what that node prints.

The stand-ins reach the world through a small HTTP oracle on loopback in the test process, so the
whole SSH path (keys, host keys, the node's `timeout`, quoting, the login shell expanding
`/dev/nvidia*`) is real and only the tools' answers come from the scenario.
"""

from __future__ import annotations

import http.server
import json
import sys
import threading
from pathlib import Path
from typing import Any

from runbook.commandline import compose_commands
from runbook.sim import commands as sim_commands
from runbook.errors import RunbookError
from tests.ssh import server as sshd_server

# The tools the world answers for; every other program on the node is the machine's own.
TOOLS = ("nvidia-smi", "fuser", "cat", "kill", "ps", "pgrep", "pkill", "ss", "stat", "readlink", "docker", "curl")

STAND_IN = r'''#!@PYTHON@
# Stand-in @TOOL@ on node @NODE@: the simulated world's answer, asked over loopback.
import json, os, sys, urllib.request
argv = [os.path.basename(sys.argv[0])] + sys.argv[1:]
body = json.dumps({"node": "@NODE@", "argv": argv}).encode()
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
with opener.open(urllib.request.Request("@ORACLE@", data=body), timeout=60) as answer:
    done = json.loads(answer.read())
sys.stdout.write(done["stdout"]); sys.stderr.write(done["stderr"])
sys.exit(done["exit_code"])
'''


# `sh` stays the machine's own, but for the compose actions' two file scripts: the compose file they
# change is the simulated host's (issue 16, item 5), so those two alone are asked of the world.
SH_STAND_IN = r'''#!@PYTHON@
# Stand-in sh on node @NODE@: the compose file scripts go to the simulated world, the rest to /bin/sh.
import json, os, sys, urllib.request
SCRIPTS = json.loads(@SCRIPTS@)
if len(sys.argv) > 2 and sys.argv[1] == "-c" and sys.argv[2] in SCRIPTS:
    body = json.dumps({"node": "@NODE@", "argv": ["sh", *sys.argv[1:]]}).encode()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(urllib.request.Request("@ORACLE@", data=body), timeout=60) as answer:
        done = json.loads(answer.read())
    sys.stdout.write(done["stdout"]); sys.stderr.write(done["stderr"])
    sys.exit(done["exit_code"])
os.execv("/bin/sh", ["sh", *sys.argv[1:]])
'''


class Oracle:
    """Answers the stand-ins from the world set in `world` (None: every tool is missing)."""

    def __init__(self) -> None:
        self.world: Any = None
        self.lock: threading.RLock = threading.RLock()
        self.calls: list[tuple[str, list[str]]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                body = json.dumps(outer.answer(request["node"], request["argv"])).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/run"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @staticmethod
    def _as_the_world_sees_it(argv: list[str]) -> list[str]:
        # The node's shell ran `sh -c 'fuser -v /dev/nvidia* 2>&1'`; the world knows that whole line.
        if argv[:2] == ["fuser", "-v"]:
            return list(sim_commands.FUSER_ARGV)
        return argv

    def use(self, world: Any, lock: threading.RLock) -> None:
        """Answer from `world` from now on, holding `lock` (the one its cluster's projection holds)."""
        self.world, self.lock = world, lock

    def answer(self, node: str, argv: list[str]) -> dict[str, Any]:
        with self.lock:
            self.calls.append((node, argv))
            if self.world is None:
                return {"stdout": "", "stderr": f"sh: 1: {argv[0]}: not found\n", "exit_code": 127}
            try:
                done = self.world.nodes.run(node, self._as_the_world_sees_it(argv), timeout=30.0)
            except RunbookError as exc:
                return {"stdout": "", "stderr": f"{exc}\n", "exit_code": 1}
        return {"stdout": done.stdout, "stderr": done.stderr, "exit_code": done.exit_code}

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


class NodeLogins:
    """One sshd per node name, each with stand-ins that speak for that node."""

    def __init__(self, base: Path, binary: str, names: list[str], oracle: Oracle):
        self.servers: dict[str, sshd_server.Sshd] = {}
        try:
            for name in names:
                started = sshd_server.start(base / name, binary)
                for tool in TOOLS:
                    script = started.base / "bin" / tool
                    script.write_text(STAND_IN.replace("@PYTHON@", sys.executable).replace("@TOOL@", tool)
                                      .replace("@NODE@", name).replace("@ORACLE@", oracle.url))
                    script.chmod(0o755)
                sh = started.base / "bin" / "sh"
                sh.write_text(SH_STAND_IN.replace("@PYTHON@", sys.executable).replace("@NODE@", name)
                              .replace("@ORACLE@", oracle.url)
                              .replace("@SCRIPTS@", repr(json.dumps([compose_commands.WRITE_SCRIPT,
                                                                     compose_commands.RESTORE_SCRIPT]))))
                sh.chmod(0o755)
                if self.servers:  # one client key reaches every node, as one inventory key does
                    first = next(iter(self.servers.values()))
                    with (started.base / "authorized_keys").open("a") as keys:
                        keys.write(first.client_key.with_suffix(".pub").read_text())
                self.servers[name] = started
        except BaseException:
            self.stop()
            raise

    def section(self, known_hosts: Path, names: list[str]) -> dict[str, Any]:
        """The config's `nodes:` section for these node names, host keys pinned."""
        first = next(iter(self.servers.values()))
        known_hosts.write_text("".join(self.servers[n].known_hosts_line + "\n" for n in names))
        return {"user": first.user, "key_file": str(first.client_key), "known_hosts": str(known_hosts),
                "ssh_config": False, "timeouts": {"connect": 5, "banner": 5, "auth": 5, "channel": 5},
                "inventory": {n: {"host": "127.0.0.1", "port": self.servers[n].port} for n in names}}

    def stop(self) -> None:
        for running in self.servers.values():
            running.stop()
