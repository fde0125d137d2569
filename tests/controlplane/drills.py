"""A drill's scenario laid on the real control plane, and its bundled playbook run there.

The workloads, routes and autoscalers of the scenario are created through the API and the real
controllers make and schedule the pods; what only a kubelet knows is then reported as a kubelet
would (the containers' restarts and last terminations, readiness, their logs, moved onto wall
time). Exec into a pod reaches the stand-in tool behind the node's kubelet endpoint
(kubeletfront), which asks the scenario's simulated world what that pod prints and exits as it
would (`PodOracle`); a GET to a pod's address (kwok's are on loopback) is answered as its twin
answers it (`pod_http`). Metrics come from a real Prometheus holding the drill's timeline, read at
the scenario's virtual time by a fake clock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import http.server
import json
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from runbook.record import journal as journals
from runbook import settings
from runbook.backends import shared_state
from runbook.actions import load_builtin
from runbook.cli.connect import Connection, close_world, real_world
from runbook.clock import Clock, FakeClock, SystemClock
from runbook.config import load_config
from runbook.drill.run import bundled_playbook
from runbook.engine.operator import AssumeYes
from runbook.engine.runner import Engine, RunResult
from runbook.errors import RunbookError
from runbook.model.events import Event
from runbook.sim.scenario import Scenario
from runbook.sim.world import _log_lines, build_world, log_window
from tests.controlplane import identity
from tests.controlplane.pod_http import PodPorts
from tests.controlplane.objects import VLLM_IMAGE, settled
from tests.controlplane.plane import NAMED_PODS, ControlPlane
from tests.prometheus.conftest import free_port
from tests.realstack.cluster import autoscaler_object, route_object
from tests.realstack import timeline, wall
from tests.realstack.timeline import Played, alert_of, signal_overrides

KINDS = {"statefulset": "StatefulSet", "deployment": "Deployment", "daemonset": "DaemonSet"}
ROUTE_KINDS = {"service": "Service", "ingress": "Ingress", "httproute": "HTTPRoute"}
AUTOSCALER_KINDS = {"hpa": ("autoscaling/v2", "HorizontalPodAutoscaler"), "scaledobject": ("keda.sh/v1alpha1",
                                                                                              "ScaledObject")}
VLLM_PORT = 8000  # what the playbooks probe unless told otherwise
LOG_HISTORY = dt.timedelta(hours=1)  # of each container's log, written before the run
PACE = 0.2  # wall-time seconds each virtual sleep of a run on the plane waits at most


class PacedClock(FakeClock):
    """The scenario's virtual time, whose every sleep also gives the real controllers and kwok up to
    PACE seconds of wall time: they move on wall time, and a wait for them (a replica coming ready
    after a scale) must let them move."""

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        time.sleep(min(max(seconds, 0.0), PACE))


def waits_on_controllers(scenario: Scenario) -> bool:
    """Whether the scenario's playbook waits for the real controllers between its changes (a restore
    that brings replicas back one at a time, each ready): its run gets a PacedClock."""
    steps = bundled_playbook(scenario.playbook, load_builtin()).steps
    return any(step.uses == "k8s.restore_scale" for step in steps)


class PodOracle:
    """Answers the pods' stand-in tools and their HTTP ports from a simulated world, over loopback."""

    def __init__(self, plane: ControlPlane):
        self.world: Any = None
        self.twins: dict[tuple[str, str], str] = {}  # (namespace, real pod) -> the world's pod
        self.lock = threading.RLock()
        self.ports = PodPorts(self.lock)
        oracle = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the http.server interface
                asked = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                body = json.dumps(oracle.answer(asked["namespace"], asked["pod"], asked["argv"])).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True, name="pod-oracle").start()
        self.url_file = plane.pods_dir / "oracle.url"
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"

    def use(self, world: Any, twins: dict[tuple[str, str], str] | None = None,
            addresses: dict[str, str] | None = None) -> None:
        """Answer for `world`: `twins` are the real pods' twins, `addresses` their IPs' (real -> twin)."""
        with self.lock:
            self.world, self.twins = world, dict(twins or {})
        if world is None:
            self.ports.close()
            self.url_file.unlink(missing_ok=True)
            return
        self.url_file.write_text(self.url)
        now = world.state.now()
        ports = {VLLM_PORT} | {port for pod in world.state.pods.values() for port in pod.listening(now)}
        self.ports.open(world, addresses or {}, ports)

    def answer(self, namespace: str, pod: str, argv: list[str]) -> dict:
        with self.lock:
            world = self.world
            pod = self.twins.get((namespace, pod), pod)
            target = world.state.pods.get((namespace, pod)) if world is not None else None
            if target is None:
                return {"stdout": "", "stderr": f"{argv[0]}: no such pod in the scenario\n", "exit_code": 127}
            try:
                done = world.cluster.exec(namespace, pod, target.containers[0].name, argv, timeout=30)
            except RunbookError as exc:
                return {"stdout": "", "stderr": f"{exc}\n", "exit_code": 126}
        return {"stdout": done.stdout, "stderr": done.stderr, "exit_code": done.exit_code}

    def stop(self) -> None:
        self.use(None)
        self.server.shutdown()
        self.server.server_close()


