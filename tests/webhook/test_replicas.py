"""Two `runbook serve --coordination kubernetes` processes on one test API server, the same
deliveries sent to both (and repeated): each incident is acted on once.

The replicas are the real CLI in processes of their own, each with its own state directory, so
nothing but the Kubernetes API is shared. The API server's audit log and the StatefulSets prove
the world changed once per incident; the two journals prove one run applied it.
"""

from __future__ import annotations

import concurrent.futures
import time

import yaml

from runbook.backends.kubernetes.claims import claim_name
from tests.kubernetes import world
from tests.webhook import replicas as serving
from tests.webhook.helpers import am_group

INCIDENTS = 6


def test_two_replicas_receiving_the_same_deliveries_act_once_per_incident(k8s, kubeconfig, tmp_path):
    names = [f"vllm-{n}" for n in range(INCIDENTS)]
    k8s.apply(*[world.workload("StatefulSet", name, replicas=3, labels={"app": name}) for name in names])
    serving.write_scale_playbook(tmp_path, "StatefulSet")
    (tmp_path / "runbook.yaml").write_text(yaml.safe_dump({
        "kubernetes": {"request_timeout": 5, "connect_timeout": 2, "retries": 2, "max_retry_wait": 5},
        "webhook": {"workers": 2, "sweep_interval": "1s",
                    "policy": {"unattended": {serving.PLAYBOOK: ["scale-down"]}}}}))

    started = time.monotonic()
    replicas = [serving.start(tmp_path, name, kubeconfig, namespace="llm") for name in ("a", "b")]
    try:
        for replica in replicas:
            serving.wait_healthy(replica)
        bodies = [am_group(fingerprint=f"{n:016x}", labels={"app": name}) for n, name in enumerate(names)]
        # Every delivery twice to each replica, all at once: four senders racing per incident.
        sends = [(r.url, body) for body in bodies for r in replicas for _ in range(2)]
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(lambda s: serving.deliver(*s), sends))
        assert all(s in (200, 202) for s in statuses), statuses
        assert statuses.count(202) == INCIDENTS, statuses  # one acceptance per incident, the rest duplicates

        def all_scaled() -> bool:
            return all(k8s.get("StatefulSet", "llm", n)["spec"]["replicas"] == 1 for n in names)

        serving.wait_until(all_scaled, "every StatefulSet to be scaled down")
        time.sleep(2.5)  # two sweeps more: a second run would show by now
        # The same deliveries again, later: both replicas still say duplicate.
        for body in bodies:
            for replica in replicas:
                assert serving.deliver(replica.url, body) == 200
    finally:
        serving.stop(replicas)
    assert time.monotonic() - started < 90

    # The world: one real scale per StatefulSet, through the API, by runbook's ServiceAccount.
    scales = [s for s in k8s.seen if s.resource == "statefulsets/scale" and s.method == "PATCH" and not s.dry_run
              and 200 <= s.code < 300]
    assert sorted(s.name for s in scales) == sorted(names), scales

    # The journals: each incident is in one replica's journal only, with one run that applied it.
    runs, applied = serving.runs_and_applies(replicas)
    assert len(runs) == INCIDENTS and all(len(where) == 1 for where in runs.values()), runs
    assert sorted(applied) == sorted(f"llm/statefulset/{n}" for n in names), applied
    assert all(len(where) == 1 for where in applied.values()), applied
    print(f"\nreplicas: runs per replica {sorted(w[0] for w in runs.values())}, "
          f"{len(sends)} sends in {time.monotonic() - started:.1f}s")

    # The claims are committed Leases naming their incident; the incident locks were released.
    leases = {lease["metadata"]["name"]: lease for lease in k8s.objects("Lease")}
    claims = [lease for lease in leases.values() if lease["metadata"]["name"].startswith("runbook-seen-")]
    assert claims and all(c["metadata"]["annotations"]["runbook/state"] == "committed" for c in claims)
    assert {c["spec"]["holderIdentity"] for c in claims} <= {"replica-a", "replica-b"}
    assert not [n for n in leases if n.startswith("runbook-incident-")], "an incident lock was left behind"
    assert len(claims) == 2 * INCIDENTS  # the alert's event key and its incident, each claimed once
    assert {claim_name(c["metadata"]["annotations"]["runbook/key"]) for c in claims} == {c["metadata"]["name"] for c in claims}
