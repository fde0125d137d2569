"""deploy/webhook.yaml holds together: two replicas with Kubernetes coordination, flags `runbook
serve` accepts, runbook's ServiceAccount from deploy/rbac.yaml, a Service that selects the pods,
a config the server loads, and a Secret of placeholders only."""

from __future__ import annotations

from pathlib import Path

import yaml

from runbook.cli.serve import serve
from runbook.webhook.settings import WebhookConfig, load_secrets
from tests.standin.apiserver.rbac import load_policy

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _docs() -> dict[str, dict]:
    docs = [d for d in yaml.safe_load_all((DEPLOY / "webhook.yaml").read_text()) if d]
    return {d["kind"]: d for d in docs}


def test_the_deployment_runs_two_coordinated_replicas_as_runbooks_service_account():
    docs = _docs()
    assert set(docs) == {"Secret", "ConfigMap", "Deployment", "Service"}
    deployment = docs["Deployment"]
    pod = deployment["spec"]["template"]
    assert deployment["spec"]["replicas"] == 2
    assert pod["spec"]["serviceAccountName"] == "runbook"
    assert load_policy(DEPLOY / "rbac.yaml", service_account="runbook", namespace="llm").allows(
        "create", "coordination.k8s.io", "leases", deployment["metadata"]["namespace"], "runbook-seen-x")
    container = pod["spec"]["containers"][0]
    known = {flag for param in serve.params for flag in param.opts}
    args = container["args"]
    assert args[0] == "serve" and all(a.split("=")[0] in known for a in args[1:]), args
    assert "--coordination=kubernetes" in args and "--in-cluster" in args
    env = {e["name"]: e for e in container["env"]}
    assert env["RUNBOOK_REPLICA_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert env["RUNBOOK_STATE_DIR"]["value"] in mounts
    service = docs["Service"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["targetPort"] in {p["name"] for p in container["ports"]}


def test_the_config_loads_and_the_secret_holds_placeholders_only(tmp_path):
    docs = _docs()
    config = yaml.safe_load(docs["ConfigMap"]["data"]["runbook.yaml"])
    WebhookConfig.model_validate(config["webhook"])
    values = docs["Secret"]["stringData"]
    assert set(values) == {"pagerduty-secret", "alertmanager-token", "operator-tokens"}
    assert all("REPLACE-ME" in value for value in values.values())
    for name, value in values.items():
        (tmp_path / name).write_text(value)
    load_secrets({}, pagerduty_file=tmp_path / "pagerduty-secret", alertmanager_file=tmp_path / "alertmanager-token",
                 operator_file=tmp_path / "operator-tokens")  # the shapes the server reads
