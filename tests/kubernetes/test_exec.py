"""Exec over the WebSocket channel protocol (v4 and v5): output, exit codes, deadlines, drops."""

from __future__ import annotations

import time

import pytest

from runbook.errors import BackendUnavailable, CommandFailed, NotFound
from tests.conftest import data_text
from tests.kubernetes.apiserver.kubelet import ExecAnswer


def _memory_report() -> str:
    return data_text("nvidia-smi/q-d-memory-h100-80gb-vllm-serving.txt")


def test_stdout_stderr_and_success(k8s, cluster):
    report = _memory_report()
    k8s.kubelet.script(["nvidia-smi", "-q", "-d", "MEMORY"], ExecAnswer(stdout=report, stderr="warning: x\n"))
    out = cluster.exec("llm", "vllm-server-0", "vllm", ["nvidia-smi", "-q", "-d", "MEMORY"], timeout=10)
    assert (out.stdout, out.stderr, out.exit_code, out.truncated) == (report, "warning: x\n", 0, False)
    assert k8s.kubelet.execs == [("llm", "vllm-server-0", "vllm", ("nvidia-smi", "-q", "-d", "MEMORY"))]


def test_a_non_zero_exit_code_comes_back_as_such(k8s, cluster):
    k8s.kubelet.script(["pgrep", "-f", "vllm serve"], ExecAnswer(exit_code=1))
    k8s.kubelet.script(["sh", "-c", "exit 3"], ExecAnswer(stderr="three\n", exit_code=3))
    assert cluster.exec("llm", "vllm-server-1", "vllm", ["pgrep", "-f", "vllm serve"], timeout=10).exit_code == 1
    out = cluster.exec("llm", "vllm-server-1", "vllm", ["sh", "-c", "exit 3"], timeout=10)
    assert (out.exit_code, out.stderr) == (3, "three\n")


def test_output_split_over_many_messages_is_reassembled(k8s, cluster):
    text = "".join(f"line {i}\n" for i in range(20000))
    k8s.kubelet.script(["cat", "/proc/net/tcp"], ExecAnswer(stdout=text, chunk=4096))
    assert cluster.exec("llm", "vllm-server-0", "vllm", ["cat", "/proc/net/tcp"], timeout=10).stdout == text


def test_a_character_split_across_two_messages_stays_whole(k8s, cluster):
    # nvidia-smi prints "°C" and product names in UTF-8; the kubelet cuts its frames by bytes.
    text = "GPU 0: 45 °C\n" * 3
    k8s.kubelet.script(["nvidia-smi"], ExecAnswer(stdout=text, chunk=11))  # the 11th byte is inside "°"
    assert text.encode()[10:12] == "°".encode()
    assert cluster.exec("llm", "vllm-server-0", "vllm", ["nvidia-smi"], timeout=10).stdout == text


def test_a_missing_binary_is_an_error_not_an_exit_code(k8s, cluster):
    with pytest.raises(CommandFailed, match='could not run.*executable file not found'):
        cluster.exec("llm", "vllm-server-0", "vllm", ["nvidia-smi"], timeout=10)


def test_v4_clients_get_the_exit_status_too(k8s, cluster):
    """Older API servers only speak v4: the client offers v5 then v4, the server picks v4 here."""
    from tests.kubernetes.apiserver import app

    k8s.kubelet.script(["false"], ExecAnswer(exit_code=1))
    original = app.CHANNEL_PROTOCOLS
    app.CHANNEL_PROTOCOLS = ("v4.channel.k8s.io",)
    try:
        assert cluster.exec("llm", "vllm-server-0", "vllm", ["false"], timeout=10).exit_code == 1
    finally:
        app.CHANNEL_PROTOCOLS = original


def test_a_hung_command_times_out_as_an_error(k8s, cluster):
    k8s.kubelet.script(["nvidia-smi"], ExecAnswer(stdout="partial", hang=True))
    started = time.monotonic()
    with pytest.raises(CommandFailed, match=r"did not finish within 1s.*not used"):
        cluster.exec("llm", "vllm-server-0", "vllm", ["nvidia-smi"], timeout=1)
    assert time.monotonic() - started < 4
    # The next exec works: nothing is left half-open.
    k8s.kubelet.script(["true"], ExecAnswer())
    assert cluster.exec("llm", "vllm-server-0", "vllm", ["true"], timeout=5).exit_code == 0


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


def test_refusals_before_the_stream_say_why(k8s, cluster):
    with pytest.raises(NotFound, match="container sidecar is not valid for pod vllm-server-0"):
        cluster.exec("llm", "vllm-server-0", "sidecar", ["true"], timeout=5)
    with pytest.raises(NotFound):
        cluster.exec("llm", "vllm-server-9", "vllm", ["true"], timeout=5)
    k8s.set_pod("llm", "vllm-server-2", phase="Succeeded")
    with pytest.raises(CommandFailed, match="Succeeded"):
        cluster.exec("llm", "vllm-server-2", "vllm", ["true"], timeout=5)
    k8s.set_pod("llm", "vllm-server-2", phase="Pending")
    with pytest.raises(CommandFailed, match=r'HTTP 400.*container not found \("vllm"\)'):
        cluster.exec("llm", "vllm-server-2", "vllm", ["true"], timeout=5)


def test_an_exec_asks_the_api_once_per_pod(k8s, cluster):
    """The exec's own answer says whether the pod and container exist: no read of the pod first."""
    k8s.kubelet.script(["true"], ExecAnswer())
    before = len(k8s.seen)
    cluster.exec("llm", "vllm-server-0", "vllm", ["true"], timeout=5)
    assert [(s.verb, s.resource) for s in k8s.seen[before:]] == [("create", "pods/exec")]


def test_a_forbidden_exec_names_the_missing_permission(k8s, cluster):
    k8s.inject(path=r"/exec$", status=403)
    with pytest.raises(BackendUnavailable, match="pods/exec"):
        cluster.exec("llm", "vllm-server-0", "vllm", ["true"], timeout=5)


def test_concurrent_execs_each_get_their_own_answer(k8s, cluster):
    """A step fans exec out over pods in threads: no stream may see another's output."""
    import concurrent.futures

    k8s.apply(*[{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"solo-{i}", "labels": {"app": "solo"}},
                 "spec": {"containers": [{"name": "vllm", "image": "x"}]}, "status": {"phase": "Running"}}
                for i in range(8)])
    for i in range(8):
        k8s.kubelet.script(["hostname"], ExecAnswer(stdout=f"solo-{i}\n", delay=0.3), pod=f"solo-{i}")
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: cluster.exec("llm", f"solo-{i}", "vllm", ["hostname"], timeout=10).stdout,
                                range(8)))
    assert answers == [f"solo-{i}\n" for i in range(8)]
    assert time.monotonic() - started < 8 * 0.3  # they ran side by side
