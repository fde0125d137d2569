"""Commands the simulated world answers from its state, in pods (exec) and on nodes (SSH).

Exact argv lists, as the actions send them; output in the real tools' layouts
(`sim_formats`). A scenario's `commands:` answer first; anything else the world does not know
ends like a missing binary does (exit 127).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import re
from collections.abc import Callable, Sequence

from runbook.sim import compose
from runbook.sim import formats as fmt
from runbook.backends.base import CommandResult
from runbook.sim.state import GpuState, NodeState, PodState, Proc, WorldState
from runbook.errors import BackendUnavailable
from runbook.parsers import kill_by_identity
from runbook.parsers.errors import ParseError
from runbook.parsers.procs import parse_proc_stat

PS_ARGV = ["ps", "-eo", "pid,ppid,stat,etimes,args"]
MEMORY_ARGV = ["nvidia-smi", "-q", "-d", "MEMORY"]
QUERY_GPU_ARGV = ["nvidia-smi", "--query-gpu=index,uuid,memory.used,memory.total,utilization.gpu",
                  "--format=csv,noheader,nounits"]
COMPUTE_APPS_ARGV = ["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory,process_name",
                     "--format=csv,noheader,nounits"]
FUSER_ARGV = ["sh", "-c", "fuser -v /dev/nvidia* 2>&1"]
KNOWN_BINARIES = {"nvidia-smi", "ps", "cat", "ss", "pgrep", "pkill", "kill", "sh", "fuser"}

_SIGNALS = {"1": "HUP", "2": "INT", "3": "QUIT", "9": "KILL", "15": "TERM", "10": "USR1", "12": "USR2",
            "18": "CONT", "19": "STOP"}
_SIGNAL_NAMES = set(_SIGNALS.values())
_PROC_FILE = re.compile(r"^/proc/(\d+)/(cgroup|stat)$")

# Host processes every node has (pid, ppid, stat, args, cgroup); scenario pids win on a clash.
_SYSTEM = (
    (1, 0, "Ss", "/sbin/init", "/init.scope"),
    (2, 0, "S", "[kthreadd]", "/"),
    (612, 1, "Ss", "/lib/systemd/systemd-journald", "/system.slice/systemd-journald.service"),
    (988, 1, "Ssl", "/usr/bin/containerd", "/system.slice/containerd.service"),
    (1042, 1, "Ss", "sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups", "/system.slice/ssh.service"),
    (1187, 1, "Ssl", "/usr/bin/kubelet --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf "
     "--kubeconfig=/etc/kubernetes/kubelet.conf --config=/var/lib/kubelet/config.yaml "
     "--container-runtime-endpoint=unix:///run/containerd/containerd.sock", "/system.slice/kubelet.service"),
)
_BOOT_AGO = dt.timedelta(days=41, hours=6, minutes=13)


def _ok(stdout: str = "") -> CommandResult:
    return CommandResult(stdout=stdout)


def _fail(stderr: str, code: int = 1, stdout: str = "") -> CommandResult:
    return CommandResult(stdout=stdout, stderr=stderr, exit_code=code)


def _not_modelled(argv: Sequence[str]) -> CommandResult:
    if argv[0] not in KNOWN_BINARIES:
        return _fail(f"sh: 1: {argv[0]}: not found\n", 127)
    return _fail(f"runbook drill: this world has no output for {' '.join(argv)!r} "
                 f"(add it to the scenario's commands:)\n", 127)


def _override(state: WorldState, argv: Sequence[str], *, node: str | None = None, pod: str | None = None,
              container: str | None = None, timeout: float) -> CommandResult | None:
    for c in state.scenario.commands:
        if c.argv != list(argv) or c.node != node or c.pod != pod:
            continue
        if c.container is not None and c.container != container:
            continue
        if c.hang:
            state.wait(timeout)
            raise BackendUnavailable(f"{' '.join(argv)!r} on {node or pod} timed out after {timeout:g}s")
        return CommandResult(stdout=c.stdout, stderr=c.stderr, exit_code=c.exit_code)
    return None


def parse_signal(option: str) -> str | None:
    """`-KILL`, `-9`, `-SIGKILL`, `KILL` -> `KILL`; None when it is not a signal."""
    name = option.lstrip("-").upper().removeprefix("SIG")
    name = _SIGNALS.get(name, name)
    return name if name in _SIGNAL_NAMES else None


# ---------------------------------------------------------------------------- GPUs

def gpu_view(state: WorldState, node: NodeState, gpu: GpuState, now: dt.datetime) -> fmt.GpuView:
    used = state.gpu_used(node, gpu, now)
    return fmt.GpuView(index=gpu.index, name=gpu.name, uuid=gpu.uuid, bus_id=gpu.bus_id, total_mib=gpu.total_mib,
                       reserved_mib=gpu.reserved_mib, used_mib=used, bar1_total_mib=gpu.bar1_total_mib,
                       bar1_used_mib=min(gpu.bar1_total_mib, 2 + used // 1024 if used else 1),
                       utilization_pct=gpu.utilization_pct if state.gpu_busy(node, gpu) else 0)


# ---------------------------------------------------------------------------- in pods

def run_in_pod(state: WorldState, pod: PodState, container: str, argv: Sequence[str], timeout: float) -> CommandResult:
    argv = list(argv)
    found = _override(state, argv, pod=pod.name, container=container, timeout=timeout)
    if found is not None:
        return found
    now = state.now()
    procs = [p for p in pod.procs if p.alive and p.container == container]
    if argv == MEMORY_ARGV:
        node = state.nodes.get(pod.node)
        if node is None or pod.gpu_index is None or pod.gpu_index not in node.gpus:
            return _fail("", 6, stdout=fmt.no_devices())
        return _ok(fmt.nvidia_smi_memory_report([gpu_view(state, node, node.gpus[pod.gpu_index], now)], now))
    if argv == PS_ARGV:
        pod.next_local_pid += 1
        rows = [fmt.PsRow(p.local_pid or 0, p.local_ppid or 0, p.stat, p.etimes(now), p.args) for p in procs]
        rows.append(fmt.PsRow(pod.next_local_pid, 0, "Rs", 0, " ".join(argv)))
        return _ok(fmt.ps_eo(rows))
    if argv == ["cat", "/proc/net/tcp"]:
        return _ok(fmt.proc_net_tcp(_pod_sockets(state, pod, now)))
    if argv == ["cat", "/proc/net/tcp6"]:
        return _ok(fmt.proc_net_tcp6([]))
    if argv == ["ss", "-tln"]:
        return _ok(fmt.ss_tln([("0.0.0.0", port, 2048) for port in pod.listening(now)]))
    if _is_proc_cat(argv):
        def read(pid: int, name: str) -> str | None:
            proc = next((p for p in procs if p.local_pid == pid), None)
            if proc is None:
                return None
            if name == "cgroup":  # the container's cgroup namespace shows its own root only
                return fmt.cgroup_v2("/")
            return fmt.proc_stat(pid, proc.comm, proc.stat[:1], proc.local_ppid or 0, start_ticks(state, proc.started_at))
        return _cat(argv, read)
    if argv[0] in ("pgrep", "pkill"):
        return _pgrep(state, pod, procs, argv)
    if argv[0] == "kill":
        return _kill(state, argv, lambda pid: next((p for p in procs if p.local_pid == pid), None),
                     via=f"pod {pod.namespace}/{pod.name}")
    if is_identity_kill(argv):
        return identity_kill(argv, lambda words: run_in_pod(state, pod, container, words, timeout))
    return _not_modelled(argv)


# ---------------------------------------------------------------------------- /proc and the identity kill

def start_ticks(state: WorldState, started: dt.datetime) -> int:
    """Field 22 of /proc/<pid>/stat: clock ticks from the node's boot to the process's start."""
    return int((started - (state.t0 - _BOOT_AGO)).total_seconds() * fmt.USER_HZ)


def _is_proc_cat(argv: list[str]) -> bool:
    return len(argv) >= 2 and argv[0] == "cat" and all(_PROC_FILE.match(a) for a in argv[1:])


def _cat(argv: list[str], read: Callable[[int, str], str | None]) -> CommandResult:
    """`cat /proc/<pid>/{stat,cgroup}…` as coreutils does it: what exists, an error line per missing file."""
    out, errors = [], []
    for path in argv[1:]:
        m = _PROC_FILE.match(path)
        assert m is not None
        text = read(int(m[1]), m[2])
        if text is None:
            errors.append(f"cat: {path}: No such file or directory\n")
        else:
            out.append(text)
    return CommandResult(stdout="".join(out), stderr="".join(errors), exit_code=1 if errors else 0)


def is_identity_kill(argv: Sequence[str]) -> bool:
    return list(argv[:4]) == ["sh", "-c", kill_by_identity.SCRIPT, kill_by_identity.NAME]


def identity_kill(argv: Sequence[str], run: Callable[[list[str]], CommandResult]) -> CommandResult:
    """What `sh` makes of kill_by_identity.SCRIPT: the same `cat` and `kill` calls, answered by `run`.

    The test servers answer the script through this too; the script itself runs under a real
    `sh` in the SSH and script tests."""
    words = list(argv[4:])
    if not words:
        return _fail("sh: 3: shift: can't shift that many\n", 2)
    signal, rest, lines = words[0], words[1:], []
    while len(rest) >= 3:
        pid, start, cid = rest[:3]
        rest = rest[3:]
        if not pid.isdigit():
            lines.append(f"failed {pid} not a process id")
            continue
        if cid != "-":
            cgroup = run(["cat", f"/proc/{pid}/cgroup"])
            if cgroup.exit_code != 0:
                lines.append(f"gone {pid}")
                continue
            if cid not in cgroup.stdout:
                lines.append(f"changed {pid} container")
                continue
        stat = run(["cat", f"/proc/{pid}/stat"])
        if stat.exit_code != 0:
            lines.append(f"gone {pid}")
            continue
        try:
            now = str(parse_proc_stat(stat.stdout).start_ticks)
        except ParseError:
            now = ""
        if now != start:
            lines.append(f"changed {pid} start {now}")
            continue
        done = run(["kill", "-s", signal, pid])
        lines.append(f"signalled {pid}" if done.exit_code == 0 else
                     f"failed {pid} {(done.stderr + done.stdout).replace(chr(10), ' ')}".rstrip())
    return _ok("".join(line + "\n" for line in lines))


def _pod_sockets(state: WorldState, pod: PodState, now: dt.datetime) -> list[fmt.Socket]:
    base = 40_000_000 + sum(map(ord, pod.uid)) * 97
    peers = [p.ip for p in state.pods.values() if p.workload is None and p.ip] or ["10.244.0.5"]
    sockets = [fmt.Socket("0.0.0.0", port, "0.0.0.0", 0, fmt.LISTEN, base + i)
               for i, port in enumerate(pod.listening(now))]
    port = pod.ports[0] if pod.ports else 8000
    if not pod.serving(now):
        return sockets
    if pod.health == "hang":  # requests accepted, never read: stuck in CLOSE_WAIT with queued bytes
        sockets += [fmt.Socket(pod.ip, port, peers[i % len(peers)], 41822 + 977 * i, fmt.CLOSE_WAIT,
                               base + 10 + i, rx_queue=1187 + 64 * i) for i in range(3)]
    elif pod.listening(now):
        sockets += [fmt.Socket(pod.ip, port, peers[i % len(peers)], 52344 + 1311 * i, fmt.ESTABLISHED,
                               base + 10 + i) for i in range(2)]
    return sockets


def _pgrep(state: WorldState, pod: PodState, procs: list[Proc], argv: list[str]) -> CommandResult:
    signal, full, rest = "TERM", False, argv[1:]
    pattern = None
    i = 0
    while i < len(rest):
        a = rest[i]
        if a == "-f":
            full = True
        elif a == "--signal" and argv[0] == "pkill" and i + 1 < len(rest):
            i += 1
            sig = parse_signal(rest[i])
            if sig is None:
                return _fail(f"pkill: Unknown signal \"{rest[i]}\".\n", 2)
            signal = sig
        elif a.startswith("-") and argv[0] == "pkill" and parse_signal(a) is not None and pattern is None:
            signal = parse_signal(a)  # type: ignore[assignment]
        elif a.startswith("-") and pattern is None:
            return _not_modelled(argv)
        elif pattern is None:
            pattern = a
        else:
            return _fail(f"{argv[0]}: only one pattern can be provided\n", 2)
        i += 1
    if pattern is None:
        return _fail(f"{argv[0]}: no matching criteria specified\nTry `{argv[0]} --help' for more information.\n", 2)
    try:
        regex = re.compile(pattern)
    except re.error:
        return _fail(f"{argv[0]}: cannot compile regular expression '{pattern}'\n", 2)
    matched = [p for p in procs if regex.search(p.match_text if full else p.comm)]
    if not matched:
        return _fail("", 1)
    if argv[0] == "pgrep":
        return _ok("".join(f"{p.local_pid}\n" for p in sorted(matched, key=lambda p: p.local_pid or 0)))
    for p in matched:
        state.kill(p, signal, via=f"pkill in pod {pod.namespace}/{pod.name}")
    return _ok()


def _kill(state: WorldState, argv: list[str], find: Callable[[int], Proc | _HostRow | None], *,
          via: str) -> CommandResult:
    rest = argv[1:]
    signal = "TERM"
    spec = None
    if rest[:1] == ["-s"] and len(rest) > 1:
        spec, rest = rest[1], rest[2:]
    elif rest and rest[0].startswith("-") and len(rest[0]) > 1:
        spec, rest = rest[0][1:], rest[1:]
    if spec is not None:
        sig = parse_signal(spec)
        if sig is None:
            return _fail(f"bash: line 1: kill: {spec}: invalid signal specification\n")
        signal = sig
    if not rest:
        return _fail("kill: usage: kill [-s sigspec | -n signum | -sigspec] pid | jobspec ... or kill -l [sigspec]\n", 2)
    errors, code = [], 0
    for raw in rest:
        if not raw.isdigit():
            errors.append(f"bash: line 1: kill: {raw}: arguments must be process or job IDs\n")
            code = 1
            continue
        pid = int(raw)
        target = find(pid)
        if target is None:
            errors.append(f"bash: line 1: kill: ({pid}) - No such process\n")
            code = 1
            continue
        if isinstance(target, Proc):
            state.kill(target, signal, via=via)
        else:
            state.record("process_signalled", pid=pid, signal=signal, via=via, effect="none")
    return CommandResult(stdout="", stderr="".join(errors), exit_code=code)


# ---------------------------------------------------------------------------- on nodes

@dataclasses.dataclass(frozen=True)
class _HostRow:
    pid: int
    ppid: int
    stat: str
    args: str
    started: dt.datetime
    cgroup: str


def host_table(state: WorldState, node: NodeState, now: dt.datetime) -> dict[int, Proc | _HostRow]:
    """Every process the node's `ps` would list: system ones, containerd shims, the rest."""
    boot = state.t0 - _BOOT_AGO
    table: dict[int, Proc | _HostRow] = {}
    for pid, ppid, stat, args, cgroup in _SYSTEM:
        table[pid] = _HostRow(pid, ppid, stat, args, boot, cgroup)
    for pod in state.pods.values():
        if pod.node == node.name and pod.procs:
            shim = state.shim_pid(pod)
            table[shim] = _HostRow(shim, 1, "Sl", "/usr/bin/containerd-shim-runc-v2 -namespace k8s.io -id "
                                   f"{fmt_sandbox(pod.uid)} -address /run/containerd/containerd.sock",
                                   pod.created_at, "/system.slice/containerd.service")
    for p in node.procs:
        if p.alive:
            table[p.pid] = p
    return table


