"""A flag in an env var's value (KServe's VLLM_ADDITIONAL_ARGS) on the real apiserver and Deployment controller:
read with where valueFrom points, lowered there by one patch the rollout carries; templates refused unwritten."""

from __future__ import annotations

import json

import pytest

from runbook.actions import load_builtin
from runbook.backends.base import EnvVar, World
from runbook.clock import FakeClock, utc
from runbook.engine.operator import AssumeYes
from runbook.engine.runner import Engine
from runbook.errors import InvalidInput, StalePlan
from runbook.record.journal import History, MemoryJournal
from runbook.loading.validation import load_playbook_text
from runbook.record.locks import MemoryLocks
from runbook.sim.fakes import FakeMetrics
from tests.controlplane import objects
from tests.controlplane.identity import runbook_user

LOWER = """
name: lower
title: lower max-model-len
params: {{namespace: {namespace}}}
steps:
  - id: lower
    uses: k8s.set_arg
    with: {{target: deployment/llama, container: main, flag: --max-model-len, factor: 0.9, floor: 2048}}
    guard: {{min_ready: 0, budget_per_hour: null, lock: false}}
"""
EXTRA = "--max-model-len 8192 --enforce-eager"
# The main container of a KServe LLMInferenceService as its controller renders it: the script expands
# the env var unquoted; the other env entries are written values and valueFrom references.
SCRIPT = ("vllm serve /mnt/models --served-model-name llama --port 8000 --disable-uvicorn-access-log "
          "$VLLM_ADDITIONAL_ARGS")
ENV = [{"name": "HF_HOME", "value": "/mnt/models/.cache"},
       {"name": "VLLM_ADDITIONAL_ARGS", "value": EXTRA},
       {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "huggingface", "key": "token"}}},
       {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
       {"name": "MAX_LEN", "valueFrom": {"configMapKeyRef": {"name": "llm-config", "key": "max-len"}}},
       {"name": "EMPTY"}]


def llama(plane, namespace: str, command: list[str], args: list[str], env: list[dict] | None = None) -> dict:
    """The Deployment, applied and rolled out (the secret and ConfigMap its env points at exist, as in a cluster)."""
    doc = objects.deployment(namespace, "llama", replicas=2, container="main", image="ghcr.io/llm-d/llm-d:v0.2.0")
    doc["spec"]["template"]["spec"]["containers"][0].update(
        command=command, args=args, env=list(ENV if env is None else env),
        ports=[{"containerPort": 8000, "name": "http"}])
    plane.apply(doc,
                {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "huggingface", "namespace": namespace},
                 "stringData": {"token": "hf_test"}},
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "llm-config", "namespace": namespace},
                 "data": {"max-len": "8192"}})
    return objects.settled(plane, namespace, "deployment", "llama")


def lower(cluster, namespace: str):
    journal = MemoryJournal("inc-i18")
    loaded = load_playbook_text(LOWER.format(namespace=namespace), file="lower.yaml", registry=load_builtin())
    assert loaded.playbook is not None, [p.format() for p in loaded.problems]
    engine = Engine(registry=load_builtin(), world=World(metrics=FakeMetrics({}), cluster=cluster),
                    clock=FakeClock(utc(2026, 3, 14, 3, 12, 7)), journal=journal, operator=AssumeYes("alice"),
                    locks=MemoryLocks(), history=History(None, extra=journal))
    return engine.run(loaded.playbook)


def main_container(plane, namespace: str) -> dict:
    return plane.get("deployment", "llama", namespace=namespace)["spec"]["template"]["spec"]["containers"][0]


def deployment_writes(plane, namespace: str) -> list[tuple[str, bool, int]]:
    """runbook's writes of the Deployment as the audit log keeps them: (verb, dry run, answer), in order."""
    user = runbook_user(namespace)
    return [(e["verb"], "dryRun=All" in e["requestURI"], e["responseStatus"]["code"]) for e in plane.audit(namespace)
            if e["objectRef"].get("resource") == "deployments" and e["user"]["username"] == user]


def accepted(writes: list[tuple[str, bool, int]]) -> list[tuple[str, bool, int]]:
    """The writes the apiserver took. The only others allowed: a 409 from the Deployment controller's
    status write between runbook's read and its patch, which the client sends again (one change)."""
    assert {code for *_, code in writes if code >= 300} <= {409}, writes
    return [w for w in writes if w[2] < 300]


