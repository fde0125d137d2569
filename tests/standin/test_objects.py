"""Reading API objects and exec statuses (pure functions), and the test server's patch semantics."""

from __future__ import annotations

import pytest

from runbook.backends.kubernetes.objects import exit_status, pod_from, selector_text, workload_from
from runbook.errors import InvalidInput
from tests.standin.apiserver import patches
from tests.standin.apiserver.errors import ApiError
from tests.standin.apiserver.selectors import label_selector


@pytest.mark.parametrize("status, expected", [
    ('{"metadata":{},"status":"Success"}', (0, "")),
    ('{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: 137",'
     '"reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"137"}]}}', (137, "")),
    # The command could not start: the cause is the runtime's text, not a number (client issue #1840).
    ('{"metadata":{},"status":"Failure","message":"Internal error occurred: exec: \\"x\\": executable file not found",'
     '"reason":"InternalError","details":{"causes":[{"message":"exec: \\"x\\": executable file not found"}]}}',
     (None, 'Internal error occurred: exec: "x": executable file not found')),
    # NonZeroExitCode without an ExitCode cause is a protocol error, as client-go reads it.
    ('{"status":"Failure","reason":"NonZeroExitCode","message":"odd"}', (None, "odd")),
    ("not json", (None, "unreadable exit status 'not json'")),
])
def test_exit_status_from_the_error_channel(status, expected):
    assert exit_status(status) == expected


def test_a_pod_without_status_reads_as_not_ready():
    pod = pod_from({"metadata": {"name": "p", "namespace": "llm", "uid": "u"}, "spec": {}})
    assert (pod.phase, pod.ready, pod.restarts, pod.owner, pod.last_termination_reason) == ("Unknown", False, 0, "", None)


def test_a_crash_looping_container_reports_its_last_termination():
    pod = pod_from({"metadata": {"name": "p", "uid": "u", "ownerReferences": [
                        {"kind": "ReplicaSet", "name": "gw-5d8f7c9b4", "controller": True}],
                        "labels": {"pod-template-hash": "5d8f7c9b4"}},
                    "status": {"phase": "Running", "containerStatuses": [
                        {"name": "c", "ready": False, "restartCount": 7, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                         "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137,
                                                      "finishedAt": "2017-06-20T20:52:19Z"}}}]}})
    assert (pod.owner, pod.restarts, pod.last_termination_reason) == ("deployment/gw", 7, "OOMKilled")


def test_selector_text_refuses_empty_and_malformed():
    assert selector_text({"app": "vllm", "tier": "gpu"}) == "app=vllm,tier=gpu"
    for bad in ({}, {"app": "a b"}, {"app": "x,y"}, {"bad key": "v"}, {"app": "!x"}):
        with pytest.raises(InvalidInput):
            selector_text(bad)


def test_a_workload_without_match_labels_is_refused():
    with pytest.raises(InvalidInput, match="no matchLabels"):
        workload_from("deployment", {"metadata": {"name": "d"}, "spec": {"selector": {}}})


CONTAINERS = {"spec": {"template": {"spec": {"containers": [
    {"name": "vllm", "args": ["--a", "--max-model-len=7372"], "env": [{"name": "X", "value": "1"}]},
    {"name": "sidecar", "args": ["--port=9400"]}]}}}}


def test_strategic_merge_replaces_one_containers_args_only():
    patched = patches.strategic_merge(CONTAINERS, {"spec": {"template": {"spec": {"containers": [
        {"name": "vllm", "args": ["--max-model-len=6635"]}]}}}})
    vllm, sidecar = patched["spec"]["template"]["spec"]["containers"]
    assert vllm == {"name": "vllm", "args": ["--max-model-len=6635"], "env": [{"name": "X", "value": "1"}]}
    assert sidecar == {"name": "sidecar", "args": ["--port=9400"]}


def test_a_merge_patch_replaces_the_containers_list_whole():
    patched = patches.merge_patch(CONTAINERS, {"spec": {"template": {"spec": {"containers": [{"name": "vllm"}]}}}})
    assert patched["spec"]["template"]["spec"]["containers"] == [{"name": "vllm"}]


def test_json_patch_with_a_failing_test_op_changes_nothing():
    ops = [{"op": "test", "path": "/spec/template/spec/containers/0/name", "value": "sidecar"},
           {"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": []}]
    with pytest.raises(ApiError) as failed:
        patches.json_patch(CONTAINERS, ops)
    assert failed.value.code == 422
    ops[0]["value"] = "vllm"
    assert patches.json_patch(CONTAINERS, ops)["spec"]["template"]["spec"]["containers"][0]["args"] == []


@pytest.mark.parametrize("text, labels, matches", [
    ("app=vllm,tier!=cpu", {"app": "vllm", "tier": "gpu"}, True),
    ("app in (vllm, gateway),!canary", {"app": "gateway"}, True),
    ("app notin (vllm)", {"app": "vllm"}, False),
    ("tier", {"app": "vllm"}, False),
])
def test_label_selectors(text, labels, matches):
    assert label_selector(text)(labels) is matches


def test_an_unparsable_selector_is_a_400_not_match_all():
    with pytest.raises(ApiError) as failed:
        label_selector("app=(vllm")
    assert failed.value.code == 400