def _comm(args: str) -> str:
    """The kernel's 15-character process name: `[kthreadd]` for a kernel thread, else the program's base name."""
    if args.startswith("["):
        return args[1:].split("]", 1)[0][:15]
    return args.split(" ", 1)[0].rsplit("/", 1)[-1].rstrip(":")[:15]


def fmt_sandbox(uid: str) -> str:
    return hashlib.sha256(f"{uid}/sandbox".encode()).hexdigest()


def run_on_node(state: WorldState, node: NodeState, argv: Sequence[str], timeout: float) -> CommandResult:
    argv = list(argv)
    found = _override(state, argv, node=node.name, timeout=timeout)
    if found is not None:
        return found
    found = compose.answer(state, node.name, argv, timeout)  # a Docker Compose host's project, if any
    if found is not None:
        return found
    now = state.now()
    gpus = [node.gpus[i] for i in sorted(node.gpus)]
    if argv[0] == "nvidia-smi" and not gpus:
        return _fail("", 9, stdout="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                     "Make sure that the latest NVIDIA driver is installed and running.\n")
    if argv == QUERY_GPU_ARGV:
        return _ok(fmt.query_gpu_csv(gpu_view(state, node, g, now) for g in gpus))
    if argv == COMPUTE_APPS_ARGV:
        by_index = {g.index: g for g in gpus}
        apps = [(by_index[p.gpu_index].uuid, p.pid, p.gpu_memory_mib, p.args.split(" ", 1)[0])
                for p in sorted(node.procs, key=lambda p: (p.gpu_index or 0, p.pid))
                if p.alive and p.visible_to_nvidia_smi and p.gpu_index in by_index and p.holds_memory(now)]
        return _ok(fmt.compute_apps_csv(apps))
    if argv == MEMORY_ARGV:
        return _ok(fmt.nvidia_smi_memory_report([gpu_view(state, node, g, now) for g in gpus], now))
    if argv == FUSER_ARGV:
        entries = []
        for p in node.procs:
            if p.alive and not p.zombie:
                for device in p.holds_devices:
                    access = "F...." if device.startswith("/dev/nvidia-uvm") else "F...m"
                    entries.append(fmt.FuserEntry(device, p.user, p.pid, access, p.comm))
        text = fmt.fuser_v(entries)
        return CommandResult(stdout=text, exit_code=0 if text else 1)
    if argv == PS_ARGV:
        table = host_table(state, node, now)
        rows = [fmt.PsRow(pid, r.ppid, r.stat, max(0, int((now - (r.started_at if isinstance(r, Proc) else
                                                                    r.started)).total_seconds())), r.args)
                for pid, r in table.items()]
        rows.append(fmt.PsRow(node.allocate_pid(set(table)), 1042, "Rs", 0, " ".join(argv)))
        return _ok(fmt.ps_eo(rows))
    if _is_proc_cat(argv):
        table = host_table(state, node, now)

        def read(pid: int, name: str) -> str | None:
            row = table.get(pid)
            if row is None:
                return None
            if name == "cgroup":
                return fmt.cgroup_v2(row.cgroup)
            started = row.started_at if isinstance(row, Proc) else row.started
            comm = row.comm if isinstance(row, Proc) else _comm(row.args)
            return fmt.proc_stat(pid, comm, row.stat[:1], row.ppid, start_ticks(state, started))
        return _cat(argv, read)
    if argv[0] == "kill":
        table = host_table(state, node, now)
        return _kill(state, argv, table.get, via=f"node {node.name}")
    if is_identity_kill(argv):
        return identity_kill(argv, lambda words: run_on_node(state, node, words, timeout))
    if argv[:2] == ["nvidia-smi", "--gpu-reset"]:
        return _gpu_reset(state, node, argv)
    return _not_modelled(argv)


def _gpu_reset(state: WorldState, node: NodeState, argv: list[str]) -> CommandResult:
    if len(argv) != 4 or argv[2] != "-i":
        return _not_modelled(argv)
    raw = argv[3]
    gpu = node.gpus.get(int(raw)) if raw.isdigit() else None
    if gpu is None:
        return _fail("", 6, stdout=fmt.gpu_not_found(raw))
    device = f"/dev/nvidia{gpu.index}"
    users = [p for p in node.procs if p.alive and not p.zombie and
             (device in p.holds_devices or (p.gpu_index == gpu.index and p.gpu_memory_mib))]
    if users:
        return _fail("", 255, stdout=fmt.gpu_reset_in_use(gpu.bus_id))
    state.reset_gpu(node, gpu)
    return _ok(fmt.gpu_reset_ok(gpu.bus_id))
