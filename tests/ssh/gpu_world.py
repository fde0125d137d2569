"""A GPU node's state for the stand-in tools: two real processes and the nvidia-smi/fuser text about them.

The holders are real `sleep` processes on this machine, so `kill` over SSH really ends them; the
stand-ins read the orphan's liveness to choose what to print. Text comes from the simulated
world's formatters, the layouts the parsers meet on a real node.
"""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

from runbook.sim import formats as fmt

SERVING_CONTAINER = f"{0:064x}"  # FakeCluster's container id for pod vllm-server-0
DEAD_CONTAINER = "1af58b6c1779abd16708ca06db31877479aaca93616d1b057438a0c7c29373b5"
UUIDS = ("GPU-5d3c8f8e-2a61-4c2f-9d55-0b1f62c1e001", "GPU-5d3c8f8e-2a61-4c2f-9d55-0b1f62c1e002")
TOTAL_MIB, SERVING_MIB, ORPHAN_MIB = 81559, 78850, 79872


def _gpu(index: int, used: int, util: int) -> fmt.GpuView:
    return fmt.GpuView(index=index, name="NVIDIA H100 80GB HBM3", uuid=UUIDS[index], bus_id=f"00000000:{24 + 18 * index:02X}:00.0",
                       total_mib=TOTAL_MIB, reserved_mib=349, used_mib=used, bar1_total_mib=131072,
                       bar1_used_mib=2 + used // 1024 if used else 1, utilization_pct=util)


def _cgroup(container: str, pod_uid: str) -> str:
    return fmt.cgroup_v2(f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{pod_uid.replace('-', '_')}"
                         f".slice/cri-containerd-{container}.scope")


@dataclasses.dataclass
class GpuWorld:
    """GPU 0 serves vllm-server-0; GPU 1's memory is held by an orphan nvidia-smi does not list;
    nvidia-persistenced, a host daemon in no container, holds every device (as on real nodes)."""

    directory: Path
    serving: subprocess.Popen
    orphan: subprocess.Popen
    daemon: subprocess.Popen | None
    kill_frees_memory: bool

    @property
    def reset_done(self) -> bool:
        return (self.directory / "reset-done").exists()

    @property
    def resets(self) -> list[str]:
        log = self.directory / "resets.log"
        return log.read_text().split() if log.exists() else []

    @property
    def calls(self) -> list[str]:
        log = self.directory / "calls.log"
        return log.read_text().splitlines() if log.exists() else []

    def pretend_pid_reused(self, pid: int, *, ticks_later: int = 100) -> int:
        """From now on `cat /proc/<pid>/stat` shows a process that started `ticks_later` clock ticks after
        the real one: what the node would show had the process died and its PID been handed out again."""
        real = Path(f"/proc/{pid}/stat").read_text()
        head, tail = real.rsplit(") ", 1)
        fields = tail.split()
        fields[19] = str(int(fields[19]) + ticks_later)  # field 22, starttime
        (self.directory / f"stat.{pid}").write_text(f"{head}) {' '.join(fields)}\n")
        return int(fields[19])

    def pretend_moved_to_container(self, pid: int, container: str) -> None:
        """From now on `cat /proc/<pid>/cgroup` places the process in `container`."""
        (self.directory / f"cgroup.{pid}").write_text(_cgroup(container, "0b7e5a53-2f1d-4c8e-9a11-000000000002"))

    def orphan_alive(self) -> bool:
        return self.orphan.poll() is None

    def gpu1_memory_ratio(self) -> float:
        """What DCGM would report for GPU 1: held while the orphan lives (or after, if killing frees nothing)."""
        if self.reset_done:
            return 0.0
        held = self.orphan_alive() or not self.kill_frees_memory
        return ORPHAN_MIB / TOTAL_MIB if held else 0.0

    def close(self) -> None:
        for p in (self.serving, self.orphan, self.daemon):
            if p is None:
                continue
            if p.poll() is None:
                p.kill()
            p.wait(5)


def build(directory: Path, *, kill_frees_memory: bool = True, host_daemon: bool = True) -> GpuWorld:
    serving = subprocess.Popen(["sleep", "300"], start_new_session=True)
    orphan = subprocess.Popen(["sleep", "300"], start_new_session=True)
    daemon = subprocess.Popen(["sleep", "300"], start_new_session=True) if host_daemon else None
    world = GpuWorld(directory, serving, orphan, daemon, kill_frees_memory)
    s, o = serving.pid, orphan.pid
    write = lambda name, text: (directory / name).write_text(text)  # noqa: E731
    write("orphan.pid", f"{o}\n")
    serving_gpu = _gpu(0, SERVING_MIB + 160, 86)
    write("query-gpu.alive", fmt.query_gpu_csv([serving_gpu, _gpu(1, ORPHAN_MIB, 0)]))
    write("query-gpu.dead", fmt.query_gpu_csv([serving_gpu, _gpu(1, 0 if kill_frees_memory else ORPHAN_MIB, 0)]))
    write("query-gpu.reset", fmt.query_gpu_csv([serving_gpu, _gpu(1, 0, 0)]))
    # the orphan's container is gone, so nvidia-smi lists only the serving process
    write("compute-apps", fmt.compute_apps_csv([(UUIDS[0], s, SERVING_MIB, "python3")]))
    serving_devices = ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"]
    orphan_devices = ["/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"]

    def entries(pid: int, devices: list[str], command: str = "python3") -> list[fmt.FuserEntry]:
        return [fmt.FuserEntry(d, "root", pid, "F...." if d.startswith("/dev/nvidia-uvm") else "F...m", command)
                for d in devices]

    host = entries(daemon.pid, ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"], "nvidia-persiste") if daemon else []
    write("fuser.alive", fmt.fuser_v(entries(s, serving_devices) + entries(o, orphan_devices) + host))
    write("fuser.dead", fmt.fuser_v(entries(s, serving_devices) + host))
    write("fuser.reset", fmt.fuser_v(entries(s, serving_devices) + host))
    write(f"cgroup.{s}", _cgroup(SERVING_CONTAINER, "3f1b2c4d-0000-4000-8000-000000000000"))
    write(f"cgroup.{o}", _cgroup(DEAD_CONTAINER, "87db8b4a-6cb7-524a-ae65-d84aafd11aa2"))
    if daemon is not None:
        write(f"cgroup.{daemon.pid}", fmt.cgroup_v2("/system.slice/nvidia-persistenced.service"))
    write("gpu-reset-ok", fmt.gpu_reset_ok("00000000:2A:00.0"))
    write("gpu-reset-in-use", fmt.gpu_reset_in_use("00000000:2A:00.0"))
    return world
