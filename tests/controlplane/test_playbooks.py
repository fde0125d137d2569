"""Bundled Kubernetes playbooks run on the real control plane: the drill's scenario laid through the
API, the real controllers making and moving the pods, a real Prometheus holding the drill's
timeline. The journal must tell the drill's story (the same events of the same steps, in order,
and the same outcome), and the cluster must be left as a real one would be.
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from runbook.actions import load_builtin
from runbook.backends.kubernetes.leases import LeaseLocks
from runbook.drill.record import record_file
from runbook.drill.run import bundled_playbook, run_drill
from runbook.record import journal as journals
from runbook.engine.operator import AssumeYes
from runbook.sim.scenario import load_scenario, scenario_names
from tests.controlplane import drills, identity, objects
from tests.prometheus.conftest import need_binary
from tests.realstack import timeline
from tests.realstack.stepped import SteppedPrometheus

SCENARIOS = ("oom-surge", "oom-surge-hpa", "oom-surge-at-floor", "oom-surge-metrics-down",
             "oom-surge-capacity-returns-ooms", "waiting-queue", "waiting-queue-all-unready", "zombie-process",
             "latency-creep", "latency-creep-water-line", "prompt-truncation", "disconnect-storm", "canary-rollback",
             "canary-rollback-stable-unready")
# Divergences from the drill still open on the real control plane (scenario -> why).
KNOWN: dict[str, str] = {}


RUNBOOK = "system:serviceaccount:llm:runbook"  # the service account of deploy/rbac.yaml, as audited
WRITES = ("create", "update", "patch", "delete")


def story(events) -> list[tuple[str, str | None]]:
    return [(e.type, e.step) for e in events]


def _resource(event: dict) -> str:
    ref = event["objectRef"]
    return f"{ref['resource']}/{ref['subresource']}" if ref.get("subresource") else ref["resource"]


def by_runbook(plane, since: int) -> list[dict]:
    """The audit log's events in llm since the `since`-th, of requests runbook made."""
    return [e for e in plane.audit("llm")[since:] if e["user"]["username"] == RUNBOOK]


def writes(plane, since: int, *, dry: bool | None = None, attempted: bool = False
           ) -> list[tuple[str, str, str | None, bool]]:
    """runbook's writes the apiserver accepted since `since`: (verb, resource, name, a server dry run?), in
    order. A patch answered 409 because a controller wrote the status since runbook's read is sent again at
    the new version (backends/kubernetes/cluster.py): only what was accepted is the change. `attempted`:
    every write sent, whatever its answer (for "nothing was even tried")."""
    found = [(e["verb"], _resource(e), e["objectRef"].get("name"), "dryRun=All" in e["requestURI"])
             for e in by_runbook(plane, since) if e["verb"] in WRITES and _resource(e) != "pods/exec"
             and (attempted or e["responseStatus"]["code"] < 300)]
    return [w for w in found if dry is None or w[3] == dry]


def execs(plane, since: int) -> list[tuple[str, str]]:
    """(pod, what the command is) of each exec runbook opened since `since`: its first word, or `kill` for
    runbook's identity-checked kill (`sh -c SCRIPT runbook-kill SIGNAL pid …`)."""
    found = []
    for e in by_runbook(plane, since):
        # An exec over a websocket is a GET (the apiserver then checks `create` as well): either is one.
        if _resource(e) == "pods/exec" and e["verb"] in ("get", "create") and e["responseStatus"]["code"] < 400:
            command = urllib.parse.parse_qs(urllib.parse.urlsplit(e["requestURI"]).query)["command"]
            kill = command[:2] == ["sh", "-c"] and "runbook-kill" in command
            found.append((e["objectRef"]["name"], "kill" if kill else command[0]))
    return found


def log_reads(plane, since: int) -> list[tuple[str, int, bool]]:
    """(pod, answer's code, previous container's?) of each log runbook read since `since`."""
    return [(e["objectRef"]["name"], e["responseStatus"]["code"], "previous=true" in e["requestURI"])
            for e in by_runbook(plane, since) if _resource(e) == "pods/log" and e["verb"] == "get"]


def made_by_controller(plane, since: int, pod: str) -> int:
    """How many times a controller (not runbook) created `pod` since `since`: each a new container."""
    return len([e for e in plane.audit("llm")[since:] if e["verb"] == "create" and _resource(e) == "pods"
                and e["objectRef"].get("name") == pod and e["user"]["username"] != RUNBOOK
                and e["responseStatus"]["code"] == 201])


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


