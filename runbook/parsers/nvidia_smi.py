"""Parsers for nvidia-smi output: --query-gpu and --query-compute-apps CSV, -q -x XML, -q text, the table.

Unavailable values (`[N/A]`, `N/A`, `[Not Supported]`) become None; unreadable output raises ParseError.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any

from runbook.parsers.errors import ParseError, quote

_NEWLINE = re.compile(r"\r\n|\r|\n")
# nvidia-smi writes "[N/A]" in CSV and XML, bare "N/A" in -q text and the table; any bracketed
# value ("[Requested functionality has been deprecated]", "[GPU requires reset]") means "no value"
_UNAVAILABLE = re.compile(r"\[.*\]|N/A|Not Supported|Not Available( .*)?|Unknown( Error)?|", re.I)
_QUANTITY = re.compile(r"([0-9]+(?:\.[0-9]+)?) ?([A-Za-z%]*)", re.ASCII)
_INT = re.compile(r"[0-9]+", re.ASCII)
_MIB = {"": 1.0, "MiB": 1.0, "GiB": 1024.0, "KiB": 1 / 1024}
_PCT = {"": 1.0, "%": 1.0}
_NO_DEVICES = "No devices were found"
_FAILURES = ("NVIDIA-SMI has failed", "Failed to initialize NVML", "Unable to determine the device handle")


@dataclass(frozen=True)
class GpuMemory:
    index: int | None
    uuid: str
    memory_used_mib: float | None
    memory_total_mib: float | None
    utilization_pct: float | None

    @property
    def memory_used_ratio(self) -> float | None:
        known = self.memory_used_mib is not None and self.memory_total_mib
        return self.memory_used_mib / self.memory_total_mib if known else None


@dataclass(frozen=True)
class ComputeApp:
    gpu_uuid: str
    pid: int
    used_memory_mib: float | None
    process_name: str


@dataclass(frozen=True)
class GpuDetail:
    index: int | None  # position in the document: nvidia-smi's index unless the query used -i
    uuid: str | None
    name: str | None
    bus_id: str | None
    memory_total_mib: float | None
    memory_used_mib: float | None
    memory_free_mib: float | None
    processes: tuple[ComputeApp, ...]
    mig_mode: str | None


@dataclass(frozen=True)
class GpuMemoryReport:
    bus_id: str | None
    fb_total_mib: float | None
    fb_reserved_mib: float | None
    fb_used_mib: float | None
    fb_free_mib: float | None
    bar1_total_mib: float | None
    bar1_used_mib: float | None


@dataclass(frozen=True)
class ProcessEntry:
    gpu_bus_id: str
    pid: int
    type: str
    name: str
    used_memory_mib: float | None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass(frozen=True)
class TableGpu:
    index: int
    memory_used_mib: float | None
    memory_total_mib: float | None
    name: str | None = None
    bus_id: str | None = None


@dataclass(frozen=True)
class TableProcess:
    gpu_index: int
    pid: int
    type: str
    process_name: str
    used_memory_mib: float | None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass(frozen=True)
class Table:
    gpus: tuple[TableGpu, ...]
    processes: tuple[TableProcess, ...]


def _prepare(text: str, fmt: str, expected: str | None) -> tuple[list[tuple[int, str]], bool]:
    """(numbered non-blank lines, said "No devices were found"); `expected`=None lets empty text pass."""
    lines = [(n, line.rstrip()) for n, line in enumerate(_NEWLINE.split(text), 1) if line.strip()]
    if not lines and expected:
        raise ParseError(f"empty output; expected {expected}", format=fmt)
    for lineno, line in lines:
        if line.strip().startswith(_FAILURES):
            raise ParseError(f"nvidia-smi reported an error: {quote(line)}", format=fmt, line=lineno)
    return lines, any(line.strip() == _NO_DEVICES for _, line in lines)


def _absent(raw: str | None) -> bool:
    return raw is None or _UNAVAILABLE.fullmatch(raw.strip()) is not None


def _num(raw: str | None, units: dict[str, float], fmt: str, line: int | None, field: str) -> float | None:
    if _absent(raw):
        return None
    m = _QUANTITY.fullmatch(raw.strip())
    if not m or m[2] not in units:
        expected = "/".join(u for u in units if u) or "a number"
        raise ParseError(f"{field}: expected a number ({expected}), found {quote(raw)}", format=fmt, line=line)
    return float(m[1]) * units[m[2]]


def _int(raw: str | None, fmt: str, line: int | None, field: str) -> int | None:
    if not _absent(raw) and not _INT.fullmatch(raw.strip()):
        raise ParseError(f"{field}: expected an integer, found {quote(raw)}", format=fmt, line=line)
    return None if _absent(raw) else int(raw.strip())


def _str(raw: str | None) -> str:
    return "" if _absent(raw) else raw.strip()


_HEADER_FIELD = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*)(?: \[[^\]]*\])?", re.ASCII)
_GPU_COLUMNS = ["index", "uuid", "memory.used", "memory.total", "utilization.gpu"]
_APP_COLUMNS = ["gpu_uuid", "pid", "used_memory", "process_name"]
_APP_NAMES = {c: c for c in _APP_COLUMNS} | {"used_gpu_memory": "used_memory", "name": "process_name"}


def _csv_rows(lines: list[tuple[int, str]], fmt: str, positional: list[str], known: dict[str, str],
              required: str, free: str | None = None) -> list[tuple[int, dict[str, str]]]:
    """Rows as {canonical column: value}: by header name when a header row is present, else by position."""
    columns, header_line, rows = positional, None, []
    for lineno, line in lines:
        if line.strip() in ("No running processes found", _NO_DEVICES):
            continue
        raw = line.split(",")
        names = [_HEADER_FIELD.fullmatch(f.strip()) for f in raw]
        if all(names) and any(m[1] in known for m in names):  # a header: every field a property name
            columns, header_line = [known.get(m[1], m[1]) for m in names], lineno
            if required not in columns:
                raise ParseError(f"header has no {required!r} column: {quote(line)}", format=fmt, line=lineno)
            continue
        if len(raw) > len(columns) and free in columns:
            # nvidia-smi does not quote: commas in a process name spill into extra fields
            i, extra = columns.index(free), len(raw) - len(columns)
            raw = raw[:i] + [",".join(raw[i:i + extra + 1])] + raw[i + extra + 1:]
        if len(raw) != len(columns):
            raise ParseError(f"expected {len(columns)} comma-separated fields ({', '.join(columns)}) as in "
                             f"{f'the header on line {header_line}' if header_line else 'the default query'}, "
                             f"found {len(raw)}: {quote(line)}", format=fmt, line=lineno)
        rows.append((lineno, {c: v.strip() for c, v in zip(columns, raw)}))
    return rows


def parse_query_gpu(text: str) -> list[GpuMemory]:
    """`nvidia-smi --query-gpu=index,uuid,memory.used,memory.total,utilization.gpu --format=csv[,noheader][,nounits]`.

    With a header row, columns are taken by name, so wider queries (all fields) parse too.
    """
    fmt = "nvidia-smi --query-gpu csv"
    lines, no_devices = _prepare(text, fmt, "one CSV row per GPU")
    rows = _csv_rows(lines, fmt, _GPU_COLUMNS, {c: c for c in _GPU_COLUMNS}, "uuid")
    if not rows and not no_devices:
        raise ParseError("a header but no GPU rows", format=fmt, line=lines[-1][0])
    return [GpuMemory(index=_int(r.get("index"), fmt, n, "index"), uuid=_str(r.get("uuid")),
                      memory_used_mib=_num(r.get("memory.used"), _MIB, fmt, n, "memory.used"),
                      memory_total_mib=_num(r.get("memory.total"), _MIB, fmt, n, "memory.total"),
                      utilization_pct=_num(r.get("utilization.gpu"), _PCT, fmt, n, "utilization.gpu"))
            for n, r in rows]


def parse_compute_apps(text: str) -> list[ComputeApp]:
    """`nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory,process_name --format=csv[,noheader][,nounits]`.

    A header maps columns by name (`used_gpu_memory` = `used_memory`); no processes → []; no pid → row dropped.
    """
    fmt = "nvidia-smi --query-compute-apps csv"
    apps = []
    for n, r in _csv_rows(_prepare(text, fmt, None)[0], fmt, _APP_COLUMNS, _APP_NAMES, "pid", "process_name"):
        pid = _int(r.get("pid"), fmt, n, "pid")
        if pid is not None:
            apps.append(ComputeApp(gpu_uuid=_str(r.get("gpu_uuid")), pid=pid,
                                   used_memory_mib=_num(r.get("used_memory"), _MIB, fmt, n, "used_memory"),
                                   process_name=r.get("process_name", "")))
    return apps


def _xtext(elem: ET.Element, path: str) -> str | None:
    found = elem.find(path)
    return None if found is None or _absent(found.text) else found.text.strip()


def parse_query_xml(text: str) -> list[GpuDetail]:
    """`nvidia-smi -q -x`: one GpuDetail per <gpu>, with its processes."""
    fmt = "nvidia-smi -q -x"
    if _prepare(text, fmt, "an <nvidia_smi_log> document")[1] and "<" not in text:
        return []
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ParseError(f"malformed XML: {exc}", format=fmt, line=exc.position[0]) from None
    except ValueError as exc:  # characters the encoder refuses
        raise ParseError(f"malformed XML: {exc}", format=fmt) from None
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"expected root element <nvidia_smi_log>, found <{root.tag}>", format=fmt)
    details = []
    for position, gpu in enumerate(root.findall("gpu")):
        bus_id, uuid = gpu.get("id") or _xtext(gpu, "pci/pci_bus_id"), _xtext(gpu, "uuid")
        where = f"gpu {bus_id or position}"
        apps = tuple(ComputeApp(gpu_uuid=uuid or "", pid=pid, process_name=_xtext(info, "process_name") or "",
                                used_memory_mib=_num(_xtext(info, "used_memory"), _MIB, fmt, None,
                                                     f"{where} process used_memory"))
                     for info in gpu.findall("processes/process_info")
                     if (pid := _int(_xtext(info, "pid"), fmt, None, f"{where} process pid")) is not None)
        fb = {k: _num(_xtext(gpu, f"fb_memory_usage/{k}"), _MIB, fmt, None, f"{where} fb_memory_usage/{k}")
              for k in ("total", "used", "free")}
        details.append(GpuDetail(index=position, uuid=uuid, name=_xtext(gpu, "product_name"), bus_id=bus_id,
                                 memory_total_mib=fb["total"], memory_used_mib=fb["used"], memory_free_mib=fb["free"],
                                 processes=apps, mig_mode=_xtext(gpu, "mig_mode/current_mig")))
    return details


_Q_BANNER = re.compile(r"=+\s*NVSMI LOG\s*=+")
_Q_GPU = re.compile(r"GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]+)", re.ASCII)
_Q_PAIR = re.compile(r"(?P<key>[A-Za-z0-9][^:]*?)\s+:(?:\s(?P<value>.*))?")
_Q_SECTION = re.compile(r"[A-Za-z0-9][A-Za-z0-9 .,/()_+#&'-]*")


def _put(mapping: dict[str, Any], key: str, value: Any) -> None:
    # a key printed twice at one level (MIG Device, ...) keeps every value, in order
    old = mapping.get(key)
    mapping[key] = value if key not in mapping else [*old, value] if isinstance(old, list) else [old, value]


def _q_blocks(text: str, fmt: str) -> list[tuple[int, str, dict[str, Any]]]:
    """(line, bus id, nested dict) per `GPU <bus id>` block of `nvidia-smi -q` text."""
    lines, no_devices = _prepare(text, fmt, "the NVSMI LOG banner and 'GPU <bus id>' blocks")
    blocks: list[tuple[int, str, dict[str, Any]]] = []
    stack: list[tuple[int, Any]] = []  # (indent of the section line, dict, or list of process records)
    banner = no_devices
    for lineno, line in lines:
        indent = len(line) - len(line.lstrip(" "))
        body = line[indent:]
        if indent == 0:
            if gpu := _Q_GPU.fullmatch(body):
                blocks.append((lineno, gpu[1], {"GPU": gpu[1]}))
                stack = [(-1, blocks[-1][2])]
            elif _Q_BANNER.fullmatch(body) or body == _NO_DEVICES:
                banner = True
            elif not _Q_PAIR.fullmatch(body):  # Timestamp, Driver Version, Attached GPUs ...
                raise ParseError(f"expected 'Name : value' or 'GPU <bus id>': {quote(body)}", format=fmt, line=lineno)
            continue
        if not stack:
            raise ParseError(f"indented line before any 'GPU <bus id>' line: {quote(body)}", format=fmt, line=lineno)
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        pair = _Q_PAIR.fullmatch(body)
        if not pair and not _Q_SECTION.fullmatch(body):
            raise ParseError(f"expected 'Name : value' or a section name, found {quote(body)}", format=fmt, line=lineno)
        key = pair["key"].strip() if pair else body
        if isinstance(parent, list):
            # Processes: flat records begun again by a repeated key; lines under "Process ID" are its fields
            if not parent or key in parent[-1]:
                parent.append({})
            parent = parent[-1]
        if key == "Processes":
            if not isinstance(parent.get(key), list):
                parent[key] = []
            if not pair:  # "Processes : None" has no records
                stack.append((indent, parent[key]))
        elif pair:
            _put(parent, key, (pair["value"] or "").strip())
        else:
            _put(parent, key, child := {})
            stack.append((indent, child))
    if not blocks and not banner:
        raise ParseError("no NVSMI LOG banner and no 'GPU <bus id>' line", format=fmt)
    return blocks


def parse_q_text(text: str) -> list[dict[str, Any]]:
    """`nvidia-smi -q [-d ...]`: one nested dict per GPU, keys as printed, "GPU" holding the bus id.

    A key printed twice at one level becomes a list; "Processes" is always a list of dicts ([] for "None").
    """
    return [block for _, _, block in _q_blocks(text, "nvidia-smi -q")]


def _mib_section(block: dict[str, Any], section: str, fmt: str, line: int) -> dict[str, float | None]:
    values = block[section] if isinstance(block.get(section), dict) else {}
    return {key: _num(value if isinstance(value := values.get(key), str) else None, _MIB, fmt, line,
                      f"GPU {block['GPU']} {section} {key}") for key in ("Total", "Reserved", "Used", "Free")}


def parse_memory_report(text: str) -> list[GpuMemoryReport]:
    """`nvidia-smi -q -d MEMORY` (or full -q): FB and BAR1 memory per GPU."""
    fmt = "nvidia-smi -q -d MEMORY"
    reports = []
    for n, bus_id, block in _q_blocks(text, fmt):
        if not isinstance(block.get("FB Memory Usage"), dict):
            raise ParseError(f"GPU {bus_id} has no 'FB Memory Usage' section", format=fmt, line=n)
        fb, bar1 = (_mib_section(block, section, fmt, n) for section in ("FB Memory Usage", "BAR1 Memory Usage"))
        reports.append(GpuMemoryReport(bus_id, fb["Total"], fb["Reserved"], fb["Used"], fb["Free"],
                                       bar1["Total"], bar1["Used"]))
    return reports


def parse_processes_report(text: str) -> list[ProcessEntry]:
    """The Processes section of `nvidia-smi -q`, `-q -d PIDS` or `-q -d COMPUTE`, for every GPU."""
    fmt = "nvidia-smi -q Processes"
    entries = []
    for n, bus_id, block in _q_blocks(text, fmt):
        for record in block.get("Processes", []):
            fields = {k: v for k, v in record.items() if isinstance(v, str)}
            if "Process ID" not in fields:
                raise ParseError(f"GPU {bus_id}: a process record without 'Process ID': {quote(str(record))}",
                                 format=fmt, line=n)
            if (pid := _int(fields["Process ID"], fmt, n, "Process ID")) is None:
                continue
            entries.append(ProcessEntry(
                gpu_bus_id=bus_id, pid=pid, type=_str(fields.get("Type")), name=fields.get("Name", ""),
                used_memory_mib=_num(fields.get("Used GPU Memory"), _MIB, fmt, n, "Used GPU Memory"),
                gpu_instance_id=_int(fields.get("GPU instance ID"), fmt, n, "GPU instance ID"),
                compute_instance_id=_int(fields.get("Compute instance ID"), fmt, n, "Compute instance ID")))
    return entries


_T_HEAD = re.compile(r"\|\s*(?:(GPU\s+Name\b)|(Processes:)|MIG devices:)")
_T_GPU_ROW = re.compile(r"\|\s*([0-9]+)\s+(.*?)\s+\S+\s*\|\s*([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]+)"
                        r"\s.*", re.ASCII)
_T_MEMORY = re.compile(r"\|[^|]*\|\s*([0-9]+)MiB\s*/\s*([0-9]+)MiB\s*\|.*", re.ASCII)
_T_PROC_ROW = re.compile(r"\|\s*([0-9]+)\s+(?:(N/A|[0-9]+)\s+(N/A|[0-9]+)\s+)?([0-9]+)\s+([A-Z][A-Z+]*)\s+"
                         r"(.*?)\s+([0-9]+MiB|N/A)\s*\|", re.ASCII)


def parse_table(text: str) -> Table:
    """The default `nvidia-smi` table: per-GPU memory use and the process panel.

    Memory in use under an empty process panel: a context held from another PID namespace, or leaked.
    """
    fmt = "nvidia-smi table"
    lines, no_devices = _prepare(text, fmt, "the nvidia-smi table")
    gpus: list[TableGpu] = []
    procs: list[TableProcess] = []
    panel, in_header = "", False
    for lineno, line in lines:
        line = line.strip()
        if head := _T_HEAD.match(line):
            panel, in_header = "gpu" if head[1] else "proc" if head[2] else "mig", True
        if in_header:  # column titles run down to the |===| rule
            in_header = not line.startswith("|=")
        elif panel == "gpu":
            if row := _T_GPU_ROW.fullmatch(line):
                gpus.append(TableGpu(int(row[1]), None, None, name=row[2] or None, bus_id=row[3]))
            elif (memory := _T_MEMORY.fullmatch(line)) and gpus and gpus[-1].memory_total_mib is None:
                gpus[-1] = TableGpu(gpus[-1].index, float(memory[1]), float(memory[2]), gpus[-1].name, gpus[-1].bus_id)
        elif panel == "proc":
            if not line.startswith("|"):
                panel = ""
            elif "No running processes found" not in line and line.strip("| "):
                if not (m := _T_PROC_ROW.fullmatch(line)):
                    raise ParseError(f"expected a process row '| GPU [GI CI] PID Type Process-name Usage |', "
                                     f"found {quote(line)}", format=fmt, line=lineno)
                procs.append(TableProcess(
                    gpu_index=int(m[1]), pid=int(m[4]), type=m[5], process_name=m[6],
                    used_memory_mib=None if m[7] == "N/A" else float(m[7][:-3]),
                    gpu_instance_id=_int(m[2], fmt, lineno, "GI"), compute_instance_id=_int(m[3], fmt, lineno, "CI")))
    if not gpus and not no_devices:
        raise ParseError("no GPU rows ('|   0  Name  ...  | 00000000:83:00.0 ...' under a '| GPU  Name' header)",
                         format=fmt)
    return Table(gpus=tuple(gpus), processes=tuple(procs))


def parse_table_processes(text: str) -> list[TableProcess]:
    """The process panel of the default `nvidia-smi` table."""
    return list(parse_table(text).processes)
