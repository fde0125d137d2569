"""Issue 31, item 1: `runbook triage` on a stock vLLM cluster (vLLM's own metrics, kube-state-metrics,
the DCGM exporter, no log pipeline) reads the OOM signal from the vLLM pods' logs, served by the real
apiserver from kwok's log files, and so evaluates every playbook: a quiet hour is exit 0, not 12;
CUDA out-of-memory lines fire oom-surge; a container that restarted with the OOM in its previous log
counts. Prometheus is real and holds the cluster's series on the wall clock; triage only reads.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from runbook.cli import main
from tests.controlplane.identity import runbook_user
from tests.controlplane.plane import wait_for
from tests.prometheus.conftest import PrometheusServer, need_binary
from tests.prometheus.data import openmetrics, stock_cluster

PODS = ("vllm-server-0", "vllm-server-1", "vllm-server-2")
# vLLM V1's own lines: the engine's periodic stats, uvicorn's access log, the engine core's fatal OOM.
STATS = ("INFO 12-07 03:12:{s:02d} [loggers.py:118] Engine 000: Avg prompt throughput: 812.4 tokens/s, Avg generation "
         "throughput: 1503.2 tokens/s, Running: 30 reqs, Waiting: 2 reqs, GPU KV cache usage: 60.1%, Prefix cache "
         "hit rate: 41.3%")
ACCESS = 'INFO:     10.244.4.7:41120 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
OOM = ("ERROR 12-07 03:12:{s:02d} [core.py:588] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.17 "
       "GiB. GPU 0 has a total capacity of 22.49 GiB of which 443.88 MiB is free. Of the allocated memory 20.86 GiB "
       "is allocated by PyTorch, and 712.42 MiB is reserved by PyTorch but unallocated.")
FATAL = ["ERROR 12-07 03:12:{s:02d} [core.py:586] EngineCore encountered a fatal error.",
         "ERROR 12-07 03:12:{s:02d} [core.py:586] Traceback (most recent call last):",
         'ERROR 12-07 03:12:{s:02d} [core.py:586]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/'
         'core.py", line 577, in run_engine_core',
         OOM]


def stamp(at: dt.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def quiet_lines(now: dt.datetime, minutes: int = 10) -> list[tuple[str, str]]:
    """Ten minutes of a healthy vLLM: its stats every 10 s and a request every 2 s."""
    out = []
    for k in range(minutes * 30, 0, -1):
        at = now - dt.timedelta(seconds=2 * k)
        out.append((stamp(at), STATS.format(s=at.second) if k % 5 == 0 else ACCESS))
    return out


def oom_burst(now: dt.datetime, seconds: int = 50) -> list[tuple[str, str]]:
    """A CUDA OOM every 5 s for the last `seconds`, among the access lines."""
    out = quiet_lines(now, 1)
    out += [(stamp(now - dt.timedelta(seconds=k)), OOM.format(s=(now - dt.timedelta(seconds=k)).second))
            for k in range(seconds, 0, -5)]
    return sorted(out)


@pytest.fixture
def prometheus(namespace, tmp_path):
    """A real Prometheus holding the stock cluster's series (in this test's namespace) up to now."""
    promtool = need_binary("promtool")
    need_binary("prometheus")
    source = tmp_path / "stock.om"
    source.write_text(openmetrics([stock_cluster(dt.datetime.now(dt.timezone.utc), namespace)]))
    done = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(tmp_path / "data")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    server = PrometheusServer(shutil.which("prometheus") or "prometheus", tmp_path / "data", tmp_path)
    yield server
    server.stop()


def write_logs(plane, namespace: str, logs: dict[str, list[tuple[str, str]]]) -> None:
    for pod, lines in logs.items():
        plane.write_log(namespace, lines, pod=pod)


def triage(prometheus, kubeconfig: Path, namespace: str, *args: str):
    result = CliRunner().invoke(main, ["triage", "--prometheus-url", prometheus.url, "--kubeconfig", str(kubeconfig),
                                       "--context", "runbook-test", "-n", namespace, *args],
                                catch_exceptions=False)
    return result.exit_code, result.stdout


def triage_json(prometheus, kubeconfig: Path, namespace: str) -> tuple[int, dict]:
    code, out = triage(prometheus, kubeconfig, namespace, "--output", "json")
    return code, json.loads(out)


def by_runbook(plane, namespace: str) -> list[dict]:
    """The audit events of runbook's service account in `namespace`, oldest first."""
    return [e for e in plane.audit(namespace) if e["user"]["username"] == runbook_user(namespace)]


def log_reads(events: list[dict]) -> list[dict]:
    return [e for e in events if e["objectRef"].get("subresource") == "log"]


