"""The realism check: the installed kubectl works against the test API server, as runbook's
ServiceAccount (discovery, server-side printing, the scale subresource, its refusals), and as an
on-call person's own identity for exec and logs (kubectl reads the pod first; runbook does not,
so its Role has no `get` on pods)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.standin.apiserver.kubelet import ExecAnswer
from tests.standin.apiserver.server import ADMIN_TOKEN


@pytest.fixture
def run_kubectl(k8s, kubectl, kubeconfig, tmp_path):
    person = k8s.kubeconfig(tmp_path / "person-kubeconfig", token=ADMIN_TOKEN)

    def run(*args: str, check: bool = True, as_person: bool = False) -> subprocess.CompletedProcess:
        config = person if as_person else kubeconfig
        done = subprocess.run([kubectl, "--kubeconfig", str(config), "--context", "runbook-test", "-n", "llm",
                               "--request-timeout=20s", *args], capture_output=True, text=True, timeout=60,
                              env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
        if check:
            assert done.returncode == 0, done.stderr
        return done

    return run


def test_get_pods_prints_the_servers_table(k8s, run_kubectl):
    k8s.set_pod("llm", "vllm-server-1", ready=False, restarts={"vllm": 3})
    rows = {line.split()[0]: line.split() for line in run_kubectl("get", "pods").stdout.splitlines()[1:]}
    assert rows["vllm-server-0"][1:4] == ["1/1", "Running", "0"]
    assert rows["vllm-server-1"][1:4] == ["0/1", "Running", "3"]
    listed = json.loads(run_kubectl("get", "pods", "-l", "app=vllm-server", "-o", "json").stdout)
    assert {p["metadata"]["uid"] for p in listed["items"]} == \
        {p["metadata"]["uid"] for p in k8s.pods() if p["metadata"]["labels"]["app"] == "vllm-server"}


def test_scale_statefulset_goes_through_the_scale_subresource(k8s, run_kubectl):
    run_kubectl("scale", "statefulset", "vllm-server", "--replicas=2", "--dry-run=server")
    assert k8s.get("StatefulSet", "llm", "vllm-server")["spec"]["replicas"] == 3
    assert "scaled" in run_kubectl("scale", "statefulset", "vllm-server", "--replicas=2").stdout
    assert k8s.get("StatefulSet", "llm", "vllm-server")["spec"]["replicas"] == 2
    assert sorted(p["metadata"]["name"] for p in k8s.pods() if p["metadata"]["labels"]["app"] == "vllm-server") == \
        ["vllm-server-0", "vllm-server-1"]
    scales = [(s.verb, s.dry_run) for s in k8s.seen if s.resource == "statefulsets/scale"]
    assert scales == [("patch", True), ("patch", False)]


def test_exec_nvidia_smi_and_exit_codes(k8s, run_kubectl):
    k8s.kubelet.script(["nvidia-smi"], ExecAnswer(stdout="| NVIDIA-SMI 590.48.01 |\n"))
    k8s.kubelet.script(["sh", "-c", "exit 3"], ExecAnswer(stderr="three\n", exit_code=3))
    assert run_kubectl("exec", "vllm-server-0", "-c", "vllm", "--", "nvidia-smi",
                       as_person=True).stdout == "| NVIDIA-SMI 590.48.01 |\n"
    failed = run_kubectl("exec", "vllm-server-0", "-c", "vllm", "--", "sh", "-c", "exit 3", check=False, as_person=True)
    assert failed.returncode == 3 and "three" in failed.stderr
    missing = run_kubectl("exec", "vllm-server-0", "-c", "vllm", "--", "nvidia-debugdump", check=False,
                          as_person=True)
    assert missing.returncode != 0 and "executable file not found" in missing.stderr


def test_logs_and_rbac_refusals_read_as_from_a_real_server(k8s, run_kubectl):
    k8s.kubelet.log("llm", "vllm-server-0", "vllm", "INFO:     Started server process [7]")
    assert run_kubectl("logs", "vllm-server-0", "-c", "vllm",
                       as_person=True).stdout == "INFO:     Started server process [7]\n"
    denied = run_kubectl("get", "statefulsets", check=False)  # runbook's Role has no `list` on workloads
    assert denied.returncode == 1
    assert denied.stderr.strip() == ('Error from server (Forbidden): statefulsets.apps is forbidden: User '
                                     '"system:serviceaccount:llm:runbook" cannot list resource "statefulsets" in API '
                                     'group "apps" in the namespace "llm"')
