"""Two `runbook serve --coordination kubernetes` replicas on the real control plane, as
deploy/webhook.yaml runs them: the same Alertmanager deliveries sent to both, twice, at once. The
claims are real Leases judged by the real apiserver's optimistic concurrency, with exactly the
permissions of deploy/rbac.yaml; each incident must be acted on once.

The apiserver's audit log (what a cluster's auditor reads) proves the world changed once per
incident; the two journals prove one run applied it; kubectl reads the Leases they left.
"""

from __future__ import annotations

import concurrent.futures
import json
import time

import yaml

from tests.controlplane import identity, objects
from tests.controlplane.identity import runbook_user
from tests.webhook import replicas as serving
from tests.webhook.helpers import am_group

INCIDENTS = 4


def test_two_replicas_on_the_real_leases_act_once_per_incident(plane, namespace, tmp_path):
    names = [f"vllm-{n}" for n in range(INCIDENTS)]
    plane.apply(*(objects.deployment(namespace, name, replicas=2) for name in names))
    for name in names:
        objects.settled(plane, namespace, "deployment", name)
    kubeconfig = identity.runbook_kubeconfig(plane, namespace, tmp_path / "kubeconfig")
    serving.write_scale_playbook(tmp_path, "Deployment")
    (tmp_path / "runbook.yaml").write_text(yaml.safe_dump({
        "kubernetes": {"namespaces": [namespace], "request_timeout": 10, "connect_timeout": 5, "retries": 2,
                       "max_retry_wait": 5},
        "webhook": {"workers": 2, "sweep_interval": "1s",
                    "policy": {"unattended": {serving.PLAYBOOK: ["scale-down"]}}}}))

    replicas = [serving.start(tmp_path, name, kubeconfig, namespace=namespace) for name in ("a", "b")]
    try:
        for replica in replicas:
            serving.wait_healthy(replica, timeout=60)
        bodies = [am_group(fingerprint=f"{n:016x}", namespace=namespace, labels={"app": name})
                  for n, name in enumerate(names)]
        # Every delivery twice to each replica, all at once: four senders racing per incident.
        sends = [(r.url, body) for body in bodies for r in replicas for _ in range(2)]
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(lambda s: serving.deliver(*s, within=60), sends))
        assert all(s in (200, 202) for s in statuses), statuses
        assert statuses.count(202) == INCIDENTS, statuses  # one acceptance per incident, the rest duplicates

        def all_scaled() -> bool:
            return all(plane.get("deployment", n, namespace=namespace)["spec"]["replicas"] == 1 for n in names)

        serving.wait_until(all_scaled, "every Deployment to be scaled down", timeout=90)
        time.sleep(2.5)  # two sweeps more: a second run would show by now
        for body in bodies:  # the same deliveries again, later: both replicas still say duplicate
            for replica in replicas:
                assert serving.deliver(replica.url, body, within=60) == 200
    finally:
        serving.stop(replicas)
    logs = "\n".join(f"--- {r.name}\n{r.log.read_text(errors='replace')[-2000:]}" for r in replicas)

    # The world, as the audit log has it: one scale per Deployment, by runbook's service account.
    audit = plane.audit(namespace)
    scales = [e for e in audit if e["objectRef"].get("subresource") == "scale" and e["verb"] == "patch"
              and "dryRun" not in e["requestURI"] and 200 <= e["responseStatus"]["code"] < 300]
    assert sorted(e["objectRef"]["name"] for e in scales) == sorted(names), logs
    assert {e["user"]["username"] for e in scales} == {runbook_user(namespace)}
    forbidden = [e for e in audit if e["responseStatus"]["code"] == 403]
    assert not forbidden, [(e["verb"], e["objectRef"]) for e in forbidden]  # deploy/rbac.yaml was enough

    # The journals: each incident is in one replica's journal only, with one run that applied it.
    runs, applied = serving.runs_and_applies(replicas)
    assert len(runs) == INCIDENTS and all(len(where) == 1 for where in runs.values()), runs
    assert sorted(applied) == sorted(f"{namespace}/deployment/{n}" for n in names), applied
    assert all(len(where) == 1 for where in applied.values()), applied

    # The claims, read back by kubectl: committed Leases, one per key, each held by a replica; the
    # incident locks were released.
    leases = {item["metadata"]["name"]: item for item in json.loads(
        plane.kubectl("get", "leases", "-n", namespace, "-o", "json").stdout)["items"]}
    claims = [lease for name, lease in leases.items() if name.startswith("runbook-seen-")]
    assert len(claims) == 2 * INCIDENTS  # the alert's event key and its incident, each claimed once
    assert all(c["metadata"]["annotations"]["runbook/state"] == "committed" for c in claims)
    assert {c["spec"]["holderIdentity"] for c in claims} <= {"replica-a", "replica-b"}
    assert not [n for n in leases if n.startswith("runbook-incident-")], "an incident lock was left behind"
    # Each claim was created once: a racing replica's create was answered 409 AlreadyExists, not a second Lease.
    made = [e["objectRef"]["name"] for e in audit if e["objectRef"]["resource"] == "leases" and e["verb"] == "create"
            and e["responseStatus"]["code"] == 201 and e["objectRef"]["name"].startswith("runbook-seen-")]
    assert sorted(made) == sorted(c["metadata"]["name"] for c in claims)