def served(cluster, namespace: str, pod: str, text: str) -> None:
    wait_for(f"kwok serves {pod}'s log", lambda: any(
        log.pod == pod and text in log.text for log in cluster.logs(namespace, {"app": "vllm-server"},
                                                                     since_seconds=600)), timeout=30)


def test_a_quiet_stock_cluster_is_all_clear_with_the_oom_signal_read_from_logs(
        plane, namespace, vllm, kubeconfig, cluster, prometheus):
    now = dt.datetime.now(dt.timezone.utc)
    write_logs(plane, namespace, {pod: quiet_lines(now) for pod in PODS})
    served(cluster, namespace, PODS[-1], "Engine 000")
    before = len(by_runbook(plane, namespace))
    without = CliRunner().invoke(main, ["triage", "--prometheus-url", prometheus.url, "-n", namespace],
                                 catch_exceptions=False)
    assert without.exit_code == 12  # no cluster: no source, as before, saying what a cluster would add
    assert "with a cluster (--kubeconfig, --context or --in-cluster) triage reads it" in without.stdout
    code, doc = triage_json(prometheus, kubeconfig, namespace)
    assert code == 0, doc["headline"]
    assert doc["headline"].startswith("All clear: nothing fires (") and "1 from the pods' logs" in doc["headline"]
    assert doc["no_source"] == [] and doc["unknown"] == []
    oom = next(f for f in doc["quiet"] if f["playbook"] == "oom-surge")
    assert (oom["value"], oom["read_from"]) == (0.0, "from logs, 3 pods, last 5m")
    assert oom["logs"]["events"] == 0 and oom["logs"]["capped"] == []
    code, text = triage(prometheus, kubeconfig, namespace)
    assert code == 0 and "oom-surge (oom_failures_per_min = 0, from logs, 3 pods, last 5m)" in text
    # Triage only reads: each pod's log once a run (no previous logs: no pod restarted), nothing written.
    asked = by_runbook(plane, namespace)[before:]
    assert {e["verb"] for e in asked} == {"get", "list"}
    assert sorted(e["objectRef"]["name"] for e in log_reads(asked)) == sorted(PODS * 2)


def test_an_oom_burst_in_one_pods_log_fires_oom_surge(plane, namespace, vllm, kubeconfig, cluster, prometheus):
    now = dt.datetime.now(dt.timezone.utc)
    write_logs(plane, namespace, {PODS[0]: oom_burst(now), PODS[1]: quiet_lines(now), PODS[2]: quiet_lines(now)})
    served(cluster, namespace, PODS[0], "OutOfMemoryError")
    code, doc = triage_json(prometheus, kubeconfig, namespace)
    assert code == 10, doc["headline"]
    assert doc["top"] == "oom-surge" and doc["headline"].startswith("Firing: oom-surge (P1)")
    firing = doc["firing"][0]
    assert firing["read_from"] == "from logs, 3 pods, last 5m"
    assert firing["value"] >= 10  # one every 5 s: 11 or 12 of them in the last minute, as the run began
    assert firing["held_seconds"] >= 30 and not firing["since_is_lower_bound"]
    code, text = triage(prometheus, kubeconfig, namespace)
    assert code == 10
    assert "from logs, 3 pods, last 5m: " in text and "CUDA out-of-memory error lines" in text


def test_a_restart_with_the_oom_in_its_previous_log_counts(plane, namespace, vllm, kubeconfig, cluster, prometheus):
    now = dt.datetime.now(dt.timezone.utc)
    write_logs(plane, namespace, {pod: quiet_lines(now) for pod in PODS})
    crashed = now - dt.timedelta(seconds=40)
    plane.write_log(namespace, quiet_lines(crashed, 2) + [(stamp(crashed), line.format(s=crashed.second))
                                                          for line in FATAL], pod=PODS[2], previous=True)
    plane.container_restarted(namespace, PODS[2], "vllm", reason="Error", exit_code=1,
                              finished_at=stamp(crashed + dt.timedelta(seconds=1))[:19] + "Z")
    served(cluster, namespace, PODS[2], "Engine 000")
    before = len(by_runbook(plane, namespace))
    code, doc = triage_json(prometheus, kubeconfig, namespace)
    assert code == 10, doc["headline"]
    firing = doc["firing"][0]
    assert firing["playbook"] == "oom-surge" and firing["value"] == pytest.approx(1.0)
    assert firing["logs"]["restarted"] == [PODS[2]] and firing["logs"]["events"] == 1
    # The previous log is asked of the restarted pod only.
    logs = log_reads(by_runbook(plane, namespace)[before:])
    assert len(logs) == 4 and sum("previous=true" in e["requestURI"] for e in logs) == 1