def test_env_vars_are_read_with_where_valuefrom_points(plane, namespace, cluster):
    llama(plane, namespace, ["/bin/bash", "-c"], [SCRIPT])
    main = cluster.get_workload(namespace, "deployment", "llama").container("main")
    assert main.env == (EnvVar("HF_HOME", "/mnt/models/.cache"), EnvVar("VLLM_ADDITIONAL_ARGS", EXTRA),
                        EnvVar("HF_TOKEN", None, "secretKeyRef huggingface/token"),
                        EnvVar("POD_NAME", None, "fieldRef metadata.name"),
                        EnvVar("MAX_LEN", None, "configMapKeyRef llm-config/max-len"), EnvVar("EMPTY", ""))


def test_vllm_additional_args_is_lowered_in_the_env_var_only(plane, namespace, cluster):
    llama(plane, namespace, ["/bin/bash", "-c"], [SCRIPT])
    before = main_container(plane, namespace)
    result = lower(cluster, namespace)
    assert result.outcome == "resolved", result.reason
    lowered = "--max-model-len 7373 --enforce-eager"
    assert main_container(plane, namespace) == {
        **before, "env": [e if e["name"] != "VLLM_ADDITIONAL_ARGS" else {**e, "value": lowered}
                          for e in before["env"]]}  # command, args, valueFrom entries untouched
    assert accepted(deployment_writes(plane, namespace)) == [("patch", True, 200), ("patch", False, 200)]
    objects.settled(plane, namespace, "deployment", "llama", timeout=120)  # the Deployment controller rolls it
    pods = json.loads(plane.kubectl("get", "pods", "-n", namespace, "-l", "app=llama", "-o", "json").stdout)["items"]
    live = [p for p in pods if p["metadata"].get("deletionTimestamp") is None]
    assert len(live) == 2
    for pod in live:
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["VLLM_ADDITIONAL_ARGS"] == lowered and env["HF_HOME"] == "/mnt/models/.cache"


def test_max_model_len_underscore_spelling_is_kept_on_the_real_backend(plane, namespace, cluster):
    llama(plane, namespace, ["vllm", "serve", "/mnt/models"], ["--max_model_len=8192", "--port=8000"], env=[])
    result = lower(cluster, namespace)
    assert result.outcome == "resolved", result.reason
    assert main_container(plane, namespace)["args"] == ["--max_model_len=7373", "--port=8000"]


@pytest.mark.parametrize("args", [["vllm serve /mnt/models --max-model-len=${MAX_SEQ_LEN} --port 8000"],
                                  ["vllm serve /mnt/models --max-model-len=$MAX_LEN"]])
def test_max_seq_len_template_is_refused_naming_the_variable(plane, namespace, cluster, args):
    llama(plane, namespace, ["/bin/sh", "-c"], args, env=[ENV[0], ENV[2], ENV[4]])
    result = lower(cluster, namespace)
    assert result.outcome != "resolved"
    name = "MAX_SEQ_LEN" if "MAX_SEQ_LEN" in args[0] else "MAX_LEN"
    assert f"computed from the environment variable {name}" in result.reason
    if name == "MAX_LEN":
        assert "MAX_LEN comes from configMapKeyRef llm-config/max-len" in result.reason
    assert deployment_writes(plane, namespace) == []


def test_set_env_is_conditional_on_the_planned_container_and_dry_run_stores_nothing(plane, namespace, cluster):
    llama(plane, namespace, ["/bin/bash", "-c"], [SCRIPT])
    planned = cluster.get_workload(namespace, "deployment", "llama").container("main")
    preview = cluster.set_container_argv(namespace, "deployment", "llama", "main", command=None, args=None,
                                         env={"VLLM_ADDITIONAL_ARGS": "--max-model-len 4096"}, dry_run=True,
                                         expected=planned)
    assert preview.container("main").env[1] == EnvVar("VLLM_ADDITIONAL_ARGS", "--max-model-len 4096")
    assert main_container(plane, namespace)["env"] == ENV
    # A colleague points HF_HOME elsewhere by hand meanwhile: not the container the plan read.
    plane.kubectl("patch", "deployment", "llama", "-n", namespace, "--type=json", "-p", json.dumps(
        [{"op": "replace", "path": "/spec/template/spec/containers/0/env/0/value", "value": "/elsewhere"}]))
    with pytest.raises(StalePlan, match="changed since this change was planned"):
        cluster.set_container_argv(namespace, "deployment", "llama", "main", command=None, args=None,
                                   env={"VLLM_ADDITIONAL_ARGS": "--max-model-len 4096"}, expected=planned)
    with pytest.raises(InvalidInput, match="HF_TOKEN .*valueFrom"):
        cluster.set_container_argv(namespace, "deployment", "llama", "main", command=None, args=None,
                                   env={"HF_TOKEN": "x"})
    assert [e for e in main_container(plane, namespace)["env"] if e["name"] == "VLLM_ADDITIONAL_ARGS"] == [ENV[1]]
    assert accepted(deployment_writes(plane, namespace)) == [("patch", True, 200)]  # the dry run alone
