"""Exec and logs through the real apiserver to the nodes' kubelet endpoint: the same upgrade, channels
and Status frames a kubelet serves, the pod's tool being a stand-in that prints a recorded output.
"""

from __future__ import annotations

import datetime as dt

import pytest

from runbook.errors import RunbookError
from runbook.parsers.nvidia_smi import parse_memory_report
from tests.conftest import data_text
from tests.controlplane import objects
from tests.controlplane.identity import connect, runbook_kubeconfig

APP = {"app": "vllm-server"}


@pytest.fixture
def cluster(plane, namespace, tmp_path):
    plane.apply(objects.vllm_statefulset(namespace, replicas=2))
    objects.settled(plane, namespace, "statefulset", "vllm-server")
    made = connect(runbook_kubeconfig(plane, namespace, tmp_path / "kubeconfig"))
    yield made
    made.close()


def test_exec_runs_the_pods_own_tool_and_reads_its_output(plane, namespace, cluster):
    recorded = data_text("nvidia-smi/q-d-memory-h100-80gb-vllm-serving.txt")
    plane.answer(namespace, "nvidia-smi", pod="vllm-server-1", stdout=recorded)
    done = cluster.exec(namespace, "vllm-server-1", "vllm", ["nvidia-smi", "-q", "-d", "MEMORY"], timeout=20)
    assert (done.stdout, done.exit_code) == (recorded, 0)
    assert parse_memory_report(done.stdout)  # the parser reads what came over the wire
    assert plane.calls(namespace, "vllm-server-1") == [["nvidia-smi", "-q", "-d", "MEMORY"]]
    assert plane.calls(namespace, "vllm-server-0") == []  # each pod's tool is its own


def test_a_tool_that_exits_non_zero_is_an_answer_not_a_broken_exec(plane, namespace, cluster):
    # pgrep finding nothing exits 1: the apiserver relays the kubelet's NonZeroExitCode Status frame.
    plane.answer(namespace, "pgrep", pod="vllm-server-0", stdout="", stderr="", exit_code=1)
    plane.answer(namespace, "curl", pod="vllm-server-0", stdout="", stderr="curl: (28) Operation timed out\n",
                 exit_code=28)
    quiet = cluster.exec(namespace, "vllm-server-0", "vllm", ["pgrep", "-f", "vllm serve"], timeout=20)
    assert (quiet.stdout, quiet.exit_code) == ("", 1)
    slow = cluster.exec(namespace, "vllm-server-0", "vllm", ["curl", "-sf", "http://127.0.0.1:8000/health"], timeout=20)
    assert (slow.exit_code, slow.stderr) == (28, "curl: (28) Operation timed out\n")


def test_exec_into_a_pod_that_is_not_there_says_so(plane, namespace, cluster):
    with pytest.raises(RunbookError, match="vllm-server-7"):
        cluster.exec(namespace, "vllm-server-7", "vllm", ["nvidia-smi"], timeout=20)


def test_logs_of_the_running_and_the_previous_container(plane, namespace, cluster):
    now = dt.datetime.now(dt.timezone.utc)
    stamp = lambda seconds: (now - dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # noqa: E731
    plane.write_log(namespace, [(stamp(3600), "INFO 03:00:00 engine started"),
                                (stamp(30), "ERROR 03:59:30 torch.OutOfMemoryError: CUDA out of memory. Tried to "
                                            "allocate 2.00 GiB")], pod="vllm-server-0", previous=True)
    plane.container_restarted(namespace, "vllm-server-0", "vllm", finished_at=stamp(29)[:19] + "Z")
    plane.write_log(namespace, [(stamp(10), "INFO 03:59:50 Avg prompt throughput: 12.0 tokens/s")],
                    pod="vllm-server-0")
    logs = {(log.pod, log.previous): log for log in
            cluster.logs(namespace, APP, since_seconds=300, with_previous=True)}
    previous = logs[("vllm-server-0", True)]
    assert "CUDA out of memory" in previous.text and "engine started" not in previous.text  # since= is honoured
    assert "Avg prompt throughput" in logs[("vllm-server-0", False)].text
    assert logs[("vllm-server-1", True)].absent  # never restarted: no previous container to read
    assert logs[("vllm-server-1", False)].text == ""
