"""nvidia-smi parsers against real captures, hand-written MIG/multi-GPU samples and generated text.

Exact values come from the files in ../shared/reference/nvidia-smi (see its SOURCES.md), read when
that folder is there (CI requires it); tests/data/nvidia-smi holds outputs the project wrote itself.
"""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.errors import RunbookError
from runbook.parsers.errors import ParseError
from runbook.parsers.nvidia_smi import (
    ComputeApp,
    GpuMemory,
    GpuMemoryReport,
    ProcessEntry,
    Table,
    TableGpu,
    TableProcess,
    parse_compute_apps,
    parse_memory_report,
    parse_processes_report,
    parse_q_text,
    parse_query_gpu,
    parse_query_xml,
    parse_table,
    parse_table_processes,
)

from tests.conftest import REFERENCE, data_text

ZERO_UUID = "GPU-00000000-0000-0000-0000-000000000000"
H200_BUS = "00000000:83:00.0"


# -- real captures --------------------------------------------------------------------------------

def test_compute_apps_h200_capture_maps_wide_header_by_name(reference):
    apps = parse_compute_apps(reference("nvidia-smi/nvidia-smi-query-compute-apps-h200-load.csv"))
    assert apps == [
        ComputeApp(ZERO_UUID, 10291, 2566.0, "/root/tools/memhog"),
        ComputeApp(ZERO_UUID, 10293, 1542.0, "/root/tools/memhog"),
        ComputeApp(ZERO_UUID, 10309, 28234.0, "./gpu_burn"),
    ]


def test_compute_apps_idle_capture_is_header_only(section):
    assert parse_compute_apps(section("idle :: query-compute-apps (per-process)")) == []


def test_query_gpu_all_fields_capture(reference):
    (gpu,) = parse_query_gpu(reference("nvidia-smi/nvidia-smi-query-gpu-allfields-h200-load.csv"))
    assert gpu == GpuMemory(index=0, uuid=ZERO_UUID, memory_used_mib=32362.0, memory_total_mib=143771.0,
                            utilization_pct=100.0)
    assert gpu.memory_used_ratio == pytest.approx(32362 / 143771)


def test_query_gpu_idle_capture(section):
    (gpu,) = parse_query_gpu(section("idle :: query-gpu (csv, what the exporter parses)"))
    assert (gpu.memory_used_mib, gpu.memory_total_mib, gpu.utilization_pct) == (0.0, 143771.0, 0.0)


def test_xml_tesla_t4_two_processes(reference):
    (gpu,) = parse_query_xml(reference("nvidia-smi/nvidia-smi-q-x-tesla-t4-2procs.xml"))
    uuid = "GPU-d37e67a5-91dd-3774-a5cb-99096249601a"
    assert (gpu.index, gpu.uuid, gpu.name, gpu.bus_id) == (0, uuid, "Tesla T4", "00000000:00:1E.0")
    assert (gpu.memory_total_mib, gpu.memory_used_mib, gpu.memory_free_mib) == (15360.0, 1032.0, 13939.0)
    assert gpu.mig_mode is None  # N/A on Turing
    assert gpu.processes == (ComputeApp(uuid, 675, 22.0, "/usr/lib/xorg/Xorg"),
                             ComputeApp(uuid, 5762, 1005.0, "python"))


def test_xml_rtx_4090_no_processes(reference):
    (gpu,) = parse_query_xml(reference("nvidia-smi/nvidia-smi-q-x-rtx-4090-driver-535.xml"))
    assert (gpu.uuid, gpu.name, gpu.bus_id) == ("GPU-71d1acc2-662d-2166-bf9f-65272d2fc437",
                                               "NVIDIA GeForce RTX 4090", "00000000:84:00.0")
    assert (gpu.memory_total_mib, gpu.memory_used_mib, gpu.memory_free_mib) == (24564.0, 2.0, 24214.0)
    assert gpu.processes == ()


