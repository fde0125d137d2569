"""ps, fuser and cgroup parsers against real captures, hand-written samples and generated text.

Exact values come from the files in ../shared/reference/procs (see its SOURCES.md), read when that
folder is there (CI requires it).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.parsers.errors import ParseError
from runbook.parsers.procs import (
    FuserEntry,
    Process,
    fuser_pids,
    normalize_container_id,
    parse_cgroup,
    parse_fuser,
    parse_ps,
)

ID = "3f4c2a1b9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a29180706f5e4d3c2b1a090"
POD = "pod6d2f1c3e-8a7b-4c5d-9e0f-1a2b3c4d5e6f"


# -- real captures --------------------------------------------------------------------------------

def test_ps_axuww_defunct_python_zombies(reference):
    processes = parse_ps(reference("procs/ps-axuww-python3-defunct-zombies-RTXteam-RTX-1744-excerpt.txt"))
    assert [p.pid for p in processes] == [2128, 2498, 7490, 7529, 8411, 8423, 8442, 8446, 8452, 8454, 8463,
                                          8469, 8472, 8488]
    assert processes[0] == Process(pid=2128, ppid=None, stat="Z", elapsed_seconds=None, args="[python3] <defunct>")
    assert all(p.zombie and p.defunct and not p.uninterruptible for p in processes)


def test_fuser_nvidia_devices_with_sudo_noise(reference):
    entries = parse_fuser(reference("procs/fuser-v-dev-nvidia-python-holding-uvm-before-kill-raytroop.txt"))
    assert len(entries) == 18
    assert entries[0] == FuserEntry("/dev/nvidia0", "root", 1025, "F...m", "Xorg")
    assert entries[-1] == FuserEntry("/dev/nvidia-uvm", "raytroop", 6943, "F....", "python")
    assert [e.pid for e in entries if e.path == "/dev/nvidia-modeset"] == [1025, 1839, 7952, 7953, 7959]
    assert fuser_pids(entries) == {1025, 1839, 6943, 7952, 7953, 7959}
    assert fuser_pids(e for e in entries if e.path == "/dev/nvidia-uvm") == {6943}


# -- ps -------------------------------------------------------------------------------------------

PS_EO = """\
    PID    PPID STAT ELAPSED COMMAND
      1       0 Ss    864000 /sbin/init
   4242       1 Sl      3600 python3 -m vllm.entrypoints.openai.api_server --model m --port 8000
   4300    4242 Z        120 [python3] <defunct>
   4310    4242 D         59 /usr/bin/python3 -c import torch
      2       0 S     864000 [kthreadd]