@dataclasses.dataclass
class Laid:
    config: Path
    clock: Clock
    world: Any
    namespaces: tuple[str, ...]


def _workload_object(w) -> dict:
    kind = KINDS[w.spec.kind]
    containers = []
    for name, (command, args) in w.containers.items():
        c: dict = {"name": name, "image": VLLM_IMAGE,
                   "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}}
        if command:
            c["command"] = list(command)
        if args:
            c["args"] = list(args)
        containers.append(c)
    labels = {**w.spec.labels, **w.spec.selector}
    spec: dict = {"selector": {"matchLabels": dict(w.spec.selector)},
                  "template": {"metadata": {"labels": labels},
                               "spec": {"terminationGracePeriodSeconds": 5, "containers": containers}}}
    if kind != "DaemonSet":
        spec["replicas"] = w.replicas
    if kind == "StatefulSet":
        spec["serviceName"] = w.spec.name
    meta: dict = {"name": w.spec.name, "namespace": w.namespace, "labels": dict(w.spec.labels)}
    if w.spec.annotations:
        meta["annotations"] = dict(w.spec.annotations)
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": spec}


def _extra_pods(world: Any) -> dict[tuple[str, str], list[Any]]:
    """The scenario's pods of no workload it models (an API gateway's, say), by (namespace, owner)."""
    found: dict[tuple[str, str], list[Any]] = {}
    for pod in world.state.pods.values():
        if pod.workload is None and pod.owner:
            found.setdefault((pod.namespace, pod.owner), []).append(pod)
    return found


def _owners_of_extra_pods(world: Any) -> list[dict]:
    """Their owners made real: a Deployment of as many pods, with their labels and containers."""
    docs = []
    for (namespace, owner), pods in sorted(_extra_pods(world).items()):
        kind, _, name = owner.partition("/")
        labels = dict(pods[0].labels)
        containers = [{"name": c.name, "image": "registry.example/gateway:2"} for c in pods[0].containers]
        docs.append({"apiVersion": "apps/v1", "kind": KINDS[kind], "metadata": {"name": name, "namespace": namespace},
                     "spec": {"replicas": len(pods), "selector": {"matchLabels": labels},
                              "template": {"metadata": {"labels": labels},
                                           "spec": {"terminationGracePeriodSeconds": 5, "containers": containers}}}})
    return docs


def _wall(virtual: dt.datetime, shift: dt.timedelta) -> str:
    return (virtual + shift).astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def twins(plane: ControlPlane, world: Any) -> dict[tuple[str, str], str]:
    """(namespace, real pod) -> the world's pod of the same workload, in name order: a StatefulSet's
    pods have the same names, a Deployment's are named by its ReplicaSet at random. The real pods
    the controllers named are made known to kwok (their exec and logs)."""
    found: dict[tuple[str, str], str] = {}
    unnamed: dict[str, list[str]] = {}
    groups = [(namespace, dict(w.spec.selector), sorted(p.name for p in world.state.pods.values()
                                                          if p.namespace == namespace and p.workload is w))
              for (namespace, _, _), w in sorted(world.state.workloads.items())]
    groups += [(namespace, dict(pods[0].labels), sorted(p.name for p in pods))
               for (namespace, _), pods in sorted(_extra_pods(world).items())]
    for namespace, labels, simulated in groups:
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        real = sorted(plane.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o",
                                    "jsonpath={.items[*].metadata.name}").stdout.split())
        assert len(real) == len(simulated), f"{selector}: {real} against the scenario's {simulated}"
        for name, twin in zip(real, simulated):
            found[(namespace, name)] = twin
            if name not in NAMED_PODS:
                unnamed.setdefault(namespace, []).append(name)
    for namespace, names in unnamed.items():
        plane.name_pods(namespace, names)
    return found


