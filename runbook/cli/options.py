"""Option bundles shared by the commands that reach real backends.

Precedence everywhere: flag > environment variable > config file > default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click


def _apply(func: Callable[..., Any], options: list[Callable[..., Any]]) -> Callable[..., Any]:
    for option in reversed(options):
        func = option(func)
    return func


def metrics_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--config, --prometheus-url and --namespace: what a command that only reads Prometheus takes."""
    return _apply(func, [
        click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
                     help="Config file (default: $RUNBOOK_CONFIG, ./runbook.yaml, ~/.config/runbook/config.yaml)."),
        click.option("--prometheus-url", envvar="RUNBOOK_PROMETHEUS_URL", default=None,
                     help="Prometheus base URL [env RUNBOOK_PROMETHEUS_URL]."),
        click.option("--namespace", "-n", default=None, help="Namespace (overrides the playbook's `namespace` param)."),
    ])


def connection_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The metrics options and how to reach the cluster: for the commands that may act on it."""
    return metrics_options(_apply(func, [
        click.option("--kubeconfig", envvar="KUBECONFIG", default=None, type=click.Path(dir_okay=False),
                     help="kubeconfig file [env KUBECONFIG]."),
        click.option("--context", "kube_context", envvar="RUNBOOK_KUBE_CONTEXT", default=None,
                     help="kubeconfig context to use; never guessed when several exist."),
        click.option("--in-cluster", is_flag=True, default=False,
                     help="Use the pod's service account instead of a kubeconfig."),
    ]))


def safety_options(func: Callable[..., Any]) -> Callable[..., Any]:
    return _apply(func, [
        click.option("--yes", "-y", is_flag=True, help="Approve confirmation prompts (hard guards still apply)."),
        click.option("--dry-run", is_flag=True, envvar="RUNBOOK_DRY_RUN",
                     help="Run diagnostics; apply nothing [env RUNBOOK_DRY_RUN]."),
        click.option("--operator", "operator_name", default=None,
                     help="Name recorded as the approver (default: the local user)."),
    ])