"""


def test_ps_eo_with_header_crlf_and_blank_lines():
    processes = parse_ps("\r\n" + PS_EO.replace("\n", "\r\n\r\n"))
    assert processes[1] == Process(4242, 1, "Sl", 3600,
                                   "python3 -m vllm.entrypoints.openai.api_server --model m --port 8000")
    assert [(p.pid, p.zombie, p.uninterruptible, p.defunct) for p in processes[2:4]] == [
        (4300, True, False, True), (4310, False, True, False)]
    assert processes[4].args == "[kthreadd]"


def test_ps_eo_without_header_and_etime_form():
    text = "4242 1 Sl 1-02:03:04 python3 serve\n4300 4242 Z 05:06 [python3] <defunct>\n7 1 S 1:00:00\n"
    assert parse_ps(text) == [Process(4242, 1, "Sl", 93784, "python3 serve"),
                              Process(4300, 4242, "Z", 306, "[python3] <defunct>"), Process(7, 1, "S", 3600, "")]


def test_ps_aux_with_header_and_prompt_lines():
    text = ("$ ps aux\nUSER       PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND\n"
            "root         1  0.0  0.0 167744 11604 ?        Ss   Jan14   0:09 /sbin/init splash\n"
            "vllm      4242 99.5 12.1 9999999 4000000 ?     Rl   10:01 120:33 python3 -m vllm serve m\n")
    assert parse_ps(text) == [Process(1, None, "Ss", None, "/sbin/init splash"),
                              Process(4242, None, "Rl", None, "python3 -m vllm serve m")]


def test_ps_ef_header_without_stat():
    text = ("UID          PID    PPID  C STIME TTY          TIME CMD\n"
            "root           1       0  0 Jan14 ?    00:00:09 /sbin/init\n")
    assert parse_ps(text) == [Process(1, 0, "", None, "/sbin/init")]


def test_ps_defunct_without_z_state():
    assert Process(1, None, "S", None, "[sh] <defunct>").defunct


@pytest.mark.parametrize(("text", "line", "fragment"), [
    ("hello\n", 1, "expected a `ps` header"),
    ("PID PPID STAT ELAPSED COMMAND\nabc 1 S 5 x\n", 2, "PID: expected an integer"),
    ("PID PPID STAT ELAPSED COMMAND\n1 x S 5 x\n", 2, "PPID: expected an integer"),
    ("PID PPID STAT ELAPSED COMMAND\n1 0 S soon x\n", 2, "ELAPSED: expected seconds"),
    ("PID PPID STAT ELAPSED COMMAND\n1 0\n", 2, "expected 5 columns"),
])
def test_ps_errors(text, line, fragment):
    with pytest.raises(ParseError, match=fragment) as info:
        parse_ps(text)
    assert (info.value.line, info.value.format) == (line, "ps")


def test_ps_empty_grep_is_empty():
    assert parse_ps("") == []
    assert parse_ps("$ ps axuww | grep vllm\n") == []


# -- fuser ----------------------------------------------------------------------------------------

def test_fuser_kernel_long_path_and_errors():
    text = ("                     USER        PID ACCESS COMMAND\r\n"
            "/mnt/very/long/model/cache/path:\r\n"
            "                     root     kernel mount /mnt/very/long/model/cache/path\r\n"
            "                     vllm       4242 f.... python3\r\n"
            "/dev/nvidia-uvm:     vllm       4242 F.... python3\r\n")
    assert parse_fuser(text) == [FuserEntry("/mnt/very/long/model/cache/path", "vllm", 4242, "f....", "python3"),
                                 FuserEntry("/dev/nvidia-uvm", "vllm", 4242, "F....", "python3")]
    assert parse_fuser("") == []
    with pytest.raises(ParseError, match="continuation line before any 'PATH:' line") as info:
        parse_fuser("                     vllm       4242 f.... python3\n")
    assert info.value.line == 1
    with pytest.raises(ParseError, match="expected 'PATH: USER PID ACCESS COMMAND'"):
        parse_fuser("/dev/nvidia0:  4242m 4243m\n")


SPLIT_STDERR = ("                     USER        PID ACCESS COMMAND\n"
                "/dev/nvidia0:        root      F...m Xorg\n"
                "                     vllm      F...m python3\n"
                "/mnt/models:         root      mount /mnt/models\n"
                "/dev/nvidia-uvm:     vllm      F.... python3\n")
SPLIT_STDOUT = "  1025  4242kernel  4242"


@pytest.mark.parametrize("text", [SPLIT_STDOUT + "\n" + SPLIT_STDERR, SPLIT_STDERR + "\n" + SPLIT_STDOUT])
def test_fuser_stdout_and_stderr_captured_apart(text):
    """psmisc writes the PIDs to stdout and the rest of each row to stderr."""
    assert parse_fuser(text) == [FuserEntry("/dev/nvidia0", "root", 1025, "F...m", "Xorg"),
                                 FuserEntry("/dev/nvidia0", "vllm", 4242, "F...m", "python3"),
                                 FuserEntry("/dev/nvidia-uvm", "vllm", 4242, "F....", "python3")]


def test_fuser_stdout_alone_and_mismatches():
    assert parse_fuser(SPLIT_STDOUT) == [FuserEntry("", "", 1025, "", ""), FuserEntry("", "", 4242, "", ""),
                                         FuserEntry("", "", 4242, "", "")]
    with pytest.raises(ParseError, match="4 rows without PIDs but 2 PIDs on stdout"):
        parse_fuser("  1025  4242\n" + SPLIT_STDERR)
    with pytest.raises(ParseError, match="some rows have a PID column and some do not"):
        parse_fuser(SPLIT_STDERR + "/dev/nvidiactl:      root       1025 F...m Xorg\n")
    with pytest.raises(ParseError, match="a line of bare PIDs beside complete rows"):
        parse_fuser("  77\n/dev/nvidiactl:      root       1025 F...m Xorg\n")


# -- cgroups and container ids --------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    f"12:memory:/kubepods/burstable/{POD}/{ID}\n11:cpu,cpuacct:/kubepods/burstable/{POD}/{ID}\n",
    f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-{POD.replace('-', '_')}.slice/"
    f"cri-containerd-{ID}.scope\n",
    f"0::/system.slice/docker-{ID}.scope\r\n",
    f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-{POD.replace('-', '_')}.slice/crio-{ID}.scope",
    f"1:name=systemd:/kubepods.slice/kubepods-pod1.slice:cri-containerd:{ID}\n",
    f"12:pids:/docker/{ID}\n",
])
def test_cgroup_container_id(text):
    assert parse_cgroup(text) == ID


@pytest.mark.parametrize("text", ["", "0::/\n", "0::/user.slice/user-1000.slice/session-2.scope\n",
                                  f"0::/kubepods.slice/kubepods-burstable-{POD}.slice/crio-conmon-{ID}.scope\n"])
def test_cgroup_without_container(text):
    assert parse_cgroup(text) is None


def test_cgroup_garbage():
    with pytest.raises(ParseError, match="expected 'hierarchy-id:controllers:path'") as info:
        parse_cgroup("0::/\nnot a cgroup line\n")
    assert info.value.line == 2


@pytest.mark.parametrize("raw", [f"containerd://{ID}", f"docker://{ID}", f"cri-o://{ID}", ID, f" {ID.upper()} "])
def test_normalize_container_id(raw):
    assert normalize_container_id(raw) == ID


@pytest.mark.parametrize("raw", ["", "containerd://", "docker://abc", "x" * 64])
def test_normalize_container_id_rejects(raw):
    with pytest.raises(ParseError, match="64 hex digits"):
        normalize_container_id(raw)


# -- generated ------------------------------------------------------------------------------------

printable = st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"))
args = st.text(printable, min_size=1, max_size=60).filter(lambda s: s == s.strip() and s)
stats = st.tuples(st.sampled_from("RSDZTtWXIK"), st.text(st.sampled_from("<NLsl+"), max_size=3)).map("".join)
processes = st.lists(st.builds(Process, pid=st.integers(1, 2**22), ppid=st.integers(0, 2**22), stat=stats,
                               elapsed_seconds=st.integers(0, 10**8), args=args), max_size=10)


@settings(max_examples=200, deadline=None)
@given(processes, st.booleans(), st.sampled_from(["\n", "\r\n"]))
def test_ps_eo_round_trip(procs, header, newline):
    lines = ["    PID    PPID STAT ELAPSED COMMAND"] if header else []
    lines += [f"{p.pid:>7} {p.ppid:>7} {p.stat:<4} {p.elapsed_seconds:>7} {p.args}" for p in procs]
    assert parse_ps(newline.join(lines)) == procs


@settings(max_examples=200, deadline=None)
@given(processes, st.booleans())
def test_ps_aux_round_trip(procs, header):
    lines = ["USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND"] if header else []
    lines += [f"vllm    {p.pid:>7}  0.0  0.1 123456  7890 ?        {p.stat:<4} 21:35   0:01 {p.args}" for p in procs]
    expected = [Process(p.pid, None, p.stat, None, p.args) for p in procs]
    assert parse_ps("\n".join(lines)) == expected


fuser_entries = st.lists(st.builds(
    FuserEntry, path=st.sampled_from(["/dev/nvidia0", "/dev/nvidia7", "/dev/nvidiactl", "/dev/nvidia-uvm"]),
    user=st.from_regex(r"[a-z_][a-z0-9_-]{0,11}", fullmatch=True), pid=st.integers(1, 2**22),
    access=st.sampled_from(["F...m", "f....", "F....", "Frce.", "....m"]), command=args), max_size=10)


@settings(max_examples=200, deadline=None)
@given(fuser_entries, st.sampled_from(["terminal", "stdout first", "stderr first"]))
def test_fuser_round_trip(entries, capture):
    stderr, previous = ["                     USER        PID ACCESS COMMAND"], None
    for e in entries:
        path = " " * 20 if e.path == previous else f"{e.path + ':':<20}"
        pid = f"{e.pid:>6}" if capture == "terminal" else ""
        stderr.append(f"{path} {e.user:<8} {pid} {e.access} {e.command}")
        previous = e.path
    stdout = "".join(f" {e.pid:>5}" for e in entries)  # psmisc ≥ 23: " %5d", never glued together
    text = {"terminal": "\n".join(stderr), "stdout first": stdout + "\n" + "\n".join(stderr),
            "stderr first": "\n".join(stderr) + "\n" + stdout}[capture]
    assert parse_fuser(text) == entries


@settings(max_examples=200, deadline=None)
@given(st.from_regex(r"[0-9a-f]{64}", fullmatch=True), st.sampled_from(["cri-containerd-", "docker-", "crio-", ""]))
def test_cgroup_round_trip(container_id, runtime):
    scope = f"{runtime}{container_id}.scope" if runtime else container_id
    assert parse_cgroup(f"0::/kubepods.slice/kubepods-{POD}.slice/{scope}\n") == container_id
    assert normalize_container_id(f"containerd://{container_id}") == container_id


@pytest.mark.parametrize("parser", [parse_ps, parse_fuser, parse_cgroup, normalize_container_id])
@settings(max_examples=200, deadline=None)
@given(text=st.text())
def test_arbitrary_text_raises_only_parse_error(parser, text):
    try:
        parser(text)
    except ParseError as error:
        assert error.format and (error.line is None or error.line >= 1)