def test_q_text_h200_load(reference):
    text = reference("nvidia-smi/nvidia-smi-q-h200-load.txt")
    assert parse_memory_report(text) == [
        GpuMemoryReport(H200_BUS, 143771.0, 614.0, 32362.0, 110796.0, 262144.0, 32363.0)]
    assert parse_processes_report(text) == [
        ProcessEntry(H200_BUS, 10291, "C", "/root/tools/memhog", 2566.0),
        ProcessEntry(H200_BUS, 10293, "C", "/root/tools/memhog", 1542.0),
        ProcessEntry(H200_BUS, 10309, "C", "./gpu_burn", 28234.0),
    ]
    (block,) = parse_q_text(text)
    assert block["GPU"] == H200_BUS
    assert block["Product Name"] == "NVIDIA H200"
    assert block["MIG Mode"] == {"Current": "Disabled", "Pending": "Disabled"}
    assert block["PCI"]["GPU Link Info"]["PCIe Generation"]["Max"] == "5"
    assert block["Clocks Event Reasons"]["HW Thermal Slowdown"] == "Not Active"  # deeper indent, same section
    assert block["GPU Memory Power Readings"]["Average Power Draw"] == "97.69 W"  # header has a trailing space
    assert block["Processes"][2] == {"GPU instance ID": "N/A", "Compute instance ID": "N/A", "Process ID": "10309",
                                     "Type": "C", "Name": "./gpu_burn", "Used GPU Memory": "28234 MiB"}


def test_memory_report_written_for_the_tests():
    """The report the Kubernetes tests' pods print is one our parser reads, with the numbers it shows."""
    text = data_text("nvidia-smi/q-d-memory-h100-80gb-vllm-serving.txt")
    assert parse_memory_report(text) == [
        GpuMemoryReport("00000000:1B:00.0", 81559.0, 579.0, 78206.0, 2774.0, 131072.0, 78213.0)]
    assert parse_processes_report(text) == []


def test_q_text_idle_capture_has_no_processes(section):
    text = section("idle :: query (-q)")
    assert parse_q_text(text)[0]["Processes"] == []
    assert parse_processes_report(text) == []
    assert parse_memory_report(text)[0].fb_used_mib == 0.0


def test_table_h200_three_processes(reference):
    table = parse_table(reference("nvidia-smi/nvidia-smi-table-h200-load-3procs.txt"))
    assert table.gpus == (TableGpu(0, 32362.0, 143771.0, "NVIDIA H200", H200_BUS),)
    assert [(p.gpu_index, p.pid, p.type, p.process_name, p.used_memory_mib) for p in table.processes] == [
        (0, 10291, "C", "/root/tools/memhog", 2566.0),
        (0, 10293, "C", "/root/tools/memhog", 1542.0),
        (0, 10309, "C", "./gpu_burn", 28234.0),
    ]


def test_table_gtx_titan_memory_used_with_empty_process_panel(reference):
    """The lingering-context signature: 11637 MiB in use, no process listed (container PID namespace)."""
    table = parse_table(reference("nvidia-smi/nvidia-smi-table-gtx-titan-mem-used-empty-procs-ms-pai-2001-excerpt.txt"))
    assert table == Table(gpus=(TableGpu(0, 11637.0, 12207.0, "GeForce GTX TIT...", H200_BUS),), processes=())


def test_table_idle_capture_no_running_processes(section):
    table = parse_table(section("idle :: nvidia-smi (default table)"))
    assert table.gpus[0].memory_used_mib == 0.0
    assert table.processes == ()


def test_load_capture_sources_agree(section):
    """The table, -q and --query-compute-apps of the same moment list the same processes."""
    table = parse_table_processes(section("load :: nvidia-smi (default table)"))
    report = parse_processes_report(section("load :: query (-q)"))
    apps = parse_compute_apps(section("load :: query-compute-apps (per-process)"))
    assert [(p.pid, p.used_memory_mib) for p in table] == [(p.pid, p.used_memory_mib) for p in report]
    assert {(a.pid, a.used_memory_mib) for a in apps} == {(p.pid, p.used_memory_mib) for p in report}


# -- hand-written samples -------------------------------------------------------------------------

