"""Issue 18, items 3 and 4, on the real Kubernetes backend against the test API server: a flag in
an env var's value (KServe's `VLLM_ADDITIONAL_ARGS`) is read and changed there, by one strategic
merge patch of that env entry alone; `--max_model_len` keeps its spelling; a value computed from
another variable (`${MAX_SEQ_LEN}`) is refused, naming it, with nothing written."""

from __future__ import annotations

import pytest

from runbook.actions import load_builtin
from runbook.backends.base import EnvVar, World
from runbook.clock import FakeClock, utc
from runbook.engine.operator import AssumeYes
from runbook.engine.runner import Engine
from runbook.errors import InvalidInput, StalePlan
from runbook.journal import History, MemoryJournal
from runbook.loading.validation import load_playbook_text
from runbook.locks import MemoryLocks
from runbook.testing import FakeMetrics
from tests.kubernetes import world

LOWER = """
name: lower
title: lower max-model-len
params: {namespace: llm}
steps:
  - id: lower
    uses: k8s.set_arg
    with: {target: deployment/llama, container: main, flag: --max-model-len, factor: 0.9, floor: 2048}
    guard: {min_ready: 0, budget_per_hour: null, lock: false}
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


def llama(command: list[str], args: list[str], env: list[dict] | None = None) -> dict:
    main = {"name": "main", "image": "ghcr.io/llm-d/llm-d:v0.2.0", "command": command, "args": args,
            "env": list(ENV if env is None else env), "ports": [{"containerPort": 8000, "name": "http"}]}
    return world.workload("Deployment", "llama", replicas=2, labels={"app": "llama"}, containers=[main])


def lower(cluster):
    journal = MemoryJournal("inc-i18")
    loaded = load_playbook_text(LOWER, file="lower.yaml", registry=load_builtin())
    assert loaded.playbook is not None, [p.format() for p in loaded.problems]
    engine = Engine(registry=load_builtin(), world=World(metrics=FakeMetrics({}), cluster=cluster),
                    clock=FakeClock(utc(2026, 3, 14, 3, 12, 7)), journal=journal, operator=AssumeYes("alice"),
                    locks=MemoryLocks(), history=History(None, extra=journal))
    return engine.run(loaded.playbook)


def _main(k8s) -> dict:
    return k8s.get("Deployment", "llm", "llama")["spec"]["template"]["spec"]["containers"][0]


def _writes(k8s) -> list[tuple[str, str, bool]]:
    return [(s.verb, s.resource, s.dry_run) for s in k8s.seen if s.method != "GET" and s.resource == "deployments"]


def test_env_vars_are_read_with_where_valuefrom_points(k8s, cluster):
    k8s.apply(llama(["/bin/bash", "-c"], [SCRIPT]))
    main = cluster.get_workload("llm", "deployment", "llama").container("main")
    assert main.env == (EnvVar("HF_HOME", "/mnt/models/.cache"), EnvVar("VLLM_ADDITIONAL_ARGS", EXTRA),
                        EnvVar("HF_TOKEN", None, "secretKeyRef huggingface/token"),
                        EnvVar("POD_NAME", None, "fieldRef metadata.name"),
                        EnvVar("MAX_LEN", None, "configMapKeyRef llm-config/max-len"), EnvVar("EMPTY", ""))


def test_vllm_additional_args_is_lowered_in_the_env_var_only(k8s, cluster):
    k8s.apply(llama(["/bin/bash", "-c"], [SCRIPT]))
    before = _main(k8s)
    result = lower(cluster)
    assert result.outcome == "resolved", result.reason
    after = _main(k8s)
    lowered = "--max-model-len 7373 --enforce-eager"
    assert after == {**before, "env": [e if e["name"] != "VLLM_ADDITIONAL_ARGS" else {**e, "value": lowered}
                                       for e in before["env"]]}  # command, args, valueFrom entries untouched
    assert _writes(k8s) == [("patch", "deployments", True), ("patch", "deployments", False)]
    patches = [s for s in k8s.seen if s.method == "PATCH" and s.resource == "deployments"]
    assert {s.content_type for s in patches} == {"application/strategic-merge-patch+json"}
    pod = next(p for p in k8s.pods() if p["metadata"]["labels"].get("app") == "llama")
    assert next(e for e in pod["spec"]["containers"][0]["env"] if e["name"] == "VLLM_ADDITIONAL_ARGS")["value"] == lowered


def test_max_model_len_underscore_spelling_is_kept_on_the_real_backend(k8s, cluster):
    k8s.apply(llama(["vllm", "serve", "/mnt/models"], ["--max_model_len=8192", "--port=8000"], env=[]))
    result = lower(cluster)
    assert result.outcome == "resolved", result.reason
    assert _main(k8s)["args"] == ["--max_model_len=7373", "--port=8000"]


@pytest.mark.parametrize("args", [["vllm serve /mnt/models --max-model-len=${MAX_SEQ_LEN} --port 8000"],
                                  ["vllm serve /mnt/models --max-model-len=$MAX_LEN"]])
def test_max_seq_len_template_is_refused_naming_the_variable(k8s, cluster, args):
    k8s.apply(llama(["/bin/sh", "-c"], args, env=[ENV[0], ENV[2], ENV[4]]))
    result = lower(cluster)
    assert result.outcome != "resolved"
    name = "MAX_SEQ_LEN" if "MAX_SEQ_LEN" in args[0] else "MAX_LEN"
    assert f"computed from the environment variable {name}" in result.reason
    if name == "MAX_LEN":
        assert "MAX_LEN comes from configMapKeyRef llm-config/max-len" in result.reason
    assert _writes(k8s) == []


def test_set_env_is_conditional_on_the_planned_container_and_dry_run_stores_nothing(k8s, cluster):
    k8s.apply(llama(["/bin/bash", "-c"], [SCRIPT]))
    planned = cluster.get_workload("llm", "deployment", "llama").container("main")
    preview = cluster.set_container_argv("llm", "deployment", "llama", "main", command=None, args=None,
                                         env={"VLLM_ADDITIONAL_ARGS": "--max-model-len 4096"}, dry_run=True,
                                         expected=planned)
    assert preview.container("main").env[1] == EnvVar("VLLM_ADDITIONAL_ARGS", "--max-model-len 4096")
    assert _main(k8s)["env"] == ENV
    k8s.edit("Deployment", "llm", "llama",
             lambda o: o["spec"]["template"]["spec"]["containers"][0]["env"][0].update(value="/elsewhere"))
    with pytest.raises(StalePlan, match="changed since this change was planned"):
        cluster.set_container_argv("llm", "deployment", "llama", "main", command=None, args=None,
                                   env={"VLLM_ADDITIONAL_ARGS": "--max-model-len 4096"}, expected=planned)
    with pytest.raises(InvalidInput, match="HF_TOKEN .*valueFrom"):
        cluster.set_container_argv("llm", "deployment", "llama", "main", command=None, args=None,
                                   env={"HF_TOKEN": "x"})
    assert [e for e in _main(k8s)["env"] if e["name"] == "VLLM_ADDITIONAL_ARGS"] == [ENV[1]]
