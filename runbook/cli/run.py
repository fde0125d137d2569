"""`runbook run PLAYBOOK`: run one playbook against the real backends, guarded and journaled.

Params come from the playbook's defaults, then `--param k=v`; an alert file (Alertmanager v4 or
a plain `{name, labels}` document) fills params through the playbook's `match.labels`. Every value
from outside is screened (`intake_values`) and the namespace checked against the allow-list before
any backend is built: a bad one exits 3 (invalid) or 4 (refused) with the label or flag named.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from runbook.cli.complete import playbook_names
from runbook.cli.options import connection_options, safety_options
from runbook.text import intake_values
from runbook.cli.output import output_option, print_json, progress_console
from runbook.errors import InvalidInput


def parse_params(pairs: tuple[str, ...], option: str = "--param") -> dict[str, str]:
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not key=value", param_hint=option)
        params[key] = value
    return params


def gather_params(book, alert, pairs: tuple[str, ...], namespace: str | None) -> tuple[dict[str, str], dict[str, str]]:
    """(params from the alert, `-p` and --namespace, each screened; where each came from). Flags win.

    A param the playbook does not declare is an error (exit 3) with a suggestion, never ignored.
    """
    values: dict[str, str] = {}
    sources: dict[str, str] = {}
    if alert is not None:
        values, sources = intake_values.params_from_labels(book.match.labels, alert.labels)
    for key, value in parse_params(pairs).items():
        values[key] = intake_values.screen_param(key, value)
        sources[key] = f"--param {key}"
    if namespace:
        values["namespace"] = intake_values.screen_option("--namespace", namespace)
        sources["namespace"] = "--namespace"
    intake_values.check_known_params(book.name, book.params, sources)
    return values, sources


def resolve_playbook(name_or_path: str):
    from runbook.loading import validation
    from runbook.actions import load_builtin

    registry = load_builtin()
    path = Path(name_or_path)
    if not path.is_file():
        candidates = [d / f"{name_or_path}.yaml" for d in validation.default_paths()]
        path = next((c for c in candidates if c.is_file()), None)  # type: ignore[assignment]
        if path is None:
            from runbook.files.problems import did_you_mean

            known = [f.stem for f in validation.discover(validation.default_paths())]
            raise InvalidInput(f"no playbook {name_or_path}: give a file, or a name from `runbook list`; "
                               + did_you_mean(name_or_path, known))
    loaded = validation.load_playbook_file(path, registry)
    if loaded.playbook is None:
        from runbook.files.problems import format_report

        raise InvalidInput(format_report(list(loaded.problems), file_label=loaded.file))
    return loaded.playbook


def alert_from_file(path: str):
    from runbook.model.alert import Alert

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8") if path != "-" else click.get_text_stream("stdin").read())
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"cannot read the alert {path}: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("alerts"), list) and data["alerts"]:
        first = data["alerts"][0]
        labels = {str(k): str(v) for k, v in (first.get("labels") or {}).items()}
        return Alert("alertmanager", labels.get("alertname", ""), labels,
                     {str(k): str(v) for k, v in (first.get("annotations") or {}).items()},
                     status=str(first.get("status", "firing")), fingerprint=str(first.get("fingerprint", "")))
    if isinstance(data, dict) and "name" in data:
        return Alert("manual", str(data["name"]), {str(k): str(v) for k, v in (data.get("labels") or {}).items()})
    raise InvalidInput(f"{path}: expected an Alertmanager webhook payload or {{name, labels}}")


@click.command()
@click.argument("playbook", shell_complete=playbook_names)
@click.option("--param", "-p", "params", multiple=True, help="A playbook param, key=value (repeatable).")
@click.option("--alert", "alert_path", default=None, help="An alert JSON file ('-' for stdin) whose labels fill params.")
@connection_options
@safety_options
@output_option
def run(playbook: str, params: tuple[str, ...], alert_path: str | None, config_path: str | None,
        prometheus_url: str | None, kubeconfig: str | None, kube_context: str | None, in_cluster: bool,
        namespace: str | None, yes: bool, dry_run: bool, operator_name: str | None, output: str) -> None:
    """Run PLAYBOOK (a name from `runbook list`, or a file) against the real cluster."""
    from runbook.actions import load_builtin
    from runbook.cli.connect import Connection, close_world, real_world
    from runbook.cli.preflight import check_run
    from runbook.cli.running import result_document, run_playbook
    from runbook.config import load_config
    from runbook.engine.namespaces import check_run_namespace

    book = resolve_playbook(playbook)
    alert = alert_from_file(alert_path) if alert_path else None
    values, sources = gather_params(book, alert, params, namespace)  # a misspelled param: before anything else
    config = load_config(config_path)
    check_run_namespace(book.params, values, config.namespaces(), sources=sources)  # before any backend
    world = real_world(config, Connection(prometheus_url, kubeconfig, kube_context, in_cluster))
    try:
        check_run(book, world, load_builtin())  # what is missing: said before an incident is opened
        result, journal = run_playbook(book, world, alert=alert, params=values, yes=yes, dry_run=dry_run,
                                       operator_name=operator_name, live=output == "text",
                                       namespaces=config.namespaces())
    finally:
        close_world(world)
    if output == "json":
        print_json(result_document(result, journal))
    else:
        progress_console().print(f"journal: {journal}", markup=False, highlight=False)
    raise SystemExit(result.exit_code)