EIGHT_GPUS = "".join(
    f"{i}, GPU-{i:08x}-1111-2222-3333-444455556666, {1000 * i + 3}, 81559, {10 * i}\n" for i in range(8))


def test_query_gpu_eight_gpus_noheader_nounits():
    gpus = parse_query_gpu(EIGHT_GPUS)
    assert [g.index for g in gpus] == list(range(8))
    assert gpus[7] == GpuMemory(7, "GPU-00000007-1111-2222-3333-444455556666", 7003.0, 81559.0, 70.0)


def test_query_gpu_header_units_crlf_blank_lines_and_unavailable_values():
    text = ("index, uuid, memory.used [MiB], memory.total [MiB], utilization.gpu [%]\r\n\r\n"
            "0, GPU-aaaa, 81559 MiB, 81920 MiB, 45 %\r\n"
            "1, GPU-bbbb, [N/A], [Not Supported], [N/A]\r\n"  # MIG-enabled GPU: no utilization
            "2, [N/A], N/A, 4 GiB, Not Supported\r\n")
    assert parse_query_gpu(text) == [
        GpuMemory(0, "GPU-aaaa", 81559.0, 81920.0, 45.0),
        GpuMemory(1, "GPU-bbbb", None, None, None),
        GpuMemory(2, "", None, 4096.0, None),
    ]
    assert parse_query_gpu(text)[1].memory_used_ratio is None


def test_query_gpu_reordered_header_maps_by_name():
    text = "uuid, utilization.gpu [%], index, memory.total [MiB], memory.used [MiB]\nGPU-x, 7 %, 3, 100 MiB, 25 MiB\n"
    assert parse_query_gpu(text) == [GpuMemory(3, "GPU-x", 25.0, 100.0, 7.0)]
    assert parse_query_gpu(text)[0].memory_used_ratio == 0.25


def test_query_gpu_no_devices_is_empty():
    assert parse_query_gpu("No devices were found\n") == []


@pytest.mark.parametrize(("text", "line", "fragment"), [
    ("", None, "empty output"),
    ("0, GPU-a, 1, 2\n", 1, "expected 5 comma-separated fields"),
    ("0, GPU-a, 1, 2, 3\n0, GPU-b, lots, 2, 3\n", 2, "memory.used: expected a number"),
    ("0, GPU-a, 1 MHz, 2, 3\n", 1, "memory.used: expected a number"),
    ("x, GPU-a, 1, 2, 3\n", 1, "index: expected an integer"),
    ("index, memory.used [MiB]\n0, 1\n", 1, "header has no 'uuid' column"),
    ("index, uuid, memory.used [MiB], memory.total [MiB], utilization.gpu [%]\n", 1, "a header but no GPU rows"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", 1, "reported an error"),
])
def test_query_gpu_errors_name_the_line(text, line, fragment):
    with pytest.raises(ParseError) as info:
        parse_query_gpu(text)
    assert info.value.line == line
    assert info.value.format == "nvidia-smi --query-gpu csv"
    assert fragment in str(info.value)
    assert isinstance(info.value, RunbookError)


def test_parse_error_pickles():
    error = ParseError("expected x", format="ps", line=3)
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.format, copy.line) == (str(error), "ps", 3)


def test_compute_apps_default_query_and_variants():
    assert parse_compute_apps("GPU-a, 4242, 70000, python3\nGPU-b, 77, [N/A], /usr/bin/Xorg\n") == [
        ComputeApp("GPU-a", 4242, 70000.0, "python3"), ComputeApp("GPU-b", 77, None, "/usr/bin/Xorg")]
    with_header = ("gpu_uuid, pid, used_gpu_memory [MiB], process_name\r\n"
                   "GPU-a, 4242, 70000 MiB, python3 -m vllm.entrypoints.openai.api_server, --port 8000\r\n")
    assert parse_compute_apps(with_header) == [
        ComputeApp("GPU-a", 4242, 70000.0, "python3 -m vllm.entrypoints.openai.api_server, --port 8000")]
    assert parse_compute_apps("pid, name, used_memory [MiB]\n5, a,b, 3 MiB\n") == [ComputeApp("", 5, 3.0, "a,b")]


