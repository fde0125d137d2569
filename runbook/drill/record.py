"""Recording an incident as a drill: its journal's readings, the diagnostics' answers and the workload as
it was, turned into a scenario that `runbook drill` replays (and that a changed playbook can be run on).

What the journal holds is replayed as it was read: each signal's readings (the charts' per-pod series
first, an aggregate only where nothing finer was read), each command's output, each pod's probe answer,
the log lines its steps counted (at the minutes they were counted, with the excerpts' text). What came
after a change is the change's reaction: it follows only when a replay makes the same change. What the
journal does not hold is listed in the scenario's `recorded:` (missing, or assumed and how), never made up.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pathlib import Path

from runbook.errors import InvalidInput, RunbookError
from runbook.model import events as ev
from runbook.record import redaction
from runbook.model.events import Event

RECORDED_PREFIX = "recorded-"
DEFAULT_RESTART_SECONDS = 45.0  # the sim's default: how long a (re)started container takes to be ready
ALERT_SOURCES = ("alertmanager", "pagerduty")


@dataclasses.dataclass(frozen=True)
class Observation:
    """One reading of a signal: its full labels, when it was read, in which event (its order), the value."""

    labels: tuple[tuple[str, str], ...]
    at: dt.datetime
    seq: int
    value: float | None


@dataclasses.dataclass(frozen=True)
class Change:
    """An applied change, as a scenario trigger: what a replay must do for what followed to follow."""

    at: dt.datetime
    seq: int
    step: str
    trigger: dict[str, Any]


def _time(value: Any) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.timezone.utc)
    return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")).astimezone(dt.timezone.utc)


def _offset(at: dt.datetime, t0: dt.datetime) -> float:
    return round((at - t0).total_seconds(), 3)


def scenario_name(incident: str) -> str:
    return RECORDED_PREFIX + (re.sub(r"[^a-z0-9-]+", "-", incident.lower()).strip("-") or "incident")


class _Recorder:
    def __init__(self, events: Sequence[Event], incident: str, catalog: Any):
        self.events = events
        self.incident = incident
        self.catalog = catalog
        self.missing: list[str] = []
        self.assumed: list[str] = []
        started = [e for e in events if e.type == ev.RUN_STARTED]
        if not started:
            raise InvalidInput(f"incident {incident}: its journal holds no run (no run.started event) to record")
        self.start = started[0]
        self.run = self.start.run
        self.ran = [e for e in events if e.run == self.run]
        if len(started) > 1:
            self.missing.append(f"the later runs of the incident ({len(started) - 1}): only the first run, "
                                f"{self.run}, is recorded")
        self.t0 = _time(self.start.at)
        self.params: dict[str, Any] = dict(self.start.data.get("params") or {})
        self.namespace = self.params.get("namespace") if isinstance(self.params.get("namespace"), str) else None
        self.extra: dict[str, dict] = {}  # pods of no workload, by name (a gateway's)

    # -- the alert and the run ------------------------------------------------------------------

    def alert(self) -> dict[str, Any]:
        received = next((e for e in self.events if e.type == ev.ALERT_RECEIVED), None)
        if received is None:
            self.missing.append("the alert: the run was started by hand (the drill starts it with one named "
                                "after the playbook)")
            return {"source": "alertmanager", "name": self.start.data.get("playbook", "manual"), "labels": {},
                    "annotations": {}}
        data = received.data
        source = data.get("source")
        if source not in ALERT_SOURCES:
            self.assumed.append(f"the alert came from {source!r}; replayed as an Alertmanager alert")
            source = "alertmanager"
        return {"source": source, "name": str(data.get("name") or "recorded"),
                "labels": {str(k): str(v) for k, v in (data.get("labels") or {}).items()},
                "annotations": {str(k): str(v) for k, v in (data.get("annotations") or {}).items()}}

    def expect(self) -> str:
        finished = next((e for e in self.ran if e.type == ev.RUN_FINISHED), None)
        if finished is None:
            self.missing.append("the run's end (no run.finished): the journal was cut; `expect` says resolved")
            return "resolved"
        return str(finished.data.get("outcome", "resolved"))

    # -- the changes ----------------------------------------------------------------------------

    def changes(self) -> list[Change]:
        out: list[Change] = []
        for e in self.ran:
            if e.type != ev.ACTION_APPLIED:
                continue
            trigger = self._trigger(e)
            if trigger is None:
                continue
            for one in trigger:
                out.append(Change(_time(e.at), e.seq, e.step or "", one))
        return out

    def _trigger(self, e: Event) -> list[dict[str, Any]] | None:
        data = e.data
        action = data.get("action")
        target = str(data.get("target", ""))
        workload = "/".join(target.split("/")[1:]) if target.count("/") == 2 else None
        before, after = data.get("before") or {}, data.get("after") or {}
        if action in ("k8s.scale", "k8s.restore_scale") and workload and "replicas" in after:
            old, new = int(before.get("replicas", 0)), int(after["replicas"])
            if action == "k8s.restore_scale":  # one replica at a time: what followed began with the first
                return [{"scaled": {"workload": workload, "replicas_at_least": min(old + 1, new)}}]
            bound = "replicas_at_most" if new < old else "replicas_at_least"
            return [{"scaled": {"workload": workload, bound: new}}]
        if action in ("k8s.set_arg", "k8s.set_env_arg") and workload and after:
            flag, value = next(iter(after.items()))
            found = re.search(r" of [a-z]+/[^/ ]+/([^ ]+) ", str(data.get("summary", "")))
            container = found.group(1) if found else self.params.get("container")
            changed: dict[str, Any] = {"workload": workload, "flag": flag}
            if isinstance(container, str):
                changed["container"] = container
            try:
                old_number, new_number = float(before.get(flag)), float(value)
                changed["at_most" if new_number < old_number else "at_least"] = new_number
            except (TypeError, ValueError):
                changed["equals"] = str(value)
            return [{"arg_changed": changed}]
        if action == "k8s.delete_pod":
            pods = (before.get("pods") or []) if isinstance(before, Mapping) else []
            return [{"pod_deleted": {"pod": str(p)}} for p in pods] or None
        if action == "k8s.kill_process":
            pattern = re.search(r"matching `(.+)` in ", str(data.get("summary", "")))
            pods = (after.get("pods") or []) if isinstance(after, Mapping) else []
            self.missing.append(f"the command lines of the processes step {e.step} signalled: only their names "
                                f"are journaled, so a replay finds none matching its pattern")
            if pattern is None:
                return None
            return [{"process_killed": {"pod": str(pod), "pattern": pattern.group(1)}} for pod in pods] or None
        if action == "node.kill_pids" and target.startswith("node/"):
            node = target.split("/", 1)[1]
            return [{"node_pid_killed": {"node": node, "pid": int(p["pid"])}}
                    for p in (before.get("processes") or []) if isinstance(p, Mapping) and "pid" in p] or None
        self.missing.append(f"what followed step {e.step}'s {action}: a replay has no trigger for it, so it "
                            f"follows the change before it")
        return None

    # -- the signals ----------------------------------------------------------------------------

    def observations(self) -> dict[str, list[Observation]]:
        out: dict[str, list[Observation]] = {}

        def add(signal: str, labels: Mapping[str, Any], at: dt.datetime, seq: int, value: Any) -> None:
            number = None if value is None else float(value)
            key = tuple(sorted((str(k), str(v)) for k, v in labels.items()))
            out.setdefault(signal, []).append(Observation(key, at, seq, number))

        for e in self.ran:
            data = e.data
            if e.type != ev.EVIDENCE or not self._known(data.get("signal")):
                continue
            signal, base = data["signal"], dict(data.get("labels") or {})
            kind = data.get("kind")
            if kind == "samples" and "samples" in data:
                at = _time(data.get("at") or e.at)
                for sample in data["samples"]:
                    add(signal, {**base, **(sample.get("labels") or {})}, at, e.seq, sample.get("value"))
            elif kind == "samples" and "readings" in data:
                scope = base or ({"namespace": self.namespace} if self.namespace else {})
                for at, value, *_ in data["readings"]:
                    add(signal, scope, _time(at), e.seq, value)
            elif kind == "comparison":
                for at, value in data.get("series") or []:
                    add(signal, base, _time(at), e.seq, value)
                at = _time(e.at)
                if data.get("yesterday") is not None:
                    add(signal, base, at - dt.timedelta(days=1), e.seq, data["yesterday"])
            elif kind == "series":
                step = float(data.get("step") or 0)
                end = _time(data["end"]) if data.get("end") else None
                for series in data.get("series") or []:
                    labels = {**base, **(series.get("labels") or {})}
                    points = [(_time(at), value) for at, value in series.get("points") or []]
                    for i, (at, value) in enumerate(points):
                        add(signal, labels, at, e.seq, value)
                        following = points[i + 1][0] if i + 1 < len(points) else end
                        # A series that stops (a scrape that failed, a pod gone) reads nothing from then on.
                        if step and following is not None and (following - at).total_seconds() > 1.5 * step:
                            add(signal, labels, at + dt.timedelta(seconds=step), e.seq, None)
        return out

    def _known(self, signal: Any) -> bool:
        return isinstance(signal, str) and self.catalog is not None and signal in self.catalog.signals

    def signals(self, changes: Sequence[Change]) -> tuple[list[dict], list[dict]]:
        """(the scenario's signals up to the first change, the effects of each change) from the readings."""
        timeline: list[dict] = []
        effects: list[list[dict]] = [[] for _ in changes]
        for signal, seen in sorted(self.observations().items()):
            aggregate = self.catalog.get(signal).aggregate
            fine = _finest(seen)
            keys = {o.labels for o in seen if {k for k, _ in o.labels} == fine}
            coarse = [o for o in seen if o.labels not in keys]
            merged = {key: [o for o in seen if o.labels == key] for key in sorted(keys)}
            if coarse and aggregate in ("sum", "max"):
                # A rate or a count is never negative: where a coarser reading is 0, so is each series under it.
                for o in coarse:
                    if o.value == 0:
                        for key in merged:
                            if set(o.labels) <= set(key):
                                merged[key].append(dataclasses.replace(o, labels=key))
            if coarse:
                start = min((o.at for group in merged.values() for o in group), default=None)
                # Before the finer readings begin, a coarser one is split evenly over the series under it.
                for o in coarse:
                    under = [key for key in merged if set(o.labels) <= set(key)]
                    if start is not None and o.at < start and under and o.value is not None:
                        share = o.value / len(under) if aggregate == "sum" else o.value
                        for key in under:
                            merged[key].append(dataclasses.replace(o, labels=key, value=share))
                if start is not None and any(o.at >= start for o in coarse):
                    self.assumed.append(f"{signal}: its readings by {', '.join(sorted(fine)) or 'all'} are "
                                        f"replayed; the coarser ones (a verification's, a trend's) where they "
                                        f"fall between them are not")
            series: list[dict] = []
            for key, group in merged.items():
                before, after = _split(group, changes)
                if before:
                    series.append({"labels": dict(key), "points": before})
                for k, points in after.items():
                    effects[k].append({"signal": signal, "labels": dict(key), "points": points})
            if series:
                timeline.append({"name": signal, "aggregate": aggregate,
                                 "help": self.catalog.get(signal).help[:200], "series": series})
        reactions = []
        for k, change in enumerate(changes):
            if effects[k]:
                reactions.append({"name": f"after-{change.step}-{k + 1}", "on": change.trigger,
                                  "effects": effects[k]})
        return timeline, reactions

    def metrics_unreachable(self, timeline: Sequence[dict]) -> bool:
        """Whether Prometheus could not be read at all in the run (its steps all failed so, none read)."""
        down = [e.step for e in self.ran if e.type == ev.STEP_FINISHED and str(e.data.get("uses", "")).startswith(
            "prom.") and e.data.get("status") == "failed" and "unreachable" in str(e.data.get("summary", ""))]
        if down and not timeline:
            return True
        if down:
            self.missing.append(f"the moments Prometheus could not be read (steps {', '.join(down)}): a replay "
                                f"reads it throughout")
        return False

    # -- the cluster ----------------------------------------------------------------------------

    def evidence_of(self, kind: str) -> list[Event]:
        """The run's evidence of one kind, in the order journaled."""
        return [e for e in self.ran if e.type == ev.EVIDENCE and e.data.get("kind") == kind]

    def workloads(self, changes: Sequence[Change], pods: Mapping[str, dict]) -> list[dict]:
        ref = self.params.get("workload")
        if not isinstance(ref, str) or "/" not in ref or not self.namespace:
            self.missing.append("the workload: the run's params name none (`workload`, `namespace`)")
            return []
        kind, name = ref.split("/", 1)
        if kind not in ("statefulset", "deployment"):
            self.missing.append(f"the workload {ref}: only a StatefulSet or a Deployment can be replayed")
            return []
        seen = next((e.data for e in self.evidence_of("text") if "replicas" in e.data), None)
        planned = next((e.data for e in self.ran if e.type == ev.ACTION_PLANNED
                        and "replicas" in (e.data.get("before") or {})), None)
        replicas = seen["replicas"] if seen else planned["before"]["replicas"] if planned else len(pods)
        flags = dict((seen or {}).get("flags") or {})
        for e in self.ran:  # a flag a change planned, as it was before
            if e.type == ev.ACTION_PLANNED and e.data.get("action") in ("k8s.set_arg", "k8s.set_env_arg"):
                for flag, value in (e.data.get("before") or {}).items():
                    flags.setdefault(flag, value)
        container = self.params.get("container") if isinstance(self.params.get("container"), str) else "main"
        args = [f"{flag}={value}" for flag, value in flags.items() if value is not None]
        self.assumed.append(f"{ref}: pods selected by app={name}; its container {container}'s command and other "
                            f"flags are not in the journal (its args here are the flags read: "
                            f"{' '.join(args) or 'none'})")
        placement = [{"node": pods[p]["node"]} for p in sorted(pods) if pods[p].get("node")]
        restart = self._restart_seconds(changes)
        if restart is None:
            self.assumed.append(f"a restarted pod of {ref} is ready {DEFAULT_RESTART_SECONDS:g}s after it starts "
                                f"(no readiness was watched after a restart)")
        return [{"kind": kind, "name": name, "namespace": self.namespace, "replicas": int(replicas),
                 "selector": {"app": name}, "containers": [{"name": container, "args": args}],
                 "restart_seconds": restart or DEFAULT_RESTART_SECONDS,
                 **({"placement": placement} if placement else {}), "logs": []}]

    def _restart_seconds(self, changes: Sequence[Change]) -> float | None:
        """How long the pods took to be ready again after a change, where a verification watched it."""
        for e in self.ran:
            readings = e.data.get("readings") if e.type == ev.EVIDENCE else None
            if not readings or "ready" not in str(e.data.get("signal", "")):
                continue
            before = [c for c in changes if c.seq < e.seq and "pod_deleted" in c.trigger]
            ready = next((_time(at) for at, _, ok, *_ in readings if ok), None)
            if before and ready is not None and ready > before[-1].at:
                return (ready - before[-1].at).total_seconds()
        return None

    def pods(self) -> dict[str, dict]:
        listed = next((e.data["pods"] for e in self.evidence_of("pods") if e.data.get("pods")), [])
        out: dict[str, dict] = {}
        for pod in listed:
            row: dict[str, Any] = {"name": str(pod["name"]), "ready": bool(pod.get("ready", True))}
            if pod.get("node"):
                row["node"] = str(pod["node"])
            if pod.get("restarts"):
                row["restart_count"] = int(pod["restarts"])
            if pod.get("last_termination_reason"):
                self.missing.append(f"when {pod['name']}'s last container ended ({pod['last_termination_reason']}): "
                                    f"the pod listing journals the reason only, so its previous log is not replayed")
            out[row["name"]] = row
        for e in self.evidence_of("probe"):
            for pod, answer in (e.data.get("answers") or {}).items():
                if pod in out and isinstance(answer, Mapping):
                    error = str(answer.get("error", ""))
                    out[pod]["health"] = "ok" if answer.get("ok") else "hang" if "timed out" in error else "error"
        if not listed:
            self.missing.append("the pods: no step listed them (the workload's are made from its replicas)")
        return out

    def logs(self, pods: dict[str, dict]) -> None:
        """Each pod's counted log lines, at the minutes they were counted, with the excerpts' text."""
        for e in self.ran:
            data = e.data
            if e.type != ev.EVIDENCE or data.get("kind") != "logs" or "by_pod_minute" not in data:
                continue
            read = _read_window(e)
            texts: dict[str, str] = {}
            for line in data.get("excerpt") or []:
                pod, _, text = str(line).partition(": ")
                texts.setdefault(pod, text)
            fallback = next(iter(texts.values()), None)
            selector = data.get("selector") if isinstance(data.get("selector"), Mapping) else {}
            for pod, minutes in (data.get("by_pod_minute") or {}).items():
                text = texts.get(pod, fallback)
                if pod not in pods and pod not in self.extra and selector and self.namespace:
                    # A pod of no workload the run named (a gateway's): made as the selector found it.
                    self.extra[pod] = {"name": pod, "namespace": self.namespace,
                                       "labels": {str(k): str(v) for k, v in selector.items()}}
                    self.assumed.append(f"{pod}: a pod in {self.namespace} with {_shown(selector)}, as the "
                                        f"step {e.step} found it")
                if pod in self.extra:
                    pods_of = self.extra
                else:
                    pods_of = pods
                if pod not in pods_of or text is None:
                    self.missing.append(f"the log lines {e.step} counted in {pod}: no excerpt of them to replay")
                    continue
                entries = pods_of[pod].setdefault("logs", [])
                for begin, end, count in _runs(minutes, read):
                    if end == begin:  # written at the very instant the step read them
                        entries += [{"at": _offset(begin, self.t0), "text": text}] * count
                        continue
                    # `count` lines in each slot, evenly: the minute, or the part of it the step read.
                    every = (end - begin).total_seconds() / count
                    entries.append({"every": round(every, 3), "from": round(_offset(begin, self.t0) + every / 2, 3),
                                    "until": _offset(end, self.t0), "text": text})
            if data.get("untimed"):
                self.missing.append(f"{data['untimed']} log line(s) {e.step} counted without a time")
        if any(e.type == ev.EVIDENCE and "prompts" in e.data and "per_pod" in e.data for e in self.ran):
            self.missing.append("the prompts in the logs: the journal keeps their lengths only, not the lines")

    def commands(self) -> list[dict]:
        out: list[dict] = []
        seen: set[tuple] = set()
        for e in self.ran:
            data = e.data
            if e.type != ev.EVIDENCE or data.get("kind") != "command" or not data.get("command"):
                continue
            where = ("pod", data["pod"]) if data.get("pod") else ("node", data["node"]) if data.get("node") else None
            if where is None:
                continue
            key = (where, tuple(data["command"]))
            if key in seen:
                continue  # the first answer is replayed; a later one to the same command is not
            seen.add(key)
            row = {where[0]: str(where[1]), "argv": [str(a) for a in data["command"]],
                   "stdout": str(data.get("stdout", "")), "stderr": str(data.get("stderr", "")),
                   "exit_code": int(data.get("exit_code") or 0)}
            container = re.search(r" in [^/ ]+/([^/ ]+)$", str(data.get("title", "")))
            if where[0] == "pod" and container:
                row["container"] = container.group(1)
            if data.get("truncated"):
                self.missing.append(f"the rest of {' '.join(data['command'])}'s output in {where[1]} (journaled cut)")
            out.append(row)
        if any(e.type == ev.EVIDENCE and e.data.get("kind") == "gpu" for e in self.ran):
            self.missing.append("the GPU nodes' processes: node.gpu_holders journals its findings, not the commands' "
                                "output, so the nodes answer as an empty host")
        return out

    def nodes(self, pods: Mapping[str, dict], commands: Iterable[dict], changes: Sequence[Change]) -> list[dict]:
        names = {p["node"] for p in pods.values() if p.get("node")} | {c["node"] for c in commands if "node" in c}
        names |= {c.trigger["node_pid_killed"]["node"] for c in changes if "node_pid_killed" in c.trigger}
        names |= {str(e.data["node"]) for e in self.evidence_of("gpu") if e.data.get("node")}
        return [{"name": n} for n in sorted(names)]


def _shown(labels: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels.items())


def _read_window(e: Event) -> tuple[dt.datetime, dt.datetime]:
    """When a log step's lines were written: from `since` before the read (its title says how long) to it."""
    from runbook.model.duration import parse_duration

    found = re.search(r" in the last (\S+)$", str(e.data.get("title", "")))
    try:
        since = parse_duration(found.group(1)) if found else None
    except ValueError:
        since = None
    at = _time(e.at)
    return (at - dt.timedelta(seconds=since) if since else dt.datetime.min.replace(tzinfo=dt.timezone.utc), at)


def _runs(minutes: Mapping[str, int], read: tuple[dt.datetime, dt.datetime]
          ) -> list[tuple[dt.datetime, dt.datetime, int]]:
    """(start, end, lines) of each slot of the counted minutes: a minute cut to what the step read, and
    whole minutes that counted as many lines one after another as one slot."""
    out: list[tuple[dt.datetime, dt.datetime, int]] = []
    lo, hi = read
    for minute, count in sorted(minutes.items()):
        whole = _time(minute.replace("Z", ":00Z"))
        begin, end = max(whole, lo), min(whole + dt.timedelta(minutes=1), hi)
        if count <= 0 or end < begin:
            continue
        full = (begin, end) == (whole, whole + dt.timedelta(minutes=1))
        last = out[-1] if out else None
        if full and last and last[1] == begin and (last[1] - last[0]).total_seconds() * count == 60 * last[2]:
            out[-1] = (last[0], end, last[2] + int(count))
        else:
            out.append((begin, end, int(count)))
    return out


def _steps(points: Sequence[list]) -> list[list]:
    """The points a step function needs: a point with the value before it says nothing new."""
    out: list[list] = []
    for at, value in points:
        if not out or out[-1][1] != value:
            out.append([at, value])
    return out


def _finest(seen: Sequence[Observation]) -> set[str]:
    """The label names of the most detailed readings of a signal (by pod, say)."""
    return max(({k for k, _ in o.labels} for o in seen), key=lambda keys: (len(keys), sorted(keys)))


def _split(group: Sequence[Observation], changes: Sequence[Change]) -> tuple[list, dict[int, list]]:
    """(points up to the first change, offsets from t0; each change's points, offsets from it). A reading
    belongs to the last change before it, or made at its instant and journaled after it."""
    ordered = sorted(group, key=lambda o: (o.at, o.seq))
    before: dict[dt.datetime, float | None] = {}
    after: dict[int, dict[float, float | None]] = {}
    for o in ordered:
        owner = None
        for k, c in enumerate(changes):
            if c.at < o.at or (c.at == o.at and c.seq < o.seq):
                owner = k
        if owner is None:
            before[o.at] = o.value
        else:
            after.setdefault(owner, {})[_offset(o.at, changes[owner].at)] = o.value
    points = _steps([[at, value] for at, value in sorted(before.items())])
    return points, {k: _steps([[t, v] for t, v in sorted(p.items())]) for k, p in sorted(after.items())}


def _pod_names(workloads: Sequence[Mapping[str, Any]]) -> set[str]:
    from runbook.sim.scenario import Workload, workload_pod_name

    names: set[str] = set()
    for w in workloads:
        model = Workload.model_validate(w)
        names |= {workload_pod_name(model, i) for i in range(model.replicas)}
    return names


def _given(params: Mapping[str, Any], playbook: str) -> dict[str, Any]:
    """The run's params that are not its bundled playbook's defaults: what the alert or a person gave."""
    from runbook.actions import load_builtin
    from runbook.drill.run import bundled_playbook

    try:
        defaults = bundled_playbook(playbook, load_builtin()).params
    except RunbookError:
        return dict(params)  # not a bundled playbook: every param is kept
    return {k: v for k, v in params.items() if k not in defaults or str(defaults[k]) != str(v)}


def record(events: Sequence[Event], incident: str, *, catalog: Any = None) -> dict[str, Any]:
    """The scenario document (plain data, for YAML) of the incident's first run."""
    if catalog is None:
        from runbook.signals.catalog import build_catalog

        catalog = build_catalog()
    r = _Recorder(events, incident, catalog)
    changes = r.changes()
    pods = r.pods()
    r.logs(pods)
    commands = r.commands()
    workloads = r.workloads(changes, pods)
    timeline, reactions = r.signals(changes)
    for signal in timeline:
        for series in signal["series"]:
            series["points"] = [[_offset(at, r.t0), v] for at, v in series["points"]]
    made = _pod_names(workloads)
    overrides, unnamed = [], []
    for row in pods.values():
        if row["name"] not in made:
            unnamed.append(row["name"])
        elif any(k != "name" for k in row):
            overrides.append(row)
    if unnamed:
        # A ReplicaSet names its pods at random: a replay's pods have other names than the incident's.
        r.missing.append(f"the pods {', '.join(sorted(unnamed))}: no replayed workload makes a pod of that name "
                         f"(a Deployment's pods are named anew), so their state, logs and commands are not replayed")
        commands = [c for c in commands if c.get("pod") not in unnamed]
    unreachable = r.metrics_unreachable(timeline)
    playbook = str(r.start.data.get("playbook"))
    params = _given(r.params, playbook)
    if len(params) < len(r.params):
        r.assumed.append(f"the run's params equal to playbook {playbook}'s defaults are left to the playbook "
                         f"replayed (so a changed default is tried): {', '.join(sorted(set(r.params) - set(params)))}")
    alert = r.alert()
    summary = alert["annotations"].get("summary") or alert["name"]
    document: dict[str, Any] = {
        "name": scenario_name(incident),
        "playbook": playbook,
        "expect": r.expect(),
        "description": (f"Recorded from incident {incident} (run {r.run} of playbook {playbook}, started "
                        f"{r.t0:%Y-%m-%d %H:%M:%S} UTC): {summary}. Its readings, commands' answers and logs "
                        f"are replayed as they were journaled; what followed each change follows only when the "
                        f"replay makes the same change."),
        "start": r.t0.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "alert": alert,
        "params": params,
        "metrics": {"unreachable": unreachable},
        "nodes": r.nodes(pods, commands, changes),
        "workloads": workloads,
        "pods": overrides,
        "extra_pods": list(r.extra.values()),
        "signals": timeline,
        "reactions": reactions,
        "commands": commands,
        "recorded": {"incident": incident, "run": r.run, "missing": list(dict.fromkeys(r.missing)),
                     "assumed": list(dict.fromkeys(r.assumed))},
    }
    # The journal was redacted as it was written; once more, for what an older journal let through.
    return redaction.redact(document)


def record_file(journal: Path, out: Path, *, incident: str | None = None) -> tuple[Path, Any]:
    """The incident of `journal` recorded as the scenario file `out`, checked by loading it back:
    (the file, the scenario)."""
    from runbook.record import safe_fs
    from runbook.record.journal import read_journal
    from runbook.sim.scenario import parse_scenario

    read = read_journal(journal)
    if not read.events:
        raise InvalidInput(f"{journal} holds no events")
    incident = incident or read.events[0].incident
    text = to_yaml(record(read.events, incident))
    scenario = parse_scenario(text, str(out))  # a recording that does not load is a bug: never written
    try:
        safe_fs.write_private(safe_fs.private_dir(out.parent) / out.name, text.encode("utf-8"))
    except OSError as exc:
        raise RunbookError(f"cannot write the scenario {out}: {safe_fs.reason(exc)}") from None
    return out, scenario


def to_yaml(document: Mapping[str, Any]) -> str:
    """The scenario as a file people read: what the journal lacked said first."""
    import yaml

    recorded = document.get("recorded") or {}
    head = [f"# Recorded by `runbook drill --from {recorded.get('incident')}`: replay with `runbook drill FILE`,",
            "# or try a changed playbook on it with `runbook drill FILE --playbook PATH`."]
    for title, items in (("Not in the journal", recorded.get("missing")), ("Assumed", recorded.get("assumed"))):
        if items:
            head.append(f"# {title}:")
            head += [f"#   - {item}" for item in items]
    class Dumper(yaml.SafeDumper):
        """Short lists on one line: points `[[-60, 7.0], [0, 8.0]]`, argv `[nvidia-smi, -q]`."""

    def represent_list(dumper: yaml.SafeDumper, items: list) -> yaml.Node:
        flat = all(not isinstance(i, (dict, list)) or (isinstance(i, list) and all(
            not isinstance(j, (dict, list)) for j in i)) for i in items)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", items, flow_style=flat and bool(items))

    Dumper.add_representer(list, represent_list)
    body = yaml.dump(dict(document), Dumper=Dumper, sort_keys=False, width=120, allow_unicode=True)
    return "\n".join(head) + "\n" + body
