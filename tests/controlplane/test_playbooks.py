"""Bundled Kubernetes playbooks run on the real control plane: the drill's scenario laid through the
API, the real controllers making and moving the pods, a real Prometheus holding the drill's
timeline. The journal must tell the drill's story (the same events of the same steps, in order,
and the same outcome), and the cluster must be left as a real one would be.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from runbook.engine.operator import AssumeYes
from tests.controlplane import drills, objects
from tests.prometheus.conftest import need_binary
from tests.realstack import timeline
from tests.realstack.stepped import SteppedPrometheus

SCENARIOS = ("oom-surge", "oom-surge-hpa", "oom-surge-at-floor", "waiting-queue", "waiting-queue-all-unready",
             "zombie-process", "latency-creep", "latency-creep-water-line", "prompt-truncation", "disconnect-storm",
             "canary-rollback", "canary-rollback-stable-unready")
# Divergences from the drill still open on the real control plane (scenario -> why).
KNOWN: dict[str, str] = {
    "zombie-process": "http.probe GETs each pod's IP directly; kwok's pod IPs (10.244.0.0/16) lead nowhere on "
                      "loopback, so no pod answers /health as its twin would and every pod looks hung (a pod "
                      "health endpoint on the pods' addresses, or the probe through the apiserver's pod proxy, is next)",
}


def story(events) -> list[tuple[str, str | None]]:
    return [(e.type, e.step) for e in events]


@pytest.fixture(scope="module")
def played(tmp_path_factory) -> dict[str, timeline.Played]:
    state = tmp_path_factory.mktemp("drills")
    return {name: timeline.play(name, state, AssumeYes("controlplane", rehearsal=True)) for name in SCENARIOS}


@pytest.fixture(scope="module")
def prometheus(played, tmp_path_factory) -> Iterator[SteppedPrometheus]:
    promtool, binary = need_binary("promtool"), need_binary("prometheus")
    work = tmp_path_factory.mktemp("controlplane-prometheus")
    source = work / "drills.om"
    source.write_text(timeline.openmetrics(played.values()))
    done = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(work / "data")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    server = SteppedPrometheus(binary, work / "data", work)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def oracle(plane) -> Iterator[drills.PodOracle]:
    made = drills.PodOracle(plane)
    yield made
    made.stop()


@pytest.fixture
def laid_out(plane, oracle, prometheus, tmp_path):
    made = []

    def put(played_one):
        laid = drills.lay(plane, oracle, prometheus.url, played_one, tmp_path / "laid")
        made.append(laid)
        return laid

    yield put
    for laid in made:
        drills.clear(plane, oracle, laid)


def _first_difference(events, expected) -> str:
    """What the real run said where its story left the drill's (for the failure's message)."""
    for got, want in zip(events, expected):
        if (got.type, got.step) != (want.type, want.step):
            return f"the real run: {got.type} {got.step} {got.data}\nthe drill: {want.type} {want.step} {want.data}"
    return "one story is a prefix of the other"


def _cases():
    for name in SCENARIOS:
        marks = [pytest.mark.xfail(strict=True, reason=KNOWN[name])] if name in KNOWN else []
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", list(_cases()))
def test_the_real_control_plane_journal_equals_the_drill(name, played, laid_out, tmp_path):
    drill = played[name]
    laid = laid_out(drill)
    result, events = drills.run(laid, drill, tmp_path / "state")
    assert story(events) == story(drill.events), _first_difference(events, drill.events)
    assert result.outcome == drill.result.outcome == drill.scenario.expect


def statefulset(plane, name="vllm-server", namespace="llm") -> dict:
    return plane.get("statefulset", name, namespace=namespace)


def test_oom_surge_scales_down_and_the_controller_rolls_the_last_pod_with_the_lowered_limit(
        plane, played, laid_out, tmp_path):
    drill = played["oom-surge"]
    laid = laid_out(drill)
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in objects.ready_pods(plane, "llm", {"app": "vllm-server"})}
    result, events = drills.run(laid, drill, tmp_path / "state")
    assert story(events) == story(drill.events)
    assert result.outcome == drill.result.outcome == "resolved"
    done = objects.settled(plane, "llm", "statefulset", "vllm-server", timeout=120)
    assert done["spec"]["replicas"] == 1
    args = done["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--max-model-len=6635" in args
    (pod,) = objects.ready_pods(plane, "llm", {"app": "vllm-server"})
    assert pod["metadata"]["name"] == "vllm-server-0"
    assert pod["metadata"]["uid"] != before["vllm-server-0"]  # the StatefulSet controller replaced it
    assert "--max-model-len=6635" in pod["spec"]["containers"][0]["args"]
    history = json.loads(plane.kubectl("get", "controllerrevisions", "-n", "llm", "-o", "json").stdout)["items"]
    assert len(history) == 2  # the rollout's two revisions, as `kubectl rollout history` lists them


def test_oom_surge_holds_the_real_hpa_so_it_does_not_scale_back(plane, played, laid_out, tmp_path):
    drill = played["oom-surge-hpa"]
    laid = laid_out(drill)
    (hpa_before,) = json.loads(plane.kubectl("get", "hpa", "-n", "llm", "-o", "json").stdout)["items"]
    result, events = drills.run(laid, drill, tmp_path / "state")
    assert story(events) == story(drill.events)
    assert result.outcome == drill.result.outcome
    (hpa,) = json.loads(plane.kubectl("get", "hpa", "-n", "llm", "-o", "json").stdout)["items"]
    held = drill.world.cluster.autoscalers_of.items[("llm", "hpa", hpa["metadata"]["name"])]
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (held.min_replicas, held.max_replicas)
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) != (hpa_before["spec"]["minReplicas"],
                                                                        hpa_before["spec"]["maxReplicas"])
    done = objects.settled(plane, "llm", "statefulset", "vllm-server", timeout=120)
    assert done["spec"]["replicas"] == drill.world.state.workloads[("llm", "statefulset", "vllm-server")].replicas