@pytest.mark.parametrize("text", ["", "\n\n", "No running processes found\n", "No devices were found\r\n",
                                  "gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"])
def test_compute_apps_none_running(text):
    assert parse_compute_apps(text) == []


def test_compute_apps_row_without_pid_is_dropped_and_errors_raise():
    assert parse_compute_apps("GPU-a, [N/A], 12, python\n") == []
    with pytest.raises(ParseError, match="pid: expected an integer") as info:
        parse_compute_apps("GPU-a, 1, 1, a\nGPU-a, twelve, 12, python\n")
    assert info.value.line == 2
    with pytest.raises(ParseError, match="header has no 'pid' column"):
        parse_compute_apps("gpu_uuid, process_name\nGPU-a, x\n")
    with pytest.raises(ParseError, match="expected 4 comma-separated fields"):
        parse_compute_apps("GPU-a, 1\n")


MIG_XML = """<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
\t<driver_version>535.104.05</driver_version>
\t<attached_gpus>2</attached_gpus>
\t<gpu id="00000000:07:00.0">
\t\t<product_name>NVIDIA A100-SXM4-40GB</product_name>
\t\t<mig_mode>
\t\t\t<current_mig>Enabled</current_mig>
\t\t\t<pending_mig>Enabled</pending_mig>
\t\t</mig_mode>
\t\t<mig_devices>
\t\t\t<mig_device>
\t\t\t\t<index>0</index>
\t\t\t\t<gpu_instance_id>1</gpu_instance_id>
\t\t\t\t<compute_instance_id>0</compute_instance_id>
\t\t\t\t<fb_memory_usage>
\t\t\t\t\t<total>19968 MiB</total>
\t\t\t\t\t<used>10000 MiB</used>
\t\t\t\t\t<free>9968 MiB</free>
\t\t\t\t</fb_memory_usage>
\t\t\t</mig_device>
\t\t</mig_devices>
\t\t<uuid>GPU-5f6a1c2e-0b5e-4d0a-9a63-2c1f8a9b0c11</uuid>
\t\t<fb_memory_usage>
\t\t\t<total>40960 MiB</total>
\t\t\t<reserved>571 MiB</reserved>
\t\t\t<used>10025 MiB</used>
\t\t\t<free>30363 MiB</free>
\t\t</fb_memory_usage>
\t\t<processes>
\t\t\t<process_info>
\t\t\t\t<gpu_instance_id>1</gpu_instance_id>
\t\t\t\t<compute_instance_id>0</compute_instance_id>
\t\t\t\t<pid>4242</pid>
\t\t\t\t<type>C</type>
\t\t\t\t<process_name>python3</process_name>
\t\t\t\t<used_memory>9984 MiB</used_memory>
\t\t\t</process_info>
\t\t</processes>
\t</gpu>
\t<gpu id="00000000:0F:00.0">
\t\t<product_name>NVIDIA A100-SXM4-40GB</product_name>
\t\t<mig_mode><current_mig>Disabled</current_mig></mig_mode>
\t\t<uuid>GPU-0b7c3d4e-1f2a-4b5c-8d6e-7f8091a2b3c4</uuid>
\t\t<fb_memory_usage><total>40960 MiB</total><used>N/A</used><free>[N/A]</free></fb_memory_usage>
\t\t<processes>
\t\t</processes>
\t</gpu>
</nvidia_smi_log>
"""


def test_xml_mig_and_two_gpus():
    first, second = parse_query_xml(MIG_XML.replace("\n", "\r\n"))
    assert first.mig_mode == "Enabled"
    # the GPU's own fb_memory_usage, not the MIG device's
    assert (first.memory_total_mib, first.memory_used_mib, first.memory_free_mib) == (40960.0, 10025.0, 30363.0)
    assert first.processes == (ComputeApp("GPU-5f6a1c2e-0b5e-4d0a-9a63-2c1f8a9b0c11", 4242, 9984.0, "python3"),)
    assert (second.index, second.bus_id, second.mig_mode) == (1, "00000000:0F:00.0", "Disabled")
    assert (second.memory_used_mib, second.memory_free_mib, second.processes) == (None, None, ())


