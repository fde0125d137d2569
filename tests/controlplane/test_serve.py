"""`runbook serve` as deploy/webhook.yaml runs it, on the real control plane and on wall time: an
Alertmanager delivery of VllmOomSurge starts the bundled oom-surge playbook, which applies its
remediations unattended (the policy names them), and the real StatefulSet controller rolls them out.

Prometheus holds the oom-surge drill's course of the incident placed on the wall clock (its fix
lands a little after the delivery); the route shortens the observation window (`observe: 10s`).
"""

from __future__ import annotations

import datetime as dt

import yaml

from runbook.record import journal as journals
from runbook.model import events as ev
from tests.controlplane import drills, objects
from tests.webhook import replicas as serving
from tests.webhook.helpers import am_group

PLAYBOOKS = serving.ROOT / "playbooks"
FIX_LANDS_AFTER = 20.0  # seconds from writing the data: after the run's remediations, before its verification
REMEDIATIONS = ["scale-down", "lower-max-model-len", "kill-server", "restore-capacity"]


def test_runbook_serve_runs_oom_surge_from_a_delivery_on_the_real_plane(plane, oracle, tmp_path):
    replica = None
    with drills.on_wall_time(plane, oracle, "oom-surge", tmp_path, fix_lands_after=FIX_LANDS_AFTER) as (
            drill, laid, config):
        config["webhook"] = {
            "workers": 1, "sweep_interval": "1s",
            "routes": [{"playbook": "oom-surge", "alertname": "VllmOomSurge", "params": {"observe": "10s",
                                                                                         "restore_observe": "10s"}}],
            "policy": {"unattended": {"oom-surge": REMEDIATIONS}}}
        (tmp_path / "runbook.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        # This server serves the bundled oom-surge alone: the others need what it is not given (an SSH inventory).
        (tmp_path / "playbooks").mkdir()
        (tmp_path / "playbooks" / "oom-surge.yaml").write_bytes((PLAYBOOKS / "oom-surge.yaml").read_bytes())
        try:
            replica = serving.start(tmp_path, "a", config["kubernetes"]["kubeconfig"], namespace="llm")
            serving.wait_healthy(replica, timeout=60)
            stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")
            assert serving.deliver(replica.url, am_group(namespace="llm", starts_at=stamp), within=30) == 202

            def finished() -> list:
                paths = list(journals.journal_paths(replica.state))
                events = journals.read_journal(paths[0]).events if len(paths) == 1 else []
                return events if events and events[-1].type == ev.RUN_FINISHED else []

            serving.wait_until(lambda: bool(finished()), "the webhook's run of oom-surge to finish", timeout=180)
            events = finished()
            done = objects.settled(plane, "llm", "statefulset", "vllm-server", timeout=120)
        finally:
            if replica is not None:
                serving.stop([replica])
    log = replica.log.read_text(errors="replace")[-3000:]
    assert events[-1].data["outcome"] == drill.result.outcome == "resolved", log
    applied = [e.step for e in events if e.type == ev.ACTION_APPLIED]
    assert applied == [e.step for e in drill.events if e.type == ev.ACTION_APPLIED] == [
        "scale-down", "lower-max-model-len", "restore-capacity"]
    assert [e.data["by"] for e in events if e.type == ev.ACTION_APPLIED] == ["webhook policy (unattended)"] * 3, log
    # The real controller rolled the lowered limit out, and made the replicas brought back with it.
    assert done["spec"]["replicas"] == 3
    assert "--max-model-len=6635" in done["spec"]["template"]["spec"]["containers"][0]["args"]