def addresses(plane: ControlPlane, world: Any, pairs: dict[tuple[str, str], str]) -> dict[str, str]:
    """The real pods' IPs (kwok's, on loopback) -> their twins' IPs in the world."""
    found = {}
    for (namespace, real), twin in sorted(pairs.items()):
        ip = (plane.get("pod", real, namespace=namespace) or {}).get("status", {}).get("podIP")
        assert ip, f"the pod {namespace}/{real} has no IP from kwok"
        found[ip] = world.state.pods[(namespace, twin)].ip
    return found


def report_as_kubelet(plane: ControlPlane, world: Any, namespaces: tuple[str, ...],
                      pairs: dict[tuple[str, str], str]) -> None:
    """The world's pods' restarts, last terminations and readiness written to their real twins'
    status, and their containers' logs (current and previous) to kwok's log files on wall time."""
    state = world.state
    real_of = {(ns, twin): real for (ns, real), twin in pairs.items()}
    now = state.now()
    shift = dt.datetime.now(dt.timezone.utc) - now
    for (namespace, simulated), pod in sorted(state.pods.items()):
        if namespace not in namespaces:
            continue
        name = real_of.get((namespace, simulated), simulated)
        real = plane.get("pod", name, namespace=namespace)
        if real is None:
            raise AssertionError(f"the scenario's pod {namespace}/{name} has no real twin: the controller named "
                                 "its pods otherwise")
        seen = pod.to_pod(now)
        statuses = real["status"]["containerStatuses"]
        for status, c, view in zip(statuses, pod.containers, seen.containers):
            status["restartCount"] = c.restart_count
            status["ready"] = view.ready
            if c.last_termination:
                reason, at, code = c.last_termination
                status["lastState"] = {"terminated": {"reason": reason, "exitCode": code,
                                                      "finishedAt": _wall(at, shift)[:19] + "Z"}}
        conditions = real["status"]["conditions"]
        for condition in conditions:
            if condition["type"] in ("Ready", "ContainersReady"):
                condition["status"] = "True" if seen.ready else "False"
        plane.kubectl("patch", "pod", name, "-n", namespace, "--subresource=status", "--type=merge", "-p",
                      json.dumps({"status": {"containerStatuses": statuses, "conditions": conditions}}))
        c = pod.containers[0]
        for previous in (False, True):
            window = log_window(c, now, int(LOG_HISTORY.total_seconds()), previous=previous)
            if window is None:
                continue
            lines = _log_lines(state, pod, c.name, *window, timestamps=True)
            stamped = []
            for line in lines:
                stamp, _, text = line.partition(" ")
                at = dt.datetime.strptime(stamp[:26] + "Z", "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc)
                stamped.append((_wall(at, shift), text))
            plane.write_log(namespace, stamped, pod=name, previous=previous)


def lay(plane: ControlPlane, oracle: PodOracle, prometheus_url: str, played: Played, directory: Path, *,
        clock: Clock | None = None, scenario: Scenario | None = None) -> Laid:
    """`scenario` (default: the drill's) laid on the plane, its world on `clock` (default: virtual
    time from the scenario's start, which the run's Prometheus reads are made at)."""
    scenario = scenario or played.scenario
    clock = clock or (PacedClock if waits_on_controllers(scenario) else FakeClock)(scenario.t0)
    world = build_world(scenario, clock)
    state = world.state
    namespaces = tuple(sorted({w.namespace for w in state.workloads.values()} | {p.namespace for p in state.pods.values()}))
    for namespace in namespaces:
        plane.make_namespace(namespace)
    docs = [_workload_object(w) for w in state.workloads.values()] + _owners_of_extra_pods(world)
    for route in world.cluster.routes.routes.values():
        doc = route_object(route)
        doc["metadata"]["namespace"] = route.namespace
        api = {"service": "v1", "ingress": "networking.k8s.io/v1", "httproute": "gateway.networking.k8s.io/v1"}
        docs.append({"apiVersion": api[route.kind], "kind": ROUTE_KINDS[route.kind], **doc})
    for scaler in world.cluster.autoscalers_of.items.values():
        doc = autoscaler_object(scaler)
        doc["metadata"]["namespace"] = scaler.namespace
        api, kind = AUTOSCALER_KINDS[scaler.kind]
        docs.append({"apiVersion": api, "kind": kind, **doc})
    plane.apply(*docs)
    for w in state.workloads.values():
        settled(plane, w.namespace, w.spec.kind, w.spec.name, timeout=120)
    for namespace, owner in _extra_pods(world):
        settled(plane, namespace, *owner.split("/"), timeout=120)
    pairs = twins(plane, world)
    report_as_kubelet(plane, world, namespaces, pairs)
    oracle.use(world, pairs, addresses(plane, world, pairs))
    directory.mkdir(parents=True, exist_ok=True)
    kubeconfig = identity.runbook_kubeconfig(plane, namespaces[0], directory / "kubeconfig")
    config = {
        # A loopback port nothing listens on, where the scenario's Prometheus is down.
        "prometheus": {"url": f"http://127.0.0.1:{free_port()}" if scenario.metrics.unreachable else prometheus_url,
                       "timeout": 10},
        "signals": {"overrides": signal_overrides(scenario)},
        "kubernetes": {"kubeconfig": str(kubeconfig), "context": "runbook-test", "request_timeout": 10,
                       "connect_timeout": 5, "retries": 1},
    }
    path = directory / "runbook.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return Laid(path, clock, world, namespaces)


def clear(plane: ControlPlane, oracle: PodOracle, laid: Laid) -> None:
    oracle.use(None)
    for namespace in laid.namespaces:
        plane.kubectl("delete", "namespace", namespace, "--wait=true", timeout=180)


def run(laid: Laid, played: Played, state: Path, *, dry_run: bool = False) -> tuple[RunResult, list[Event]]:
    """The engine as `runbook run --config` builds it (the real backends), on the scenario's clock,
    with the drill's --yes (and `runbook run --dry-run`'s flag when `dry_run`)."""
    registry = load_builtin()
    playbook = bundled_playbook(played.scenario.playbook, registry)
    world = real_world(load_config(laid.config), Connection())
    incident = journals.new_incident_id(laid.clock.now(), playbook.name)
    journal = journals.JsonlJournal.for_incident(state, incident, journals.new_run_id())
    operator = AssumeYes("controlplane", rehearsal=True)
    engine = Engine(registry=registry, world=world, clock=laid.clock, journal=journal, operator=operator,
                    locks=shared_state.target_locks(world, state), history=journals.History(state),
                    kill_switch=lambda: settings.kill_switch(state), holder=f"runbook run by {operator.by}",
                    dry_run=dry_run)
    try:
        result = engine.run(playbook, alert=alert_of(played.scenario), params=played.scenario.params)
    finally:
        journal.close()
        close_world(world)
    return result, journals.read_journal(journal.path).events


@contextlib.contextmanager
def on_wall_time(plane: ControlPlane, oracle: PodOracle, name: str, work: Path, *, fix_lands_after: float):
    """The drill `name` played, then laid on the plane from the wall clock's now, with a Prometheus
    holding its OOM failures on wall time (they stop `fix_lands_after` seconds from now): yields
    (the drill, what was laid, its config with that Prometheus in it, written back); stopped and
    cleared at the end."""
    drill = timeline.play(name, work / "drill", AssumeYes("controlplane", rehearsal=True))
    laid = lay(plane, oracle, "http://127.0.0.1:9/", drill, work / "laid", clock=SystemClock(),
               scenario=drill.scenario.model_copy(update={"start": dt.datetime.now(dt.timezone.utc)}))
    (work / "prometheus").mkdir()
    server, _ = wall.prometheus_on_wall_time(drill, "oom_failures_per_min", work / "prometheus",
                                             fix_lands_after=fix_lands_after)
    try:
        config = yaml.safe_load(laid.config.read_text(encoding="utf-8"))
        config["prometheus"]["url"] = server.url
        laid.config.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        yield drill, laid, config
    finally:
        server.stop()
        clear(plane, oracle, laid)