@pytest.mark.parametrize(("text", "fragment", "line"), [
    ("", "empty output", None),
    ("<nvidia_smi_log><gpu>", "malformed XML", 1),
    ("<?xml version='1.0'?>\n<nvidia_smi_log>\n<gpu></nvidia_smi_log>", "malformed XML", 3),
    ("<html><body/></html>", "expected root element <nvidia_smi_log>", None),
    ("<nvidia_smi_log><gpu><fb_memory_usage><total>lots</total></fb_memory_usage></gpu></nvidia_smi_log>",
     "fb_memory_usage/total: expected a number", None),
])
def test_xml_errors(text, fragment, line):
    with pytest.raises(ParseError, match=fragment) as info:
        parse_query_xml(text)
    assert info.value.line == line


MIG_Q_MEMORY = """
==============NVSMI LOG==============

Timestamp                                 : Tue Mar  5 10:00:00 2024
Driver Version                            : 535.104.05
CUDA Version                              : 12.2

Attached GPUs                             : 2
GPU 00000000:07:00.0
    FB Memory Usage
        Total                             : 40960 MiB
        Reserved                          : 571 MiB
        Used                              : 10025 MiB
        Free                              : 30363 MiB
    BAR1 Memory Usage
        Total                             : 65536 MiB
        Used                              : 1 MiB
        Free                              : 65535 MiB
    MIG Devices
        MIG Device
            Index                         : 0
            GPU Instance ID               : 1
            Compute Instance ID           : 0
            FB Memory Usage
                Total                     : 19968 MiB
                Used                      : 10000 MiB
                Free                      : 9968 MiB
        MIG Device
            Index                         : 1
            GPU Instance ID               : 2
            Compute Instance ID           : 0
            FB Memory Usage
                Total                     : 19968 MiB
                Used                      : 13 MiB
                Free                      : 19955 MiB
    Processes
        GPU instance ID                   : 1
        Compute instance ID               : 0
        Process ID                        : 4242
            Type                          : C
            Name                          : python3 -m vllm.entrypoints.openai.api_server
            Used GPU Memory               : 9984 MiB

GPU 00000000:0F:00.0
    FB Memory Usage
        Total                             : 40960 MiB
        Used                              : N/A
        Free                              : N/A
    BAR1 Memory Usage
        Total                             : N/A
        Used                              : N/A
        Free                              : N/A
    Processes                             : None
"""


def test_q_text_mig_devices_two_gpus_old_driver_without_reserved():
    blocks = parse_q_text(MIG_Q_MEMORY.replace("\n", "\r\n"))
    assert [b["GPU"] for b in blocks] == ["00000000:07:00.0", "00000000:0F:00.0"]
    devices = blocks[0]["MIG Devices"]["MIG Device"]
    assert [d["GPU Instance ID"] for d in devices] == ["1", "2"]
    assert devices[1]["FB Memory Usage"]["Used"] == "13 MiB"
    assert parse_memory_report(MIG_Q_MEMORY) == [
        GpuMemoryReport("00000000:07:00.0", 40960.0, 571.0, 10025.0, 30363.0, 65536.0, 1.0),
        GpuMemoryReport("00000000:0F:00.0", 40960.0, None, None, None, None, None),
    ]
    assert parse_processes_report(MIG_Q_MEMORY) == [
        ProcessEntry("00000000:07:00.0", 4242, "C", "python3 -m vllm.entrypoints.openai.api_server", 9984.0,
                     gpu_instance_id=1, compute_instance_id=0)]


def test_q_text_old_process_records_without_instance_ids():
    text = ("GPU 0000:3B:00.0\n    Processes\n        Process ID                  : 11\n"
            "            Type                    : C\n            Name                    : a\n"
            "            Used GPU Memory         : 5 MiB\n        Process ID                  : 12\n"
            "            Type                    : G\n            Name                    : b\n"
            "            Used GPU Memory         : Not available in WDDM driver model\n")
    assert parse_processes_report(text) == [ProcessEntry("0000:3B:00.0", 11, "C", "a", 5.0),
                                            ProcessEntry("0000:3B:00.0", 12, "G", "b", None)]
    with pytest.raises(ParseError, match="Used GPU Memory: expected a number") as info:
        parse_processes_report(text.replace("5 MiB", "5 parsecs"))
    assert info.value.line == 1


