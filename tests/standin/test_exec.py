"""Exec over the WebSocket channel protocol on the stand-in, for what a real apiserver and kubelet cannot be
made to do: cut a frame inside a character, speak only v4, drop a stream, stall the handshake, a kubelet's 400."""

from __future__ import annotations

import time

import pytest

from runbook.errors import CommandFailed
from tests.standin.apiserver.kubelet import ExecAnswer


def test_a_character_split_across_two_messages_stays_whole(k8s, cluster):
    # nvidia-smi prints "°C" and product names in UTF-8; the kubelet cuts its frames by bytes.
    text = "GPU 0: 45 °C\n" * 3
    k8s.kubelet.script(["nvidia-smi"], ExecAnswer(stdout=text, chunk=11))  # the 11th byte is inside "°"
    assert text.encode()[10:12] == "°".encode()
    assert cluster.exec("llm", "vllm-server-0", "vllm", ["nvidia-smi"], timeout=10).stdout == text


def test_v4_clients_get_the_exit_status_too(k8s, cluster):
    """Older API servers only speak v4: the client offers v5 then v4, the server picks v4 here."""
    from tests.standin.apiserver import app

    k8s.kubelet.script(["false"], ExecAnswer(exit_code=1))
    original = app.CHANNEL_PROTOCOLS
    app.CHANNEL_PROTOCOLS = ("v4.channel.k8s.io",)
    try:
        assert cluster.exec("llm", "vllm-server-0", "vllm", ["false"], timeout=10).exit_code == 1
    finally:
        app.CHANNEL_PROTOCOLS = original


def test_a_dropped_stream_is_an_error_never_truncated_output(k8s, cluster):
    k8s.kubelet.script(["ps", "-eo", "pid,stat,args"], ExecAnswer(stdout="  PID STAT ARGS\n    1 Ss  python3 -m v",
                                                                  drop=True))
    with pytest.raises(CommandFailed, match="closed before the command's exit status arrived"):
        cluster.exec("llm", "vllm-server-0", "vllm", ["ps", "-eo", "pid,stat,args"], timeout=10)


def test_a_slow_handshake_counts_against_the_deadline(k8s, cluster):
    k8s.kubelet.script(["true"], ExecAnswer())
    k8s.inject(path=r"/exec$", status=None, delay=4.0)
    started = time.monotonic()
    with pytest.raises(CommandFailed, match="did not finish within 1s"):
        cluster.exec("llm", "vllm-server-0", "vllm", ["true"], timeout=1)
    assert time.monotonic() - started < 1 + 1.5


def test_an_exec_into_a_finished_or_pending_pod_is_refused(k8s, cluster):
    # Not yet on the real plane: a phase patched to Succeeded there did not refuse the exec (not
    # investigated); a Pending pod's 400 is a real kubelet's answer, and kwok's nodes are not one.
    k8s.set_pod("llm", "vllm-server-2", phase="Succeeded")
    with pytest.raises(CommandFailed, match="Succeeded"):
        cluster.exec("llm", "vllm-server-2", "vllm", ["true"], timeout=5)
    k8s.set_pod("llm", "vllm-server-2", phase="Pending")
    with pytest.raises(CommandFailed, match=r'HTTP 400.*container not found \("vllm"\)'):
        cluster.exec("llm", "vllm-server-2", "vllm", ["true"], timeout=5)