@pytest.fixture
def replay(plane, played, laid_out, tmp_path):
    """Runs a drill's playbook on the plane: (the drill, the run's result, its events, where the
    audit log of `llm` stood before it)."""
    def go(name: str):
        drill = played[name]
        laid = laid_out(drill)
        since = len(plane.audit("llm"))
        result, events = drills.run(laid, drill, tmp_path / "state")
        return drill, result, events, since
    return go


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


@pytest.mark.parametrize("name", ["oom-surge", "zombie-process"])
def test_an_incident_on_the_real_plane_recorded_as_a_drill_replays_as_it_ran(name, played, laid_out, tmp_path):
    """Issue 31, item 2: the journal of a run on the real apiserver and a real Prometheus, recorded by
    `runbook drill --from`, replays on the simulated world with the same story and outcome."""
    drill = played[name]
    result, events = drills.run(laid_out(drill), drill, tmp_path / "state")
    [journal] = list(journals.journal_paths(tmp_path / "state"))
    written, scenario = record_file(journal, tmp_path / "recorded.yaml")
    assert scenario.recorded.incident == result.incident and scenario.expect == result.outcome
    replayed = run_drill(str(written), state=tmp_path / "replays", operator=AssumeYes("replay", rehearsal=True))
    assert replayed.run.outcome == result.outcome == drill.scenario.expect
    assert story(journals.read_journal(replayed.journal).events) == story(events)


def statefulset(plane, name="vllm-server", namespace="llm") -> dict:
    return plane.get("statefulset", name, namespace=namespace)