@pytest.mark.parametrize(("text", "line", "fragment"), [
    ("", None, "empty output"),
    ("hello world\n", 1, "expected 'Name : value' or 'GPU <bus id>'"),
    ("Driver Version : 1\n    Used : 3 MiB\n", 2, "indented line before any 'GPU <bus id>' line"),
    ("GPU 00000000:07:00.0\n    FB Memory Usage\n        Total : 1 MiB\n        ??? broken\n", 4,
     "expected 'Name : value' or a section name"),
    ("Driver Version : 1\n", None, "no NVSMI LOG banner"),
])
def test_q_text_errors(text, line, fragment):
    with pytest.raises(ParseError, match=fragment) as info:
        parse_q_text(text)
    assert info.value.line == line


def test_memory_report_needs_fb_section():
    with pytest.raises(ParseError, match="has no 'FB Memory Usage' section") as info:
        parse_memory_report("\n==============NVSMI LOG==============\nGPU 00000000:07:00.0\n    Processes : None\n")
    assert info.value.line == 3
    assert parse_memory_report("No devices were found") == []


MIG_TABLE = """\
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 470.57.02    Driver Version: 470.57.02    CUDA Version: 11.4     |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|                               |                      |               MIG M. |
|===============================+======================+======================|
|   0  NVIDIA A100-SXM...  On   | 00000000:07:00.0 Off |                   On |
| N/A   33C    P0    61W / 400W |  10025MiB / 40536MiB |     N/A      Default |
|                               |                      |              Enabled |
+-------------------------------+----------------------+----------------------+
|   1  NVIDIA A100-SXM...  On   | 00000000:0F:00.0 Off |                    0 |
| N/A   30C    P0    55W / 400W |      0MiB / 40536MiB |      0%      Default |
|                               |                      |             Disabled |
+-------------------------------+----------------------+----------------------+

+-----------------------------------------------------------------------------+
| MIG devices:                                                                |
+------------------+----------------------+-----------+-----------------------+
| GPU  GI  CI  MIG |         Memory-Usage |        Vol|         Shared        |
|      ID  ID  Dev |           BAR1-Usage | SM     Unc| CE  ENC  DEC  OFA  JPG|
|                  |                      |        ECC|                       |
|==================+======================+===========+=======================|
|  0    1   0   0  |  10000MiB / 19968MiB | 42      0 |  3   0    2    0    0 |
|                  |      0MiB / 32767MiB |           |                       |
+------------------+----------------------+-----------+-----------------------+

+-----------------------------------------------------------------------------+
| Processes:                                                                  |
|  GPU   GI   CI        PID   Type   Process name                  GPU Memory |
|        ID   ID                                                   Usage      |
|=============================================================================|
|    0    1    0       4242      C   python3                          9984MiB |
|    1   N/A  N/A      5150    C+G   /usr/bin/some app                  N/A   |
+-----------------------------------------------------------------------------+
"""


def test_table_mig_panel_is_not_a_gpu_and_instance_ids_are_read():
    table = parse_table(MIG_TABLE.replace("\n", "\r\n"))
    assert table.gpus == (TableGpu(0, 10025.0, 40536.0, "NVIDIA A100-SXM...", "00000000:07:00.0"),
                          TableGpu(1, 0.0, 40536.0, "NVIDIA A100-SXM...", "00000000:0F:00.0"))
    assert table.processes == (TableProcess(0, 4242, "C", "python3", 9984.0, 1, 0),
                               TableProcess(1, 5150, "C+G", "/usr/bin/some app", None))


