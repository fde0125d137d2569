"""Log lines counted per pod and minute with checked, bounded patterns; prompt lengths from vLLM's
request logger and its context-length refusals (issue 16, items 2 and 7)."""

from __future__ import annotations

import datetime as dt

import pytest

from runbook.parsers import log_matches, vllm_requests

UTC = dt.timezone.utc


def test_kubelet_timestamps_are_split_off_and_read_as_utc():
    text = ("2026-03-14T03:10:02.123456789Z ERROR torch.OutOfMemoryError: CUDA out of memory.\n"
            "2026-03-14T04:10:02+01:00 INFO ok\n"
            "no timestamp here\n")
    lines = log_matches.split_lines(text)
    assert [line.at for line in lines] == [dt.datetime(2026, 3, 14, 3, 10, 2, 123456, tzinfo=UTC),
                                           dt.datetime(2026, 3, 14, 3, 10, 2, tzinfo=UTC), None]
    assert [line.text for line in lines] == ["ERROR torch.OutOfMemoryError: CUDA out of memory.", "INFO ok",
                                            "no timestamp here"]


def test_matches_are_counted_per_pod_minute_and_pattern():
    a = "".join(f"2026-03-14T03:10:{s:02d}.000000000Z INFO Aborted request chatcmpl-{s}.\n" for s in range(0, 60, 5))
    a += "2026-03-14T03:11:01.000000000Z ConnectionResetError: [Errno 104] Connection reset by peer\n"
    b = "2026-03-14T03:10:30.000000000Z INFO: 10.0.0.1 - \"POST /v1/chat/completions HTTP/1.1\" 200 OK\n"
    counts = log_matches.count_matches([("p0", a), ("p1", b)], ["Aborted request", "ConnectionResetError"])
    assert counts.by_pod == {"p0": 13, "p1": 0}
    assert counts.by_pod_minute == {"p0": {"2026-03-14T03:10Z": 12, "2026-03-14T03:11Z": 1}}
    assert counts.by_minute == {"2026-03-14T03:10Z": 12, "2026-03-14T03:11Z": 1}
    assert counts.peak_per_min == 12 and counts.total == 13
    assert counts.by_pattern == {"Aborted request": 12, "ConnectionResetError": 1}


@pytest.mark.parametrize("pattern, why", [
    ("(a+)+$", "repeats a group that itself repeats"),
    ("(?:x*){2,}", "repeats a group that itself repeats"),
    (".*", "matches every line"),
    ("(", "not a valid regular expression"),
    ("x" * 201, "1 to 200 characters"),
])
def test_unbounded_or_useless_patterns_are_refused_saying_why(pattern, why):
    with pytest.raises(ValueError, match=why):
        log_matches.check_pattern(pattern)


def test_a_hostile_line_is_matched_on_its_first_4_kib_only():
    line = "2026-03-14T03:10:00Z " + "a" * 100_000 + " CUDA out of memory\n"
    assert log_matches.count_matches([("p", line)], ["CUDA out of memory"]).total == 0
    assert len(log_matches.split_lines(line)[0].text) == log_matches.MAX_LINE_CHARS


def test_prompt_lengths_from_request_lines_and_refusals():
    ids = ", ".join(str(128000 + i) for i in range(7890))
    lines = [
        ("p0", f"INFO 06-08 11:04:00 [logger.py:43] Received request chatcmpl-1: prompt: 'hi', params: "
               f"SamplingParams(n=1, max_tokens=256), prompt_token_ids: [{ids}], prompt_embeds shape: None, lora_request: None."),
        ("p0", "ERROR 06-08 11:04:10 [serving_chat.py:222] Error in preprocessing prompt inputs: ValueError: This model's "
               "maximum context length is 8192 tokens. However, you requested 9310 tokens (8286 in the messages, 1024 in "
               "the completion). Please reduce the length of the messages or completion."),
        ("p1", "ERROR This model's maximum context length is 8192 tokens. However, your request has 8500 input tokens. "
               "Please reduce the length of the input messages."),
        ("p1", "INFO Received request cmpl-2: prompt: 'x', params: SamplingParams(), prompt_token_ids: [1, 2, 3"),
        ("p1", "INFO:     10.0.0.1 - \"POST /v1/completions HTTP/1.1\" 200 OK"),
    ]
    seen = vllm_requests.prompts_in(lines)
    assert [(s.pod, s.prompt_tokens, s.rejected, s.limit, s.lower_bound) for s in seen] == [
        ("p0", 7890, False, None, False), ("p0", 9310, True, 8192, False), ("p1", 8500, True, 8192, False),
        ("p1", 3, False, None, True)]
