"""`/proc/<pid>/stat` and the kill script's report: this machine's own /proc, hand-written lines, generated comms.

Field 22 (starttime) with the PID is the identity a kill is checked against, so it must come out
right whatever the process called itself.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runbook.sim import formats as sim_formats
from runbook.parsers.errors import ParseError
from runbook.parsers.kill_by_identity import Target, Verdict, argv, parse_report
from runbook.parsers.procs import ProcStat, parse_proc_stat, parse_proc_stats

# Linux 6.1, a vLLM server: comm with a space and a parenthesis, as `python3 (vllm)` would be
LINE = ("40211 (pt_main (thread)) S 1 40211 40211 0 -1 4194560 1882736 0 12 0 93041 22107 0 0 20 0 87 0 "
        "304638000 71271161856 2874061 18446744073709551615 94443 94444 140735 0 0 0 0 16781312 1073745642 0 0 0 17 "
        "31 0 0 0 0 0 94445 94446 94447 140736 140737 140737 140738 0\n")


def test_a_real_stat_of_this_process():
    stat = parse_proc_stat(Path("/proc/self/stat").read_text())
    assert stat.pid == os.getpid() and stat.ppid == os.getppid() and stat.state == "R"
    assert stat.start_ticks > 0


def test_comm_with_spaces_and_parentheses():
    assert parse_proc_stat(LINE) == ProcStat(40211, "pt_main (thread)", "S", 1, 304638000)


def test_several_files_one_after_another():
    two = LINE + sim_formats.proc_stat(7, "python3", "Z", 1, 1234)
    assert [(s.pid, s.state, s.start_ticks) for s in parse_proc_stats(two)] == [(40211, "S", 304638000),
                                                                               (7, "Z", 1234)]
    assert parse_proc_stats("") == []


@pytest.mark.parametrize("text, message", [
    ("", "expected one line, found 0"),
    ("40211 pt_main S 1 2 3", "expected 'PID (COMM) STATE PPID …'"),
    ("40211 (vllm) S 1 40211 40211 0 -1", "expected at least 22 fields, found 8"),
    (LINE.replace(" 304638000 ", " 30463x000 "), "starttime (field 22): expected an integer, found '30463x000'"),
])
def test_malformed_stat_says_what_was_expected(text, message):
    with pytest.raises(ParseError) as caught:
        parse_proc_stat(text)
    assert message in str(caught.value) and "/proc/<pid>/stat" in str(caught.value)


@given(comm=st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\x00"), max_size=15),
       pid=st.integers(2, 4194304), start=st.integers(0, 10**12), state=st.sampled_from("RSDZTtIX"))
def test_any_comm_round_trips(comm, pid, start, state):
    stat = parse_proc_stat(sim_formats.proc_stat(pid, comm, state, 1, start))
    assert (stat.pid, stat.comm, stat.state, stat.start_ticks) == (pid, comm, state, start)


def test_the_kill_script_argv_is_one_word_per_value():
    words = argv("KILL", [Target(48213, 338118000, "1af5" + "0" * 60), Target(7, 12)])
    assert words[:2] == ["sh", "-c"] and words[3:] == ["runbook-kill", "KILL", "48213", "338118000", "1af5" + "0" * 60,
                                                       "7", "12", "-"]


def test_the_kill_report():
    text = ("signalled 48213\ngone 7\nchanged 9 start 1234\nchanged 11 container\n"
            "failed 12 kill: (12) - Operation not permitted \n")
    assert parse_report(text) == [Verdict(48213, "signalled"), Verdict(7, "gone"), Verdict(9, "changed", "start 1234"),
                                  Verdict(11, "changed", "container"),
                                  Verdict(12, "failed", "kill: (12) - Operation not permitted")]


@pytest.mark.parametrize("text, message", [
    ("killed 5\n", "expected 'signalled|gone|changed|failed PID [detail]', found 'killed 5'"),
    ("failed 1;reboot not a process id\n", "'1;reboot' was refused as a process id"),
])
def test_a_report_it_cannot_read_is_an_error(text, message):
    with pytest.raises(ParseError) as caught:
        parse_report(text)
    assert message in str(caught.value)
