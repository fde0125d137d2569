"""Exec through the real apiserver's upgrade to the nodes' kubelet endpoint: both streams, large
outputs, a missing binary, a hung command, the apiserver's refusals, and execs side by side.
"""

from __future__ import annotations

import concurrent.futures

import pytest

from runbook.errors import CommandFailed, NotFound
from tests.conftest import data_text
from tests.controlplane import objects
from tests.controlplane.identity import runbook_user
from tests.controlplane.plane import wait_for


def serving(plane, namespace: str, replicas: int = 1) -> None:
    plane.apply(objects.vllm_statefulset(namespace, replicas=replicas))
    objects.settled(plane, namespace, "statefulset", "vllm-server", timeout=120)


def test_stdout_stderr_and_success(plane, namespace, cluster):
    serving(plane, namespace)
    report = data_text("nvidia-smi/q-d-memory-h100-80gb-vllm-serving.txt")
    plane.answer(namespace, "nvidia-smi", pod="vllm-server-0", stdout=report, stderr="warning: x\n")
    out = cluster.exec(namespace, "vllm-server-0", "vllm", ["nvidia-smi", "-q", "-d", "MEMORY"], timeout=20)
    assert (out.stdout, out.stderr, out.exit_code, out.truncated) == (report, "warning: x\n", 0, False)
    assert plane.calls(namespace, "vllm-server-0") == [["nvidia-smi", "-q", "-d", "MEMORY"]]


def test_an_exec_asks_the_api_once_per_pod(plane, namespace, cluster):
    """The exec's own answer says whether the pod and container exist: no read of the pod first."""
    serving(plane, namespace)
    plane.answer(namespace, "ls", pod="vllm-server-0", stdout="model\n")
    assert cluster.exec(namespace, "vllm-server-0", "vllm", ["ls", "/models"], timeout=20).stdout == "model\n"
    runbook = runbook_user(namespace)

    def asked() -> list[tuple[str, str, str, str]]:
        return [(e["verb"], e["objectRef"]["resource"], e["objectRef"].get("subresource", ""), e["objectRef"]["name"])
                for e in plane.audit(namespace) if e["user"]["username"] == runbook]

    # The apiserver logs an exec's ResponseComplete once its handler returns, a moment after the
    # client has seen the stream close: wait for it, then count.
    wait_for("the exec's audit event", asked, timeout=10)
    assert len(asked()) == 1 and asked()[0][1:] == ("pods", "exec", "vllm-server-0"), asked()


def test_output_split_over_many_messages_is_reassembled(plane, namespace, cluster):
    serving(plane, namespace)
    # Far more than one frame of the kubelet's or the apiserver's buffers: they cut it where they will.
    text = "".join(f"line {i}\n" for i in range(20000))
    plane.answer(namespace, "cat", pod="vllm-server-0", stdout=text)
    out = cluster.exec(namespace, "vllm-server-0", "vllm", ["cat", "/proc/net/tcp"], timeout=30)
    assert (out.stdout, out.exit_code, out.truncated) == (text, 0, False)


def test_a_missing_binary_is_an_error_not_an_exit_code(plane, namespace, cluster):
    serving(plane, namespace)
    # dcgmi is no tool of the pod's: the runtime cannot start it, there is no exit code to read.
    with pytest.raises(CommandFailed, match="could not run.*executable file not found"):
        cluster.exec(namespace, "vllm-server-0", "vllm", ["dcgmi", "diag", "-r", "1"], timeout=20)


def test_a_hung_command_times_out_as_an_error_and_the_next_exec_works(plane, namespace, cluster):
    serving(plane, namespace)
    plane.answer(namespace, "nvidia-smi", pod="vllm-server-0", stdout="partial", sleep=30)
    with pytest.raises(CommandFailed, match=r"did not finish within 1s.*not used"):
        cluster.exec(namespace, "vllm-server-0", "vllm", ["nvidia-smi"], timeout=1)
    # Nothing is left half-open: the next exec through the same client answers.
    plane.answer(namespace, "pgrep", pod="vllm-server-0", stdout="1\n")
    out = cluster.exec(namespace, "vllm-server-0", "vllm", ["pgrep", "-f", "vllm"], timeout=20)
    assert (out.stdout, out.exit_code) == ("1\n", 0)


def test_refusals_before_the_stream_say_why(plane, namespace, cluster):
    serving(plane, namespace)
    with pytest.raises(NotFound, match="container sidecar is not valid for pod vllm-server-0"):
        cluster.exec(namespace, "vllm-server-0", "sidecar", ["nvidia-smi"], timeout=20)
    with pytest.raises(NotFound, match="vllm-server-9"):
        cluster.exec(namespace, "vllm-server-9", "vllm", ["nvidia-smi"], timeout=20)
    assert plane.calls(namespace, "vllm-server-0") == []


def test_concurrent_execs_each_get_their_own_answer(plane, namespace, cluster):
    """A step fans exec out over pods in threads: no stream may see another's output."""
    serving(plane, namespace, replicas=6)
    for i in range(6):
        # Each held a moment, so that the streams are open at once.
        plane.answer(namespace, "cat", pod=f"vllm-server-{i}", stdout=f"vllm-server-{i}\n" * 200, sleep=0.3)
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda i: cluster.exec(namespace, f"vllm-server-{i}", "vllm",
                                                       ["cat", "/etc/hostname"], timeout=30).stdout, range(6)))
    assert answers == [f"vllm-server-{i}\n" * 200 for i in range(6)]
    assert [plane.calls(namespace, f"vllm-server-{i}") for i in range(6)] == [[["cat", "/etc/hostname"]]] * 6