def eight_gpu_table(rows: str) -> str:
    gpus = "".join(
        f"|   {i}  NVIDIA H100 80GB HBM3          On  |   00000000:{0x18 + i:02X}:00.0 Off |                    0 |\n"
        f"| N/A   35C    P0            120W /  700W |   {70000 + i}MiB /  81559MiB |     {i}%      Default |\n"
        "|                                         |                        |             Disabled |\n"
        "+-----------------------------------------+------------------------+----------------------+\n"
        for i in range(8))
    return ("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n"
            "|=========================================+========================+======================|\n"
            + gpus + "\n| Processes:                                                                              |\n"
            "|=========================================================================================|\n" + rows)


def test_table_eight_gpus_driver_384_process_rows():
    rows = "".join(f"|    {i}     {3000 + i}      C   /usr/bin/python3                     {70000 + i}MiB |\n"
                   for i in range(8))
    table = parse_table(eight_gpu_table(rows))
    assert [(g.index, g.memory_used_mib, g.bus_id) for g in table.gpus][7] == (7, 70007.0, "00000000:1F:00.0")
    assert [(p.gpu_index, p.pid, p.used_memory_mib) for p in table.processes] == [
        (i, 3000 + i, 70000.0 + i) for i in range(8)]


@pytest.mark.parametrize(("text", "fragment"), [
    ("", "empty output"),
    ("Mon Jan 14 07:10:25 2019\n", "no GPU rows"),
    ("| GPU  Name        Persistence-M| Bus-Id        Disp.A |\n|=====|\n+----+\n", "no GPU rows"),
    (eight_gpu_table("|    0   something odd here |\n"), "expected a process row"),
])
def test_table_errors(text, fragment):
    with pytest.raises(ParseError, match=fragment):
        parse_table(text)


# -- generated ------------------------------------------------------------------------------------

UNAVAILABLE = st.sampled_from(["[N/A]", "[Not Supported]", "N/A"])
mib = st.one_of(st.none(), st.integers(0, 10**7).map(float))
pct = st.one_of(st.none(), st.integers(0, 100).map(float))
uuids = st.uuids().map(lambda u: f"GPU-{u}")
names = (st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1, max_size=40)
         .map(str.strip).filter(lambda s: s and s != "No running processes found"))

gpu_memories = st.lists(st.builds(GpuMemory, index=st.one_of(st.none(), st.integers(0, 64)), uuid=uuids,
                                  memory_used_mib=mib, memory_total_mib=mib, utilization_pct=pct), max_size=9)
compute_apps = st.lists(st.builds(ComputeApp, gpu_uuid=uuids, pid=st.integers(1, 2**22), used_memory_mib=mib,
                                  process_name=names), max_size=9)


def cell(value, unit: str, na: str) -> str:
    if value is None:
        return na
    return f"{value:.0f}{unit}"


@settings(max_examples=200, deadline=None)
@given(gpu_memories, st.booleans(), st.booleans(), UNAVAILABLE, st.sampled_from(["\n", "\r\n"]))
def test_query_gpu_round_trip(gpus, header, units, na, newline):
    mib_unit, pct_unit = (" MiB", " %") if units else ("", "")
    lines = ["index, uuid, memory.used [MiB], memory.total [MiB], utilization.gpu [%]"] if header else []
    lines += [f"{cell(g.index, '', na)}, {g.uuid}, {cell(g.memory_used_mib, mib_unit, na)}, "
              f"{cell(g.memory_total_mib, mib_unit, na)}, {cell(g.utilization_pct, pct_unit, na)}" for g in gpus]
    text = newline.join(lines) + newline
    if not gpus:
        with pytest.raises(ParseError):
            parse_query_gpu(text)
    else:
        assert parse_query_gpu(text) == gpus


