"""What an action receives and returns: the step context, results, plans, and safe names.

Diagnostics and controls return an `ActionResult`; remediations return a `Plan` (before → after,
the facts the guards need, and how to apply and undo it) and never change anything themselves.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

from runbook.backends.base import Cluster, Http, Metrics, Nodes, World
from runbook.clock import Clock
from runbook.errors import InvalidInput

# Kubernetes label syntax: values from alerts are checked against these before any selector.
_LABEL_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
WORKLOAD_KINDS = {"statefulset": "statefulset", "sts": "statefulset", "deployment": "deployment",
                  "deploy": "deployment", "daemonset": "daemonset", "ds": "daemonset"}


def check_name(value: str, what: str = "name") -> str:
    if not isinstance(value, str) or not _DNS_NAME.fullmatch(value):
        raise ValueError(f"{what} {value!r} is not a valid Kubernetes name (lowercase letters, digits, '-' and '.')")
    return value


def parse_selector(text: str | Mapping[str, str]) -> dict[str, str]:
    """`app=vllm-server,tier=gpu` → a dict, each part checked; an empty selector is refused."""
    pairs = dict(text) if isinstance(text, Mapping) else {}
    if isinstance(text, str):
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            key, sep, value = part.partition("=")
            if not sep or value.startswith("="):
                raise ValueError(f"selector part {part!r} must be key=value (only equality selectors are supported)")
            pairs[key.strip()] = value.strip()
    if not pairs:
        raise ValueError("an empty label selector would match every pod; give at least one key=value")
    for key, value in pairs.items():
        if not _LABEL_NAME.fullmatch(key):
            raise ValueError(f"{key!r} is not a valid label name")
        if not isinstance(value, str) or not _LABEL_VALUE.fullmatch(value) or not value:
            raise ValueError(f"{value!r} is not a valid label value for {key!r}")
    return pairs


def parse_workload(ref: str) -> tuple[str, str]:
    """`statefulset/vllm-server` → ("statefulset", "vllm-server")."""
    kind, sep, name = ref.partition("/")
    if not sep or kind.lower() not in WORKLOAD_KINDS:
        raise ValueError(f"workload {ref!r} must be kind/name with kind one of statefulset, deployment, daemonset")
    return WORKLOAD_KINDS[kind.lower()], check_name(name, "workload name")


@dataclasses.dataclass(frozen=True)
class Evidence:
    """One block for the journal and the RCA: a table, a command's output, a log excerpt."""

    kind: Literal["samples", "comparison", "command", "logs", "pods", "probe", "gpu", "text"]
    title: str
    data: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class ActionResult:
    status: Literal["ok", "failed"]
    summary: str
    result: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def ok(cls, summary: str, **result: Any) -> "ActionResult":
        return cls("ok", summary, result)

    @classmethod
    def failed(cls, summary: str, **result: Any) -> "ActionResult":
        return cls("failed", summary, result)


@dataclasses.dataclass(frozen=True)
class Capacity:
    """How many replicas of a workload serve, before and after a change: a run that ends with fewer
    than the incident began with has mitigated it with capacity reduced, not resolved it (issue 34)."""

    target: str  # the plan's target: "llm/statefulset/vllm-server"
    before: int
    after: int
    restore: tuple[str, ...] = ()  # the exact commands that put it back (kubectl), for the report and the page
    stopped: str | None = None  # why an apply stopped short of `after` (its result's `stopped`)


@dataclasses.dataclass(frozen=True)
class Plan:
    """A remediation before it happens: what, from → to, and what the guards must know."""

    target: str  # "llm/statefulset/vllm-server": what locks, cooldowns and budgets count
    summary: str  # "scale statefulset/vllm-server 3 → 1"
    before: dict[str, Any]
    after: dict[str, Any]
    apply: Callable[[bool], dict[str, Any]]  # apply(dry_run) -> what was done
    rollback: Callable[[], dict[str, Any]] | None = None  # restores `before`; None: irreversible
    value_after: float | None = None  # the numeric value set (floor/ceiling guards)
    ready_before: int | None = None
    ready_after: int | None = None  # ready pods left once applied (min_ready guard)
    touched: int | None = None  # pods touched (max_fraction guard)
    total: int | None = None
    refusal: tuple[str, str] | None = None  # (guard, reason) found while planning
    noop: bool = False  # already in the desired state
    server_dry_run: bool = True  # apply(True) validates against the target; False: nothing to validate there
    namespace: str | None = None  # the Kubernetes namespace changed, for the namespace allow-list; None: none
    # The serving capacity it changes; an apply that stops short says where in its result's `replicas`.
    capacity: Capacity | None = None

    def diff(self) -> list[str]:
        keys = list(dict.fromkeys([*self.before, *self.after]))
        lines = []
        for key in keys:
            old, new = self.before.get(key), self.after.get(key)
            if old == new:
                lines.append(f"  {key}: {plain(old)}")
            else:
                if key in self.before:
                    lines.append(f"- {key}: {plain(old)}")
                if key in self.after:
                    lines.append(f"+ {key}: {plain(new)}")
        return lines


def plain(value: Any) -> str:
    """A value as people read it in a plan, never a Python repr: `a, b` for a list, `k=v k=v` for a
    mapping of plain values, `name: …; name: …` for a mapping of lists or mappings."""
    if isinstance(value, dict):
        if all(not isinstance(v, (dict, list, tuple)) for v in value.values()):
            return " ".join(f"{k}={v}" for k, v in value.items()) or "none"
        return "; ".join(f"{k}: {plain(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(plain(v) for v in value) or "none"
    return str(value)


class MissingBackend(InvalidInput):
    pass


@dataclasses.dataclass
class StepContext:
    """Everything an action may use. It records evidence through `evidence()`, never prints."""

    world: World
    clock: Clock
    now: dt.datetime
    step_id: str
    params: Mapping[str, Any]  # the playbook's params, rendered
    dry_run: bool
    timeout: float
    record_evidence: Callable[[Evidence], None]
    pool_size: int = 16
    interrupted: Callable[[], str | None] = lambda: None  # why the run must stop now (SIGINT…), or None
    progress: Callable[[dict[str, Any]], None] = lambda update: None  # a live reading for the view; not journaled

    def evidence(self, kind: Any, title: str, **data: Any) -> None:
        self.record_evidence(Evidence(kind, title, data))

    def namespace(self, given: str | None) -> str:
        value = given or self.params.get("namespace")
        if not value:
            raise InvalidInput("no namespace: give `namespace:` in the step or a `namespace` param in the playbook")
        return check_name(str(value), "namespace")

    @property
    def metrics(self) -> Metrics:
        return self._need("metrics", "a Prometheus URL (--prometheus-url)")

    @property
    def cluster(self) -> Cluster:
        return self._need("cluster", "a Kubernetes context (--context)")

    @property
    def nodes(self) -> Nodes:
        return self._need("nodes", "an SSH inventory in the config file")

    @property
    def http(self) -> Http:
        return self._need("http", "HTTP probing")

    def _need(self, name: str, how: str) -> Any:
        backend = getattr(self.world, name)
        if backend is None:
            raise MissingBackend(f"step {self.step_id!r} needs the {name} backend; configure {how}")
        return backend
