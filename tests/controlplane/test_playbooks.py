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

from runbook.actions import load_builtin
from runbook.drill.run import bundled_playbook
from runbook.engine.operator import AssumeYes
from runbook.sim.scenario import load_scenario, scenario_names
from tests.controlplane import drills, objects
from tests.prometheus.conftest import need_binary
from tests.realstack import timeline
from tests.realstack.stepped import SteppedPrometheus

SCENARIOS = ("oom-surge", "oom-surge-hpa", "oom-surge-at-floor", "oom-surge-metrics-down", "waiting-queue",
             "waiting-queue-all-unready",
             "zombie-process", "latency-creep", "latency-creep-water-line", "prompt-truncation", "disconnect-storm",
             "canary-rollback", "canary-rollback-stable-unready")
# Divergences from the drill still open on the real control plane (scenario -> why).
KNOWN: dict[str, str] = {}


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



def test_zombie_process_probes_each_pod_on_its_address_and_deletes_only_the_hung_one(plane, played, laid_out,
                                                                                     tmp_path):
    drill = played["zombie-process"]
    laid = laid_out(drill)
    before = {p["metadata"]["name"]: p for p in objects.ready_pods(plane, "llm", {"app": "vllm-server"})}
    result, events = drills.run(laid, drill, tmp_path / "state")
    assert result.outcome == drill.result.outcome == "resolved"
    (probe,) = [e for e in events if e.type == "evidence" and e.step == "health" and e.data["kind"] == "probe"]
    answers = probe.data["answers"]
    for name, pod in before.items():  # GET http://<the pod's own IP>:8000/health, as from inside the cluster
        assert answers[name]["url"] == f"http://{pod['status']['podIP']}:8000/health"
    assert {n: a.get("status") for n, a in answers.items() if a["ok"]} == {"vllm-server-0": 200, "vllm-server-2": 200}
    assert "timed out" in answers["vllm-server-1"]["error"]  # the hung API server held the connection unanswered
    (expected,) = [e for e in drill.events if e.type == "evidence" and e.step == "health" and e.data["kind"] == "probe"]
    assert {n: a["ok"] for n, a in answers.items()} == {n: a["ok"] for n, a in expected.data["answers"].items()}
    after = {p["metadata"]["name"]: p["metadata"]["uid"]
             for p in objects.ready_pods(plane, "llm", {"app": "vllm-server"})}
    assert {n for n in before if after.get(n) != before[n]["metadata"]["uid"]} == {"vllm-server-1"}


def test_every_bundled_kubernetes_scenario_is_laid_on_the_real_plane():
    """A bundled scenario whose playbook acts on Kubernetes (and not over SSH or on Compose) is here."""
    registry = load_builtin()
    kubernetes = set()
    for name in scenario_names():
        uses = {step.uses for step in bundled_playbook(load_scenario(name).playbook, registry).steps}
        if any(u.startswith("k8s.") for u in uses) and not any(u.startswith(("node.", "compose.")) for u in uses):
            kubernetes.add(name)
    assert kubernetes == set(SCENARIOS)
