"""The params a rule cannot be written without, read from the workload itself: `--max-num-seqs`
of the vLLM container, so the running-batch line is the server's own, never a guess.
"""

from __future__ import annotations

from typing import Any

from runbook.errors import InvalidInput

KINDS = {"statefulset": "statefulset", "sts": "statefulset", "deployment": "deployment", "deploy": "deployment",
         "daemonset": "daemonset", "ds": "daemonset"}


def parse_workload(ref: str) -> tuple[str, str]:
    """`statefulset/vllm-server` → ("statefulset", "vllm-server"); InvalidInput saying how to write it."""
    kind, _, name = ref.partition("/")
    if kind.lower() not in KINDS or not name or "/" in name:
        raise InvalidInput(f"--workload {ref!r}: give KIND/NAME, e.g. statefulset/vllm-server "
                           f"(KIND: statefulset, deployment or daemonset)")
    return KINDS[kind.lower()], name


def max_num_seqs(cluster: Any, namespace: str, ref: str) -> int:
    """The `--max-num-seqs` the workload's containers are started with. Refused (InvalidInput) when no
    container sets it (vLLM's default depends on the GPU and version), when two disagree, or when it
    is not a positive whole number."""
    from runbook.commandline.flags import find_flag

    kind, name = parse_workload(ref)
    workload = cluster.get_workload(namespace, kind, name)
    found = {}
    for container in workload.containers:
        value = find_flag(container.command, container.args, "--max-num-seqs", container=container.name,
                          env=container.env)
        if value is not None:
            found[container.name] = value
    where = f"{kind}/{name} in namespace {namespace}"
    if not found:
        raise InvalidInput(f"{where} does not set --max-num-seqs, and vLLM's default depends on the GPU and "
                           f"version: give it with -p max_num_seqs=N")
    if len(set(found.values())) > 1:
        listed = ", ".join(f"{c}: {v}" for c, v in found.items())
        raise InvalidInput(f"{where}: its containers set --max-num-seqs differently ({listed}); "
                           f"give the one to alert on with -p max_num_seqs=N")
    text = next(iter(found.values()))
    if not text.isdigit() or int(text) <= 0:
        raise InvalidInput(f"{where}: --max-num-seqs is {text!r}, not a positive whole number")
    return int(text)
