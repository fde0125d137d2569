"""`runbook serve` (the webhook server) and `runbook approve` (a human says yes to a proposal).

Both keep their heavy imports (starlette, uvicorn, prometheus-client) inside the command body,
so `runbook --help` stays fast. Secrets come only from the environment or files, never flags.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import click

from runbook import settings
from runbook.errors import InvalidInput, Refused, RunbookError

LOOPBACK = {"127.0.0.1", "::1", "localhost"}


def load_playbooks(paths: tuple[str, ...]):
    from runbook.loading import validation
    from runbook.files.problems import format_report
    from runbook.actions import load_builtin

    registry = load_builtin()
    books, problems = {}, []
    for path in validation.discover(paths or validation.default_paths()):
        loaded = validation.load_playbook_file(path, registry)
        if loaded.playbook is None or loaded.problems:
            problems.append(format_report(list(loaded.problems), file_label=loaded.file))
        elif loaded.playbook.name in books:
            problems.append(f"{path}: a second playbook named {loaded.playbook.name!r}")
        else:
            books[loaded.playbook.name] = loaded.playbook
    if problems:
        raise InvalidInput("\n".join(problems))
    if not books:
        raise InvalidInput("no playbooks found; pass --playbooks DIR")
    return list(books.values())


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; loopback unless a proxy with TLS sits in front.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(1, 65535))
@click.option("--playbooks", "playbook_paths", multiple=True, type=click.Path(exists=True),
              help="Playbook files or folders (repeatable; default: the bundled ones and ./playbooks).")
@click.option("--pagerduty-secret-file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="File with the PagerDuty signing secret(s), one a line [else env RUNBOOK_PAGERDUTY_SECRET].")
@click.option("--alertmanager-token-file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="File with the Alertmanager bearer token(s) [else env RUNBOOK_ALERTMANAGER_TOKEN].")
@click.option("--operator-token-file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="File of 'NAME TOKEN' lines for `runbook approve` [else env RUNBOOK_OPERATOR_TOKEN].")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Config file (default: $RUNBOOK_CONFIG, ./runbook.yaml, ~/.config/runbook/config.yaml).")
@click.option("--prometheus-url", envvar="RUNBOOK_PROMETHEUS_URL", default=None,
              help="Prometheus base URL [env RUNBOOK_PROMETHEUS_URL].")
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None, type=click.Path(dir_okay=False),
              help="kubeconfig file [env KUBECONFIG].")
@click.option("--context", "kube_context", envvar="RUNBOOK_KUBE_CONTEXT", default=None,
              help="kubeconfig context to use.")
@click.option("--in-cluster", is_flag=True, default=False, help="Use the pod's service account.")
@click.option("--coordination", type=click.Choice(["local", "kubernetes"]), envvar="RUNBOOK_COORDINATION",
              default="local", show_default=True,
              help="Where dedupe and the per-incident lock live: this server's state dir (one replica), or "
                   "Leases in the Kubernetes API so several replicas behind one Service act once "
                   "[env RUNBOOK_COORDINATION].")
@click.option("--coordination-namespace", envvar="RUNBOOK_COORDINATION_NAMESPACE", default=None,
              help="Namespace of the coordination Leases (default: kubernetes.lock_namespace, else the pod's "
                   "namespace) [env RUNBOOK_COORDINATION_NAMESPACE].")
@click.option("--replica-id", envvar="RUNBOOK_REPLICA_ID", default=None,
              help="This replica's stable name in the shared claims (default: the host name, i.e. the pod name) "
                   "[env RUNBOOK_REPLICA_ID].")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True)
def serve(host: str, port: int, playbook_paths: tuple[str, ...], pagerduty_secret_file: str | None,
          alertmanager_token_file: str | None, operator_token_file: str | None, config_path: str | None,
          prometheus_url: str | None, kubeconfig: str | None, kube_context: str | None, in_cluster: bool,
          coordination: str, coordination_namespace: str | None, replica_id: str | None, log_level: str) -> None:
    """Receive PagerDuty (V3, signed) and Alertmanager (v4) webhooks and run the matching playbooks.

    Each delivery is verified, journaled and deduplicated before the 2xx; runs happen in the
    background. Diagnostics always run; a change is applied only where the config's
    `webhook.policy.unattended` allows that step, and is otherwise proposed for `runbook approve`.

    \b
    Paths:
      POST /webhooks/alertmanager   Alertmanager v4 (Authorization: Bearer TOKEN)
      POST /webhooks/pagerduty      PagerDuty V3 (X-PagerDuty-Signature)
      GET  /healthz, /readyz, /metrics
      GET  /proposals, /proposals/INCIDENT/STEP; POST /proposals/INCIDENT/STEP/approve
    """
    import uvicorn

    from runbook.actions import load_builtin
    from runbook.cli.connect import Connection, close_world, real_world
    from runbook.cli.preflight import check_serve
    from runbook.cli.state import state_directory
    from runbook.config import load_config
    from runbook.webhook.app import create_app
    from runbook.webhook.service import Service
    from runbook.webhook.settings import WebhookConfig, load_secrets

    config = load_config(config_path)
    webhook = config.section_model("webhook", WebhookConfig)
    secrets = load_secrets(pagerduty_file=pagerduty_secret_file, alertmanager_file=alertmanager_token_file,
                           operator_file=operator_token_file)
    if not secrets.pagerduty and not secrets.alertmanager:
        raise click.UsageError("nothing to receive: set RUNBOOK_PAGERDUTY_SECRET or RUNBOOK_ALERTMANAGER_TOKEN "
                               "(or pass --pagerduty-secret-file / --alertmanager-token-file)")
    books = load_playbooks(playbook_paths)
    state = state_directory()  # refused before anything connects or listens
    if host not in LOOPBACK:
        click.echo(f"warning: listening on {host}; put a TLS-terminating proxy in front of it", err=True)
    world = real_world(config, Connection(prometheus_url, kubeconfig, kube_context, in_cluster, server_mode=True))
    try:
        shared = make_coordination(coordination, world.cluster, namespace=coordination_namespace, replica=replica_id)
        check_serve(books, world, load_builtin())  # refused before it listens: never a 202 for what cannot run
        service = Service(config=webhook, secrets=secrets, state=state, world=world, playbooks=books,
                          coordination=shared, namespaces=config.namespaces())
        click.echo(f"runbook serve: {len(books)} playbook(s), state {state}, "
                   f"coordination {describe_coordination(shared)}, http://{host}:{port}; receiving "
                   f"{_receiving(secrets)}", err=True)
        uvicorn.run(create_app(service), host=host, port=port, log_level=log_level, lifespan="on")
    finally:
        close_world(world)


SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def make_coordination(kind: str, cluster, *, namespace: str | None, replica: str | None):
    """None (local: the state dir decides) or the Kubernetes coordination on the connected cluster."""
    import socket

    from runbook.backends.kubernetes.cluster import KubernetesCluster
    from runbook.backends.kubernetes.claims import KubernetesCoordination

    if kind == "local":
        return None
    if not isinstance(cluster, KubernetesCluster):
        raise click.UsageError("--coordination kubernetes needs a cluster: pass --in-cluster, or --kubeconfig and "
                               "--context (or the config file's kubernetes: section)")
    if namespace is None:
        namespace = cluster.settings.lock_namespace
    if namespace is None and SERVICE_ACCOUNT_NAMESPACE.is_file():
        namespace = SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip() or None
    if namespace is None:
        raise click.UsageError("--coordination kubernetes: say where its Leases live with --coordination-namespace "
                               "(or RUNBOOK_COORDINATION_NAMESPACE, or kubernetes.lock_namespace)")
    identity = replica or socket.gethostname()
    return KubernetesCoordination(cluster, namespace=namespace, identity=identity)


def describe_coordination(shared) -> str:
    if shared is None:
        return "local"
    return f"kubernetes (Leases in {shared.namespace}, replica {shared.identity})"


def _operator_token(token_file: str | None) -> str:
    raw = Path(token_file).read_text(encoding="utf-8") if token_file else settings.environment().get("RUNBOOK_OPERATOR_TOKEN", "")
    entries = [e.strip() for e in raw.replace("\n", ",").split(",") if e.strip() and not e.strip().startswith("#")]
    if not entries:
        raise click.UsageError("no operator token: set RUNBOOK_OPERATOR_TOKEN or pass --token-file")
    return entries[0].split(" ")[-1]  # `NAME TOKEN` or a bare token


def _call(server: str, method: str, path: str, token: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(server.rstrip("/") + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read() or b"{}")
        except ValueError:
            return exc.code, {"error": exc.reason}
    except (urllib.error.URLError, OSError) as exc:
        raise RunbookError(f"cannot reach the runbook server at {server}: {getattr(exc, 'reason', exc)}") from None


@click.command()
@click.argument("incident")
@click.argument("step")
@click.option("--server", envvar="RUNBOOK_SERVER", default="http://127.0.0.1:8080", show_default=True,
              help="The `runbook serve` base URL [env RUNBOOK_SERVER].")
@click.option("--operator", "operator_name", default=None, help="Your name, recorded as the approver (default: local user).")
@click.option("--token-file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="File holding your operator token [else env RUNBOOK_OPERATOR_TOKEN].")
@click.option("--wait", type=click.FloatRange(0, 3600), default=60.0, show_default=True,
              help="Seconds to wait for the approved step's result (0: do not wait).")
def approve(incident: str, step: str, server: str, operator_name: str | None, token_file: str | None,
            wait: float) -> None:
    """Approve the proposed STEP of INCIDENT: the server re-checks every guard, then applies it."""
    import time

    from runbook.engine.runner import default_operator_name

    token = _operator_token(token_file)
    where = f"/proposals/{urllib.parse.quote(incident, safe='')}/{urllib.parse.quote(step, safe='')}"
    status, body = _call(server, "POST", where + "/approve", token, {"operator": operator_name or default_operator_name()})
    if status != 202:
        message = body.get("error", f"HTTP {status}")
        if status in (401, 404, 400, 409):
            raise InvalidInput(f"not approved: {message}")
        raise RunbookError(f"not approved: {message}")
    click.echo(f"approved {step} of {incident} as {body.get('by')}; the server re-checks every guard before applying")
    deadline = time.monotonic() + wait
    state = "approved"
    while wait and state == "approved" and time.monotonic() < deadline:
        time.sleep(0.5)
        status, body = _call(server, "GET", where, token)
        state = body.get("state", state) if status == 200 else state
    if state == "approved":
        click.echo("still running; follow it with `runbook incidents`" if wait else "queued")
        return
    click.echo(f"{state}: {body.get('result') or ''}".rstrip(": "))
    if state in ("refused", "closed", "expired"):
        raise Refused("approval", f"{step} was {state}: {body.get('result') or ''}")
    if state == "failed":
        raise RunbookError(f"{step} failed: {body.get('result') or ''}")


def _receiving(secrets) -> str:
    """Which senders are enabled, in words, and how many approval tokens: never a secret."""
    enabled = [name for name, on in (("Alertmanager at /webhooks/alertmanager", secrets.alertmanager),
                                     ("PagerDuty at /webhooks/pagerduty", secrets.pagerduty)) if on]
    approvals = f"{len(secrets.operators)} operator token(s) for approvals" if secrets.operators else "no approvals"
    return f"{' and '.join(enabled) or 'no webhook (set a secret or token)'}; {approvals}"
