"""What a playbook needs of the world (Prometheus, a cluster, SSH nodes), checked before an incident opens.

`runbook run` and `runbook serve` refuse with exit 2 and one message naming what is missing and how to set
it, instead of opening an incident whose steps fail one after the other (or answering 202 to alerts).
"""

from __future__ import annotations

from collections.abc import Iterable

from runbook.backends.base import World
from runbook.errors import NotConfigured
from runbook.model.playbook import Guard, Playbook, Step
from runbook.model.registry import Kind, Registry

# What each backend is called in a message, and the ways to configure it.
HOW = {
    "cluster": ("a Kubernetes cluster", "pass --kubeconfig FILE (and --context NAME when it holds several), set "
                "KUBECONFIG, or pass --in-cluster inside a pod (or the config file's kubernetes: section)"),
    "metrics": ("Prometheus", "pass --prometheus-url URL, set RUNBOOK_PROMETHEUS_URL, or put prometheus: {url: …} "
                "in the config file"),
    "nodes": ("the GPU nodes over SSH", "a nodes: inventory in the config file (--config, $RUNBOOK_CONFIG, "
              "./runbook.yaml)"),
}
ORDER = ("cluster", "metrics", "nodes")
RECHECK = "the re-check before each change"


def step_needs(step: Step) -> set[str]:
    """The backends one step cannot run without (optional uses, such as a cordon check, left out)."""
    family = step.uses.split(".", 1)[0]
    if family == "prom":
        return {"metrics"}
    if family == "k8s":
        return {"cluster"}
    if family in ("node", "compose"):  # a Docker Compose host is reached over SSH like a GPU node
        return {"nodes"}
    if step.uses == "http.probe":
        return set() if "url" in step.with_ else {"cluster"}  # pods are found through the cluster
    if step.uses == "flow.verify":
        return {"metrics"} if "signal" in step.with_ else {"cluster"} if "ready" in step.with_ else set()
    return set()


def playbook_needs(playbook: Playbook, registry: Registry) -> dict[str, list[str]]:
    """backend → what needs it: step ids, and the re-check of `detect` that guards each change."""
    needs: dict[str, list[str]] = {}
    for step in playbook.steps:
        for backend in step_needs(step):
            needs.setdefault(backend, []).append(step.id)
    spec_kind = {s.name: s.kind for s in registry.specs()}
    rechecks = playbook.detect is not None and any(
        spec_kind.get(s.uses) is Kind.REMEDIATION and (s.guard or Guard()).recheck for s in playbook.steps)
    if rechecks:
        needs.setdefault("metrics", []).append(RECHECK)
    return needs


def missing(world: World, needs: dict[str, list[str]]) -> dict[str, list[str]]:
    return {backend: users for backend, users in needs.items() if getattr(world, backend) is None}


def _users(users: list[str]) -> str:
    steps = [u for u in users if u != RECHECK]
    text = "steps " + ", ".join(steps) if steps else ""
    if RECHECK in users:
        text = f"{text} and {RECHECK}" if text else RECHECK
    return text


def check_run(playbook: Playbook, world: World, registry: Registry) -> None:
    """NotConfigured (exit 2) listing every backend `playbook` needs that `world` lacks."""
    lacking = missing(world, playbook_needs(playbook, registry))
    if lacking:
        lines = [f"  - {HOW[b][0]}, for {_users(lacking[b])}: {HOW[b][1]}" for b in ORDER if b in lacking]
        raise NotConfigured(f"playbook {playbook.name} needs what is not configured, so no incident was opened:\n"
                            + "\n".join(lines))


def check_serve(playbooks: Iterable[Playbook], world: World, registry: Registry) -> None:
    """NotConfigured when a served playbook could not run: the server would accept alerts it cannot act on."""
    lacking: dict[str, list[str]] = {}
    for playbook in sorted(playbooks, key=lambda p: p.name):
        for backend in missing(world, playbook_needs(playbook, registry)):
            lacking.setdefault(backend, []).append(playbook.name)
    if lacking:
        lines = [f"  - {HOW[b][0]}, for playbooks {', '.join(lacking[b])}: {HOW[b][1]}" for b in ORDER if b in lacking]
        raise NotConfigured("runbook serve would accept alerts it cannot run; not configured:\n" + "\n".join(lines)
                            + "\nConfigure them, or serve only the playbooks this server can run with --playbooks.")