def test_oom_surge_scales_down_and_the_controller_rolls_the_last_pod_with_the_lowered_limit(
        plane, played, laid_out, tmp_path):
    drill = played["oom-surge"]
    laid = laid_out(drill)
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in objects.ready_pods(plane, "llm", {"app": "vllm-server"})}
    since = len(plane.audit("llm"))
    result, events = drills.run(laid, drill, tmp_path / "state")
    assert story(events) == story(drill.events)
    assert result.outcome == drill.result.outcome == "resolved"
    done = objects.settled(plane, "llm", "statefulset", "vllm-server", timeout=120)
    # Each change went to the apiserver as a dry run first, then for real; no pod deleted, none killed.
    changes = [w for w in writes(plane, since) if w[1] not in ("leases", "configmaps")]
    assert changes == [("patch", "statefulsets/scale", "vllm-server", True),
                       ("patch", "statefulsets/scale", "vllm-server", False),
                       ("patch", "statefulsets", "vllm-server", True), ("patch", "statefulsets", "vllm-server", False),
                       # the restore: its first step as a dry run, then a replica at a time (issue 34)
                       ("patch", "statefulsets/scale", "vllm-server", True),
                       ("patch", "statefulsets/scale", "vllm-server", False),
                       ("patch", "statefulsets/scale", "vllm-server", False)]
    assert [pod for pod, command in execs(plane, since) if command == "kill"] == []
    # The rollout of the lowered value is the one restart (issue 16, item 9): one new vllm-server-0.
    assert made_by_controller(plane, since, "vllm-server-0") == 1
    # The capacity came back: three replicas again, each made by the controller with the lowered limit.
    assert done["spec"]["replicas"] == 3
    args = done["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--max-model-len=6635" in args
    pods = {p["metadata"]["name"]: p for p in objects.ready_pods(plane, "llm", {"app": "vllm-server"})}
    assert sorted(pods) == ["vllm-server-0", "vllm-server-1", "vllm-server-2"]
    assert all(p["metadata"]["uid"] != before[name] for name, p in pods.items())  # none of them the old pods
    assert all("--max-model-len=6635" in p["spec"]["containers"][0]["args"] for p in pods.values())
    history = json.loads(plane.kubectl("get", "controllerrevisions", "-n", "llm", "-o", "json").stdout)["items"]
    assert len(history) == 2  # the rollout's two revisions, as `kubectl rollout history` lists them


def test_at_the_floor_the_kill_is_the_one_restart_and_nothing_is_rolled_out(plane, replay):
    # --max-model-len already at its floor: the server process is killed (the one restart), no argv patch.
    drill, result, events, since = replay("oom-surge-at-floor")
    assert story(events) == story(drill.events)
    assert result.outcome == "resolved", result.reason
    assert [e.step for e in events if e.type == "action.applied"] == ["scale-down", "kill-server", "restore-capacity"]
    changes = [w for w in writes(plane, since) if w[1] not in ("leases", "configmaps")]
    assert changes == [("patch", "statefulsets/scale", "vllm-server", True),
                       ("patch", "statefulsets/scale", "vllm-server", False),  # no statefulsets patch: no rollout
                       # the restore: its first step as a dry run, then a replica at a time (issue 34)
                       ("patch", "statefulsets/scale", "vllm-server", True),
                       ("patch", "statefulsets/scale", "vllm-server", False),
                       ("patch", "statefulsets/scale", "vllm-server", False)]
    assert [pod for pod, command in execs(plane, since) if command == "kill"] == ["vllm-server-0"]
    assert made_by_controller(plane, since, "vllm-server-0") == 0  # the pod stays; its process restarts


def test_oom_surge_holds_the_real_hpa_so_it_does_not_scale_back(plane, played, laid_out, tmp_path):
    drill = played["oom-surge-hpa"]
    laid = laid_out(drill)
    (hpa_before,) = json.loads(plane.kubectl("get", "hpa", "-n", "llm", "-o", "json").stdout)["items"]
    since = len(plane.audit("llm"))
    result, events = drills.run(laid, drill, tmp_path / "state")
    assert story(events) == story(drill.events)
    assert result.outcome == drill.result.outcome
    # Held first, then scaled: the HPA's controller never scales it back (it writes no scale at all).
    real = [w[:3] for w in writes(plane, since, dry=False) if w[1] in ("horizontalpodautoscalers", "statefulsets/scale")]
    hold, scale = ("patch", "horizontalpodautoscalers", "vllm-server"), ("patch", "statefulsets/scale", "vllm-server")
    # Held, then scaled; on the way back the hold moves before each replica, and at 3 it is given back.
    assert real == [hold, scale, hold, scale, hold, scale, hold]
    scaled_back = [e for e in plane.audit("llm")[since:] if _resource(e) in ("statefulsets/scale", "statefulsets")
                   and e["verb"] in WRITES and e["user"]["username"] != RUNBOOK]
    assert scaled_back == []
    applied = next(e for e in events if e.type == "action.applied" and e.step == "scale-down")
    assert applied.data["before"]["hpa/vllm-server"] == \
        f"minReplicas={hpa_before['spec']['minReplicas']} maxReplicas={hpa_before['spec']['maxReplicas']}"
    assert applied.data["after"]["hpa/vllm-server"] == "minReplicas=1 maxReplicas=1"
    (hpa,) = json.loads(plane.kubectl("get", "hpa", "-n", "llm", "-o", "json").stdout)["items"]
    given_back = drill.world.cluster.autoscalers_of.items[("llm", "hpa", hpa["metadata"]["name"])]
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (given_back.min_replicas, given_back.max_replicas)
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (hpa_before["spec"]["minReplicas"],
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


def test_waiting_queue_replaces_the_unready_pod_after_a_dry_run_under_its_lease(plane, played, laid_out, tmp_path):
    drill = played["waiting-queue"]
    laid = laid_out(drill)
    expected = {s.id: s.result for s in drill.result.steps}
    (unready,) = expected["pods"]["not_ready"]
    before = {p["metadata"]["name"]: p["metadata"]["uid"]
              for p in json.loads(plane.kubectl("get", "pods", "-n", "llm", "-l", "app=vllm-server", "-o",
                                                "json").stdout)["items"]}
    since = len(plane.audit("llm"))
    result, events = drills.run(laid, drill, tmp_path / "state")
    assert result.outcome == drill.result.outcome == "resolved"
    steps = {s.id: s.result for s in result.steps}
    assert steps["pods"]["not_ready"] == [unready]
    assert steps["gateway-503"]["count"] == expected["gateway-503"]["count"] > 0  # the 503s read from the gateway's logs
    objects.settled(plane, "llm", "statefulset", "vllm-server", timeout=120)
    after = {p["metadata"]["name"]: p["metadata"]["uid"]
             for p in json.loads(plane.kubectl("get", "pods", "-n", "llm", "-l", "app=vllm-server", "-o",
                                               "json").stdout)["items"]}
    assert {n for n in before if after.get(n) != before[n]} == {unready}  # recreated by the StatefulSet
    done = writes(plane, since)
    assert [w for w in done if w[1] == "pods"] == [("delete", "pods", unready, True), ("delete", "pods", unready, False)]
    assert [w[0] for w in done if w[1] == "leases"] == ["create", "delete"]
    assert json.loads(plane.kubectl("get", "leases", "-n", "llm", "-o", "json").stdout)["items"] == []


def test_a_lease_held_elsewhere_refuses_the_remediation(plane, played, laid_out, tmp_path):
    drill = played["waiting-queue"]
    laid = laid_out(drill)
    kubeconfig = Path(yaml.safe_load(laid.config.read_text())["kubernetes"]["kubeconfig"])
    cluster = identity.connect(kubeconfig)
    since = len(plane.audit("llm"))
    try:
        with LeaseLocks(cluster).hold("llm/statefulset/vllm-server", holder="bob incident inc-9"):
            result, events = drills.run(laid, drill, tmp_path / "state")
    finally:
        cluster.close()
    refusals = [e.data for e in events if e.type == "guard.refused"]
    assert refusals and refusals[0]["guard"] == "lock" and "bob incident inc-9" in refusals[0]["reason"]
    assert [w for w in writes(plane, since, dry=False, attempted=True) if w[1] == "pods"] == []  # nothing deleted


def test_a_dry_run_of_a_playbook_changes_nothing_in_the_cluster(plane, played, laid_out, tmp_path):
    drill = played["oom-surge"]
    laid = laid_out(drill)
    sts_before = statefulset(plane)
    pods_before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in objects.ready_pods(plane, "llm", {"app": "vllm-server"})}
    since = len(plane.audit("llm"))
    result, _ = drills.run(laid, drill, tmp_path / "state", dry_run=True)
    assert result.outcome == "dry_run", result.reason
    assert statefulset(plane)["metadata"]["resourceVersion"] == sts_before["metadata"]["resourceVersion"]
    assert {p["metadata"]["name"]: p["metadata"]["uid"]
            for p in objects.ready_pods(plane, "llm", {"app": "vllm-server"})} == pods_before
    done = writes(plane, since)
    assert done and all(dry for *_, dry in done), done  # every write a server dry run
    assert [pod for pod, command in execs(plane, since) if command == "kill"] == []


def test_disconnect_storm_reads_two_logs_and_writes_nothing_to_the_cluster(plane, replay):
    _, result, events, since = replay("disconnect-storm")
    assert result.outcome == "resolved"
    assert sorted(log_reads(plane, since)) == [("vllm-server-0", 200, False), ("vllm-server-1", 200, False)]
    assert writes(plane, since, attempted=True) == []
    advice = next(e for e in events if e.step == "client-timeout-advice" and e.type == "step.finished")
    assert advice.data["status"] == "ok"


def test_prompt_truncation_asks_no_previous_log_of_unrestarted_pods_and_changes_only_the_flag(plane, replay):
    drill, result, _, since = replay("prompt-truncation")
    assert result.outcome == drill.scenario.expect == "resolved"
    # Neither pod restarted (restart count 0, no last state): the previous logs the kubelet would
    # refuse are not asked for.
    assert sorted(log_reads(plane, since)) == [("vllm-server-0", 200, False), ("vllm-server-1", 200, False)]
    assert {w[:3] for w in writes(plane, since, dry=False) if w[1] not in ("leases", "configmaps")} == \
        {("patch", "statefulsets", "vllm-server")}


def test_canary_rollback_ends_on_stable_with_the_route_moved_before_the_canary(plane, replay):
    _, result, _, since = replay("canary-rollback")
    assert result.outcome == "resolved"
    assert plane.get("service", "vllm", namespace="llm")["spec"]["selector"] == {"app": "vllm", "version": "v1"}
    assert plane.get("deployment", "vllm-v2", namespace="llm")["spec"]["replicas"] == 0
    assert plane.get("deployment", "vllm-v1", namespace="llm")["spec"]["replicas"] == 3
    patches = [(w[1], w[2]) for w in writes(plane, since) if w[0] == "patch"]
    route, scale = ("services", "vllm"), ("deployments/scale", "vllm-v2")
    # The route moves first (a server dry run, then the change); the canary goes only after it.
    assert set(patches) == {route, scale}
    assert max(i for i, p in enumerate(patches) if p == route) < min(i for i, p in enumerate(patches) if p == scale)


def test_with_no_stable_pod_ready_the_route_is_never_written(plane, replay):
    _, result, _, since = replay("canary-rollback-stable-unready")
    assert result.outcome == "refused"
    assert plane.get("service", "vllm", namespace="llm")["spec"]["selector"] == {"app": "vllm"}
    assert [w for w in writes(plane, since, attempted=True) if w[0] == "patch"] == []  # not even a dry run
