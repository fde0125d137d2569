"""Text the simulated world prints: the layouts of nvidia-smi, ps, fuser, /proc/net/tcp and ss.

Pure functions from plain values to the exact text the real tools print (shapes copied from
real captures), so the parsers meet in drills what they meet on a node.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
from collections.abc import Iterable, Sequence

DRIVER_VERSION = "570.172.08"
CUDA_VERSION = "12.8"
_Q_WIDTH = 55  # label column of `nvidia-smi -q` (recent drivers)


@dataclasses.dataclass(frozen=True)
class GpuView:
    index: int
    name: str
    uuid: str
    bus_id: str
    total_mib: int
    reserved_mib: int
    used_mib: int
    bar1_total_mib: int
    bar1_used_mib: int
    utilization_pct: int

    @property
    def free_mib(self) -> int:
        return max(0, self.total_mib - self.reserved_mib - self.used_mib)


def _q(indent: int, label: str, value: str | None = None) -> str:
    text = " " * indent + label
    if value is None:
        return text
    return f"{text.ljust(_Q_WIDTH)}: {value}"


def nvidia_smi_memory_report(gpus: Sequence[GpuView], now: dt.datetime) -> str:
    """`nvidia-smi -q -d MEMORY`."""
    lines = ["", "==============NVSMI LOG==============", "",
             _q(0, "Timestamp", _ctime(now)),
             _q(0, "Driver Version", DRIVER_VERSION),
             _q(0, "CUDA Version", CUDA_VERSION),
             "",
             _q(0, "Attached GPUs", str(len(gpus)))]
    for g in gpus:
        lines += [f"GPU {g.bus_id}",
                  _q(4, "FB Memory Usage"),
                  _q(8, "Total", f"{g.total_mib} MiB"),
                  _q(8, "Reserved", f"{g.reserved_mib} MiB"),
                  _q(8, "Used", f"{g.used_mib} MiB"),
                  _q(8, "Free", f"{g.free_mib} MiB"),
                  _q(4, "BAR1 Memory Usage"),
                  _q(8, "Total", f"{g.bar1_total_mib} MiB"),
                  _q(8, "Used", f"{g.bar1_used_mib} MiB"),
                  _q(8, "Free", f"{g.bar1_total_mib - g.bar1_used_mib} MiB"),
                  _q(4, "Conf Compute Protected Memory Usage"),
                  _q(8, "Total", "0 MiB"),
                  _q(8, "Used", "0 MiB"),
                  _q(8, "Free", "0 MiB"),
                  ""]
    return "\n".join(lines) + "\n"


def _ctime(t: dt.datetime) -> str:
    t = t.astimezone(dt.timezone.utc)
    return f"{t:%a %b} {t.day:>2} {t:%H:%M:%S %Y}"


def query_gpu_csv(gpus: Iterable[GpuView]) -> str:
    """`nvidia-smi --query-gpu=index,uuid,memory.used,memory.total,utilization.gpu
    --format=csv,noheader,nounits`."""
    return "".join(f"{g.index}, {g.uuid}, {g.used_mib}, {g.total_mib}, {g.utilization_pct}\n" for g in gpus)


def compute_apps_csv(apps: Iterable[tuple[str, int, int, str]]) -> str:
    """`nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory,process_name
    --format=csv,noheader,nounits` from (gpu uuid, pid, MiB, process name)."""
    return "".join(f"{uuid}, {pid}, {mib}, {name}\n" for uuid, pid, mib, name in apps)


def no_devices() -> str:
    return "No devices were found\n"


def gpu_reset_ok(bus_id: str) -> str:
    return f"GPU {bus_id} was successfully reset.\nAll done.\n"


def gpu_reset_in_use(bus_id: str) -> str:
    return (f"The following GPUs could not be reset:\n"
            f"  GPU {bus_id}: In use by another client\n\n"
            f"1 device is currently being used by one or more other processes (e.g., Fabric Manager, "
            f"CUDA application, graphics application such as an X server, or a monitoring application "
            f"such as another instance of nvidia-smi). Please first kill all processes using this device "
            f"and all compute applications running in the system.\n")


def gpu_not_found(index: str) -> str:
    return f"No GPU found with the specified ID: {index}. Use nvidia-smi -L to see the list of GPUs.\n"


# ---------------------------------------------------------------------------- processes

@dataclasses.dataclass(frozen=True)
class PsRow:
    pid: int
    ppid: int
    stat: str
    etimes: int
    args: str


def ps_eo(rows: Iterable[PsRow]) -> str:
    """`ps -eo pid,ppid,stat,etimes,args` (procps-ng: 7-wide pids, STAT left-aligned)."""
    out = [f"{'PID':>7} {'PPID':>7} {'STAT':<4} {'ELAPSED':>7} COMMAND"]
    for r in sorted(rows, key=lambda r: r.pid):
        out.append(f"{r.pid:>7} {r.ppid:>7} {r.stat:<4} {r.etimes:>7} {r.args}")
    return "\n".join(out) + "\n"


@dataclasses.dataclass(frozen=True)
class FuserEntry:
    device: str
    user: str
    pid: int
    access: str
    command: str


def device_sort_key(path: str) -> str:
    """The order a shell glob lists /dev/nvidia* in a UTF-8 locale (punctuation ignored)."""
    return path.replace("-", "")


def fuser_v(entries: Iterable[FuserEntry]) -> str:
    """`fuser -v /dev/nvidia*` (stderr and stdout together): header, then one block per file."""
    by_device: dict[str, list[FuserEntry]] = {}
    for e in entries:
        by_device.setdefault(e.device, []).append(e)
    if not by_device:
        return ""
    out = [f"{'':20} {'USER':<8}{'PID':>7} ACCESS COMMAND"]
    for device in sorted(by_device, key=device_sort_key):
        for i, e in enumerate(sorted(by_device[device], key=lambda e: e.pid)):
            name = f"{device}:" if i == 0 else ""
            out.append(f"{name:<20} {e.user:<8}{e.pid:>7} {e.access} {e.command}")
    return "\n".join(out) + "\n"


def cgroup_v2(path: str) -> str:
    return f"0::{path}\n"


USER_HZ = 100  # clock ticks per second in /proc (every Linux architecture the GPU nodes run)


def proc_stat(pid: int, comm: str, state: str, ppid: int, start_ticks: int, *, threads: int = 1) -> str:
    """`/proc/<pid>/stat`: 52 fields (Linux 5.x/6.x), comm in parentheses, starttime at field 22."""
    fields = [str(pid), f"({comm[:15]})", state, str(ppid), str(pid), str(pid), "0", "-1", "4194560",
              "12873", "0", "0", "0", "412", "97", "0", "0", "20", "0", str(threads), "0", str(start_ticks),
              "8318287872", "164123", "18446744073709551615"] + ["0"] * 27
    return " ".join(fields) + "\n"


# ---------------------------------------------------------------------------- sockets

LISTEN = 0x0A
ESTABLISHED = 0x01
CLOSE_WAIT = 0x08


@dataclasses.dataclass(frozen=True)
class Socket:
    local: str  # IP address
    local_port: int
    remote: str
    remote_port: int
    state: int
    inode: int
    tx_queue: int = 0
    rx_queue: int = 0
    uid: int = 0


def _hex4(ip: str) -> str:
    return ipaddress.IPv4Address(ip).packed[::-1].hex().upper()


def _hex6(ip: str) -> str:
    packed = ipaddress.IPv6Address(ip).packed
    return "".join(packed[i:i + 4][::-1].hex().upper() for i in range(0, 16, 4))


def proc_net_tcp(sockets: Sequence[Socket]) -> str:
    """`/proc/net/tcp`: kernel layout, every line padded to 149 columns."""
    head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"
    lines = [head.ljust(149)]
    for i, s in enumerate(sockets):
        line = (f"{i:>4}: {_hex4(s.local)}:{s.local_port:04X} {_hex4(s.remote)}:{s.remote_port:04X} "
                f"{s.state:02X} {s.tx_queue:08X}:{s.rx_queue:08X} 00:00000000 00000000 {s.uid:>5} "
                f"{0:>8} {s.inode} 1 0000000000000000 100 0 0 10 0")
        lines.append(line.ljust(149))
    return "\n".join(lines) + "\n"


def proc_net_tcp6(sockets: Sequence[Socket]) -> str:
    """`/proc/net/tcp6`."""
    lines = ["  sl  local_address                         remote_address                        st tx_queue "
             "rx_queue tr tm->when retrnsmt   uid  timeout inode"]
    for i, s in enumerate(sockets):
        lines.append(f"{i:>4}: {_hex6(s.local)}:{s.local_port:04X} {_hex6(s.remote)}:{s.remote_port:04X} "
                     f"{s.state:02X} {s.tx_queue:08X}:{s.rx_queue:08X} 00:00000000 00000000 {s.uid:>5} "
                     f"{0:>8} {s.inode} 1 0000000000000000 100 0 0 10 0")
    return "\n".join(lines) + "\n"


def ss_tln(listeners: Sequence[tuple[str, int, int]]) -> str:
    """`ss -tln` without a terminal, from (address, port, backlog): addresses right-aligned on
    the colon, ports left-aligned, and the header's last column glued to `Process`."""
    rows = [("LISTEN", "0", str(backlog), addr if ":" not in addr else f"[{addr}]", str(port),
             "0.0.0.0" if ":" not in addr else "[::]", "*") for addr, port, backlog in listeners]
    head = ("State", "Recv-Q", "Send-Q", "Local Address", "Port", "Peer Address", "Port")
    w = [max(len(r[i]) for r in [head, *rows]) for i in range(7)]
    out = [f"{head[0]:<{w[0]}} {head[1]:<{w[1]}} {head[2]:<{w[2]}} {head[3]:>{w[3]}}:{head[4]:<{w[4]}} "
           f"{head[5]:>{w[5]}}:{head[6]:<{w[6]}}Process"]
    for r in rows:
        out.append(f"{r[0]:<{w[0]}} {r[1]:<{w[1]}} {r[2]:<{w[2]}} {r[3]:>{w[3]}}:{r[4]:<{w[4]}} "
                   f"{r[5]:>{w[5]}}:{r[6]:<{w[6]}}")
    return "\n".join(out) + "\n"