@settings(max_examples=200, deadline=None)
@given(compute_apps, st.sampled_from(["none", "default", "wide"]), st.booleans(), UNAVAILABLE)
def test_compute_apps_round_trip(apps, header, units, na):
    unit = " MiB" if units else ""
    if header == "wide":  # the real capture's column order: process_name is not last
        lines = ["timestamp, gpu_name, gpu_bus_id, gpu_serial, gpu_uuid, pid, process_name, used_gpu_memory [MiB]"]
        lines += [f"2026/07/03 22:11:09.916, NVIDIA H200, 00000000:83:00.0, 0, {a.gpu_uuid}, {a.pid}, "
                  f"{a.process_name}, {cell(a.used_memory_mib, unit, na)}" for a in apps]
    else:
        lines = ["gpu_uuid, pid, used_gpu_memory [MiB], process_name"] if header == "default" else []
        lines += [f"{a.gpu_uuid}, {a.pid}, {cell(a.used_memory_mib, unit, na)}, {a.process_name}" for a in apps]
    assert parse_compute_apps("\n".join(lines) + "\n") == apps


def xml_of(gpus: list[GpuMemory], apps: list[ComputeApp]) -> str:
    def tag(name, value):
        return f"<{name}>{'N/A' if value is None else f'{value:.0f} MiB'}</{name}>"
    body = "".join(
        f"<gpu id='00000000:{i:02X}:00.0'><uuid>{g.uuid}</uuid><fb_memory_usage>{tag('total', g.memory_total_mib)}"
        f"{tag('used', g.memory_used_mib)}</fb_memory_usage><processes>"
        + "".join(f"<process_info><pid>{a.pid}</pid>{tag('used_memory', a.used_memory_mib)}<process_name>x"
                  f"</process_name></process_info>" for a in apps)
        + "</processes></gpu>" for i, g in enumerate(gpus))
    return f"<?xml version='1.0' ?>\n<nvidia_smi_log>{body}</nvidia_smi_log>"


@settings(max_examples=100, deadline=None)
@given(gpu_memories, compute_apps)
def test_xml_round_trip(gpus, apps):
    details = parse_query_xml(xml_of(gpus, apps))
    assert [(d.index, d.uuid, d.memory_total_mib, d.memory_used_mib) for d in details] == [
        (i, g.uuid, g.memory_total_mib, g.memory_used_mib) for i, g in enumerate(gpus)]
    for detail, gpu in zip(details, gpus):
        assert detail.processes == tuple(ComputeApp(gpu.uuid, a.pid, a.used_memory_mib, "x") for a in apps)


PARSERS = [parse_query_gpu, parse_compute_apps, parse_query_xml, parse_q_text, parse_memory_report,
           parse_processes_report, parse_table, parse_table_processes]


def only_parse_errors(parser, text: str) -> None:
    try:
        parser(text)
    except ParseError as error:
        assert error.format and (error.line is None or error.line >= 1)


@pytest.mark.parametrize("parser", PARSERS)
@settings(max_examples=200, deadline=None)
@given(text=st.text())
def test_arbitrary_text_raises_only_parse_error(parser, text):
    only_parse_errors(parser, text)


def _samples() -> list[str]:
    samples = [EIGHT_GPUS, MIG_XML, MIG_Q_MEMORY, MIG_TABLE,
               data_text("nvidia-smi/q-d-memory-h100-80gb-vllm-serving.txt")]
    folder = REFERENCE / "nvidia-smi"
    if folder.is_dir():
        samples += [p.read_text(encoding="utf-8") for p in sorted(folder.iterdir())
                    if p.is_file() and "capture" not in p.name]
    return samples


SAMPLES = _samples()
NOISE = st.one_of(st.text(max_size=30), st.sampled_from(
    ["", "[N/A]", "N/A", "|", " : ", "    Processes", "GPU 0:0:0.0", "<gpu>", "</gpu>", ",", "|====|",
     "| Processes:", "| GPU  Name", "No running processes found", "        Process ID : x"]))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(PARSERS), st.sampled_from(SAMPLES), st.data())
def test_mutated_real_output_raises_only_parse_error(parser, sample, data):
    """Real output with one line replaced or truncated reaches the deeper branches that random text cannot."""
    lines = sample.splitlines()
    at = data.draw(st.integers(0, max(len(lines) - 1, 0)))
    if data.draw(st.booleans()):
        lines[at:at + 1] = [data.draw(NOISE)]
    else:
        lines = lines[:at]
    only_parse_errors(parser, "\n".join(lines))
