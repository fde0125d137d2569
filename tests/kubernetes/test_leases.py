"""Target locks as Leases: taken, refused naming the holder, renewed, released, taken over when
expired, and two processes racing for one target: exactly one acts."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import textwrap
import time

import pytest

from runbook.errors import Refused
from runbook.backends.kubernetes.leases import LeaseLocks, lease_name
from tests.kubernetes.apiserver.server import REPO
from tests.kubernetes.conftest import connect_cluster

TARGET = "llm/statefulset/vllm-server"


def test_a_held_lock_refuses_naming_the_holder_and_is_released_after(k8s, cluster):
    locks = LeaseLocks(cluster)
    other = LeaseLocks(cluster)
    with locks.hold(TARGET, holder="alice incident inc-1"):
        lease = k8s.get("Lease", "llm", lease_name(TARGET))
        assert lease["spec"]["holderIdentity"].startswith("alice incident inc-1 (")
        assert lease["metadata"]["annotations"]["runbook/target"] == TARGET
        with pytest.raises(Refused, match=r"locked by alice incident inc-1 .*Lease llm/runbook-llm-statefulset") as refused:
            with other.hold(TARGET, holder="bob incident inc-2"):
                pytest.fail("a second holder got the lock")
        assert refused.value.guard == "lock"
        with other.hold("llm/deployment/api-gateway", holder="bob incident inc-2"):
            pass  # another target is another lock
    assert k8s.find("Lease", "llm", lease_name(TARGET)) is None
    with other.hold(TARGET, holder="bob incident inc-2"):
        pass


def test_the_lease_is_renewed_while_held(k8s, cluster):
    locks = LeaseLocks(cluster, duration_seconds=1, skew_seconds=0)
    with locks.hold(TARGET, holder="alice"):
        first = k8s.get("Lease", "llm", lease_name(TARGET))["spec"]["renewTime"]
        time.sleep(1.6)  # past the lease duration: only renewals keep it
        assert k8s.get("Lease", "llm", lease_name(TARGET))["spec"]["renewTime"] > first
        with pytest.raises(Refused, match="locked by alice"):
            with LeaseLocks(cluster, duration_seconds=1, skew_seconds=0).hold(TARGET, holder="bob"):
                pass


def test_an_expired_lease_of_a_crashed_holder_is_taken_over(k8s, cluster):
    stale = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    k8s.apply({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": lease_name(TARGET), "namespace": "llm"},
               "spec": {"holderIdentity": "crashed-run", "leaseDurationSeconds": 60, "acquireTime": stale,
                        "renewTime": stale, "leaseTransitions": 2}})
    with LeaseLocks(cluster).hold(TARGET, holder="alice"):
        spec = k8s.get("Lease", "llm", lease_name(TARGET))["spec"]
        assert spec["holderIdentity"].startswith("alice (") and spec["leaseTransitions"] == 3


def test_the_lock_namespace_can_be_set(k8s, kubeconfig):
    cluster = connect_cluster(kubeconfig, lock_namespace="llm")
    try:
        with LeaseLocks(cluster).hold("pods/vllm-server-0", holder="alice"):
            assert k8s.find("Lease", "llm", lease_name("pods/vllm-server-0")) is not None
    finally:
        cluster.close()


def test_an_unreachable_lease_api_refuses_rather_than_acting_unlocked(k8s, cluster):
    k8s.inject(method="POST", path=r"/leases$", status=403)
    with pytest.raises(Refused, match="cannot take the Lease.*refusing to act without the lock"):
        with LeaseLocks(cluster).hold(TARGET, holder="alice"):
            pytest.fail("acted without the lock")


RACER = textwrap.dedent("""
    import pathlib, sys, time
    sys.path.insert(0, {repo!r})
    from runbook.backends.kubernetes.connect import connect
    from runbook.config import Config
    from runbook.errors import Refused
    from runbook.backends.kubernetes.leases import LeaseLocks

    name, other = sys.argv[1], sys.argv[2]
    cluster = connect(Config(None, {{"kubernetes": {{}}}}), kubeconfig={kubeconfig!r}, context="runbook-test")
    # Both start racing together: each says it is ready and waits for the other.
    pathlib.Path({barrier!r}, name).touch()
    deadline = time.monotonic() + 20
    while not pathlib.Path({barrier!r}, other).exists() and time.monotonic() < deadline:
        time.sleep(0.001)
    try:
        with LeaseLocks(cluster).hold({target!r}, holder=name):
            print("acted", flush=True)
            time.sleep(0.5)  # the other racer, started together, has tried by now
    except Refused as exc:
        print("refused:", exc.reason, flush=True)
    cluster.close()
""")


def test_two_processes_racing_for_one_target_exactly_one_acts(k8s, kubeconfig, tmp_path):
    script = tmp_path / "racer.py"
    script.write_text(RACER.format(repo=str(REPO), kubeconfig=str(kubeconfig), barrier=str(tmp_path), target=TARGET))
    racers = [subprocess.Popen([sys.executable, str(script), name, other], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
              for name, other in (("run-a", "run-b"), ("run-b", "run-a"))]
    outputs = []
    for racer in racers:
        out, err = racer.communicate(timeout=40)
        assert racer.returncode == 0, err
        outputs.append(out.strip())
    assert sorted(o.split(":")[0] for o in outputs) == ["acted", "refused"], outputs
    winner = "run-a" if outputs[0] == "acted" else "run-b"
    assert f"locked by {winner} (" in next(o for o in outputs if o.startswith("refused"))
    creates = [s.code for s in k8s.seen if s.resource == "leases" and s.verb == "create"]
    assert sorted(creates) == [201, 409]
