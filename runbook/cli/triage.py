"""`runbook triage`, `runbook signals`, `runbook rules`: Prometheus → which SOP scenario, and back.

Triage asks every playbook's `detect` of Prometheus, shows the SOP's step-1 views and offers
the top match; `signals` shows (and checks) the signal catalog; `rules` exports the detect
conditions as alerting rules. Heavy imports stay inside the commands.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import click

from runbook import settings
from runbook.cli.options import connection_options, metrics_options, safety_options
from runbook.cli.output import output_option, print_json, stdout_console
from runbook.errors import ExitCode, InvalidInput

_AGO = re.compile(r"^-?\s*(?P<d>[0-9][0-9a-z.]*)(\s+ago)?$")

TRIAGE_HELP = """Ask Prometheus which playbook's condition holds, and show the SOP's step-1 views.

Evaluates every playbook's `detect` (PATHS, default: the bundled ones and ./playbooks) at now,
or at --at to replay a past moment; a condition fires once it has held for its `for:` window.
Ranks the firing ones (severity, then what began first) and offers the top one; --run runs it
(or --playbook NAME), guarded and journaled like `runbook run`.

With a cluster (--kubeconfig, --context, --in-cluster or the config file's `kubernetes:`), a
signal that has no source here but can be read from logs (a stock vLLM's CUDA out-of-memory
errors, where no log pipeline counts them) is read from the playbook workload's pods: their
current and previous containers' logs over the last 5 minutes, bounded in pods and bytes, the row
saying so ("from logs, 3 pods, last 5m").

\b
Exit codes without --run:
   0  every playbook evaluated, nothing fires
  10  something fires
  11  Prometheus could not be read (for some playbook, and nothing fires), or the
      pods' logs standing in for a missing source could not be read whole
  12  a signal a playbook needs has no source here: no exporter provides it (and
      nothing fires or is unseen); `runbook signals --check` lists every signal's sources
   3  a playbook is invalid, so it was not evaluated (and nothing of the above)
The first line says which, and why.
With --run: the run's exit code (0 resolved, 1 failed, 4 refused, …).
"""


def parse_at(text: str | None, now: dt.datetime | None = None) -> dt.datetime:
    """ISO 8601 (naive means UTC), unix seconds, or a duration ago (`15m`, `-2h`, `1h ago`)."""
    now = (now or dt.datetime.now(dt.timezone.utc)).replace(microsecond=0)
    if not text:
        return now
    value = text.strip()
    if re.fullmatch(r"\d{9,11}(\.\d+)?", value):
        return dt.datetime.fromtimestamp(float(value), dt.timezone.utc).replace(microsecond=0)
    ago = _AGO.match(value)
    if ago and not re.fullmatch(r"\d{4}-.*", value):
        from runbook.model.duration import parse_duration

        try:
            return now - dt.timedelta(seconds=parse_duration(ago.group("d")))
        except ValueError:
            pass
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a time: give ISO 8601 (2026-03-14T03:12:07Z), unix seconds, "
                                 f"or how long ago (15m, 2h)", param_hint="--at") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.timezone.utc)
    return parsed.astimezone(dt.timezone.utc).replace(microsecond=0)


def _load_playbooks(paths: tuple[str, ...], catalog=None) -> tuple[list, list]:
    """(the valid playbooks, each invalid one as NotEvaluated: its file and first problem); signals are
    checked against `catalog`."""
    from runbook.cli.catalog import load_all
    from runbook.triage.evaluate import NotEvaluated

    results = load_all(paths, catalog=catalog)
    valid = [r.playbook for r in results if r.playbook is not None]
    invalid = [NotEvaluated(r.file, _invalid_reason(r.problems)) for r in results if r.playbook is None]
    return valid, invalid


def _invalid_reason(problems) -> str:
    first = problems[0] if problems else None
    where = "  ".join(part for part in (first.location, first.path) if part) if first else ""
    more = f"; {len(problems) - 1} more" if len(problems) > 1 else ""
    detail = f": {where}  {first.message}{more}" if first else ""
    return f"invalid playbook{detail} (`runbook validate` shows every problem and its fix)"


def _metrics(config, prometheus_url: str | None, catalog):
    from runbook.backends.prometheus import client as prometheus

    metrics = prometheus.connect(config, url=prometheus_url, env=settings.environment())
    if metrics is None:
        raise click.UsageError("no Prometheus to ask: give --prometheus-url, set RUNBOOK_PROMETHEUS_URL, or put "
                               "`prometheus: {url: …}` in the config file")
    metrics.catalog = catalog
    return metrics


def _default_namespace(playbooks: list, namespace: str | None) -> str | None:
    if namespace:
        return namespace
    found = [p.params.get("namespace") for p in playbooks if isinstance(p.params.get("namespace"), str)]
    return found[0] if found else None


@click.command(help=TRIAGE_HELP)
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--at", "at_text", default=None, metavar="TIME",
              help="Evaluate at TIME: ISO 8601, unix seconds, or how long ago (15m). Default: now.")
@click.option("--run", "run_it", is_flag=True, help="Run the top firing playbook (or --playbook) after triage.")
@click.option("--playbook", "playbook_name", default=None, metavar="NAME",
              help="With --run: run this playbook instead of the top match.")
@click.option("--profile", default=None, help="Signal profile (default: the config file's, else vllm).")
@click.option("--workload", "workload_ref", default=None, metavar="KIND/NAME",
              help="The vLLM workload (with --namespace and a cluster): its --max-num-seqs for the "
                   "running-batch warning line, and its pods' logs for a signal with no source here "
                   "(default: each playbook's `workload` param).")
@connection_options
@safety_options
@output_option
def triage(paths: tuple[str, ...], at_text: str | None, run_it: bool, playbook_name: str | None,
           profile: str | None, workload_ref: str | None, config_path: str | None, prometheus_url: str | None,
           kubeconfig: str | None, kube_context: str | None, in_cluster: bool, namespace: str | None, yes: bool,
           dry_run: bool, operator_name: str | None, output: str) -> None:
    from runbook.config import load_config
    from runbook.signals.alert_table import load_alert_table
    from runbook.signals.catalog import build_catalog
    from runbook.triage.evaluate import evaluate
    from runbook.triage.views import step_one
    from runbook.triage.warnings import with_warnings

    if run_it and at_text:
        raise click.UsageError("--run acts now; it cannot be combined with --at")
    if playbook_name and not run_it:
        raise click.UsageError("--playbook chooses what --run runs; add --run")
    at = parse_at(at_text)
    config = load_config(config_path)
    catalog = build_catalog(config, profile=profile)
    if workload_ref:  # the server's own --max-num-seqs, for the running-batch line
        from runbook.triage.rules import with_params

        value, note = _max_num_seqs_from(config, workload_ref, namespace, {}, kubeconfig, kube_context, in_cluster)
        catalog = with_params(catalog, {"max_num_seqs": value})
        click.echo(f"note: {note}", err=True)
    playbooks, invalid = _load_playbooks(paths, catalog)
    metrics = _metrics(config, prometheus_url, catalog)
    try:
        params = {"namespace": namespace} if namespace else {}
        report = evaluate(playbooks, metrics, at, params, invalid=invalid)
        report = with_warnings(report, load_alert_table(), metrics, params)  # the SOP's warning lines
        report = _from_logs(report, playbooks, catalog, config, params, workload_ref, kubeconfig, kube_context,
                            in_cluster)
        ns = _default_namespace(playbooks, namespace)
        views = None if report.unavailable else step_one(metrics, report.at, {"namespace": ns} if ns else {},
                                                         report.firing)
    finally:
        metrics.close()
    document = _document(report, views, metrics)
    if not run_it:
        if output == "json":
            print_json(document)
        else:
            _print_report(report, views, metrics)
        raise SystemExit(report.exit_code)
    chosen = _choose(report, playbooks, playbook_name)
    if chosen is None:
        if output == "json":
            print_json({"triage": document, "run": None})
        else:
            _print_report(report, views, metrics)
            if report.unavailable:
                why = "not running anything: Prometheus could not be read, and runbook does not act blind"
            elif report.warnings_firing:
                why = ("only warning lines fire: no playbook's own condition holds, so there is nothing to run "
                       "(each warning names its playbook; run one with --playbook)")
            else:
                why = "nothing fires, so there is nothing to run (name one with --playbook)"
            stdout_console().print(why, markup=False)
        raise SystemExit(report.exit_code)
    if output != "json":
        _print_report(report, views, metrics)
        why = "chosen with --playbook" if playbook_name else "the top match"
        stdout_console().print(f"\nrunning {chosen.name} ({why})" + (", dry run" if dry_run else ""), markup=False)
    finding = next((f for f in report.findings if f.playbook == chosen.name), None)
    _run(chosen, finding, document, config, params, prometheus_url, kubeconfig, kube_context, in_cluster, yes,
         dry_run, operator_name, output)


def _from_logs(report, playbooks: list, catalog, config, params: dict[str, str], workload_ref: str | None,
               kubeconfig: str | None, kube_context: str | None, in_cluster: bool):
    """The report with each signal that has no source here but can be read from the pods' logs read
    so, where a cluster is configured; without one it stays without a source, saying how to read it."""
    import dataclasses

    from runbook.triage.from_logs import each_wanted, read_from_logs, wanted

    if not wanted(report, catalog):
        return report
    from runbook.backends.kubernetes import connect as kubernetes

    cluster = kubernetes.connect(config, kubeconfig=kubeconfig, context=kube_context, in_cluster=in_cluster)
    if cluster is None:
        hint = ("; with a cluster (--kubeconfig, --context or --in-cluster) triage reads it from the vLLM pods' "
                "logs instead")
        return each_wanted(report, catalog, lambda f: dataclasses.replace(f, reason=f.reason + hint))
    try:
        return read_from_logs(report, playbooks, catalog, cluster, now=dt.datetime.now(dt.timezone.utc),
                              params=params, workload=workload_ref)
    finally:
        cluster.close()


def _choose(report, playbooks: list, name: str | None):
    if name is not None:
        found = next((p for p in playbooks if p.name == name), None)
        if found is None:
            from runbook.files.problems import did_you_mean

            raise InvalidInput(f"no playbook {name!r}; {did_you_mean(name, [p.name for p in playbooks])}")
        return found
    if report.unavailable or report.top is None:
        return None
    return next(p for p in playbooks if p.name == report.top.playbook)


def _run(playbook, finding, document: dict[str, Any], config, params: dict[str, str], prometheus_url: str | None,
         kubeconfig: str | None, kube_context: str | None, in_cluster: bool, yes: bool, dry_run: bool,
         operator_name: str | None, output: str) -> None:
    """Run `playbook` as `runbook run` does; `finding`, its triage finding, fills what its detect found
    (a fleet-wide detect's firing node becomes the param)."""
    from runbook.cli import connect
    from runbook.cli.run import gather_params
    from runbook.cli import running
    from runbook.engine.namespaces import check_run_namespace
    from runbook.triage.evaluate import finding_params

    firing = finding is not None and finding.state in ("firing", "pending")
    found = finding_params(playbook, finding) if firing else {}  # the firing node, say
    pairs = tuple(f"{k}={v}" for k, v in found.items())
    params, sources = gather_params(playbook, None, pairs, params.get("namespace"))  # screened, like `runbook run`
    check_run_namespace(playbook.params, params, config.namespaces(), sources=sources)  # before the run's backends
    world = connect.real_world(config, connect.Connection(prometheus_url, kubeconfig, kube_context, in_cluster))
    try:
        result, journal = running.run_playbook(playbook, world, alert=None, params=params, yes=yes, dry_run=dry_run,
                                       operator_name=operator_name, live=output == "text",
                                       namespaces=config.namespaces())
    finally:
        connect.close_world(world)
    if output == "json":
        print_json({"triage": document, "run": running.result_document(result, journal)})
    else:
        stdout_console().print(f"journal: {journal}", markup=False, highlight=False)
    raise SystemExit(result.exit_code)


def _document(report, views, metrics) -> dict[str, Any]:
    from runbook.triage.verdict import headline

    top = report.top
    return {
        "headline": headline(report),
        "at": report.at.isoformat(),
        "prometheus": metrics.url,
        "profile": metrics.catalog.profile,
        "top": top.playbook if top else None,
        "firing": [f.to_json() for f in report.firing],
        "quiet": [f.to_json() for f in report.findings if f.state in ("quiet", "pending")],
        "unknown": [f.to_json() for f in report.of("unknown")],
        "no_source": [f.to_json() for f in report.of("no_source")],
        "not_applicable": [f.to_json() for f in report.of("not_applicable")],
        "skipped": [f.to_json() for f in report.of("skipped")],
        "warnings": [f.to_json() for f in report.warnings],
        "invalid": [i.to_json() for i in report.invalid],
        "views": views,
        "exit_code": report.exit_code,
    }


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "no data"
    return f"{value:.3g}{unit}"


def _ago(seconds: float | None) -> str:
    from runbook.model.duration import format_duration

    return "" if seconds is None else format_duration(seconds)


def _console():
    console = stdout_console()
    console.soft_wrap = True  # a finding stays one line in logs and pipes, whatever the width
    return console


def _print_report(report, views, metrics) -> None:
    from rich.markup import escape

    from runbook.triage.from_logs import describe
    from runbook.triage.verdict import headline

    out = _console()
    style = "bold red" if report.firing else "bold yellow" if report.exit_code else "bold green"
    out.print(headline(report), style=style, markup=False, highlight=False)
    out.print(f"[bold]Triage[/] at {report.at:%Y-%m-%d %H:%M:%S} UTC  [dim]{metrics.url}, profile "
              f"{metrics.catalog.profile}[/]")
    if report.firing:
        out.print("\n[bold red]Firing[/] (most urgent first)")
        for i, f in enumerate(report.firing, 1):
            since = f"since {f.since:%H:%M:%S}" + (" or earlier" if f.since_is_lower_bound else "")
            out.print(f" {i}. [bold]{f.playbook}[/] [red]{f.severity}[/]  {f.signal} = {_fmt(f.value)} "
                      f"({f.condition})  {since}, {_ago(f.held_seconds)}  [dim]{f.title}[/]", highlight=False)
            if f.read_from:
                out.print(f"    [dim]{escape(describe(f))}[/]", highlight=False)
    pending = report.of("pending")
    for f in pending:
        where = f" ({escape(f.read_from)})" if f.read_from else ""
        out.print(f"[yellow]pending[/] {f.playbook}: {f.signal} = {_fmt(f.value)} ({f.condition}) for "
                  f"{_ago(f.held_seconds)} of {_ago(f.for_seconds)}{where}", highlight=False)
    quiet = report.of("quiet")
    if quiet:
        out.print("\n[green]Quiet[/]  " + ", ".join(
            f"{f.playbook} ({f.signal} = {_fmt(f.value)}{', ' + escape(f.read_from) if f.read_from else ''})"
            for f in quiet), highlight=False)
    unknown = report.of("unknown")
    if unknown:
        out.print("\n[bold yellow]Could not see[/] (never read as quiet)")
        for f in unknown:
            out.print(f"  {f.playbook}: {f.reason}", markup=False, highlight=False)
    no_source = report.of("no_source")
    if no_source:
        out.print("\n[bold yellow]No source here[/] (never read as quiet)")
        for f in no_source:
            out.print(f"  {f.playbook}: {f.reason}", markup=False, highlight=False)
    for f in report.of("not_applicable"):
        out.print(f"not applicable here {f.playbook}: {f.reason}", style="dim", markup=False, highlight=False)
    for f in report.of("skipped"):
        out.print(f"[dim]skipped {f.playbook}: {f.reason}[/]", highlight=False)
    if report.invalid:
        out.print("\n[bold yellow]Not evaluated[/] (never read as quiet)")
        for item in report.invalid:
            out.print(f"  {item.file}: {item.reason}", markup=False, highlight=False)
    _print_warnings(out, report)
    if views:
        _print_views(out, views)
    top = report.top
    if top is not None:
        out.print(f"\n[bold]Top match: {top.playbook}[/] — {top.title}. Run it: "
                  f"[cyan]runbook triage --run[/] (add --dry-run to only diagnose), or "
                  f"[cyan]runbook run {top.playbook}[/]")
    elif not report.exit_code:
        out.print("\n[green]Nothing fires.[/]")


def _print_warnings(out, report) -> None:
    """The SOP's warning lines (the alert table): what fires or is pending first, then the rest in a line each."""
    from rich.markup import escape

    if not report.warnings:
        return
    out.print("\n[bold]Warning lines[/] [dim](the SOP's alert table; each names the playbook that handles it)[/]")
    for f in report.warnings_firing + report.warnings_in("pending"):
        held = f"since {f.since:%H:%M:%S}, {_ago(f.held_seconds)}" if f.state == "firing" else \
            f"pending {_ago(f.held_seconds)} of {_ago(f.for_seconds)}"
        where = ", ".join(f"{k}={v}" for k, v in f.labels.items())
        style = "red" if f.state == "firing" else "yellow"
        out.print(f"  [{style}]{f.state}[/] [bold]{f.alert}[/] {escape(where)}  {f.signal} = {_fmt(f.value)} "
                  f"({f.condition})  {held}  [dim]→ {f.playbook}: {escape(f.title)}[/]", highlight=False)
    quiet = report.warnings_in("quiet")
    if quiet:
        out.print("  [green]quiet[/] " + ", ".join(f"{f.alert} ({f.signal} = {_fmt(f.value)})" for f in quiet),
                  highlight=False)
    for state, label in (("unknown", "could not see"), ("no_source", "no source here"), ("skipped", "not evaluated")):
        for f in report.warnings_in(state):
            out.print(f"  [yellow]{label}[/] {f.alert}: {escape(f.reason)}", highlight=False)


def _print_views(out, views: dict[str, Any]) -> None:
    scope = ", ".join(f"{k}={v}" for k, v in views["labels"].items())
    out.print(f"\n[bold]SOP step 1[/] [dim]({scope or 'all series'})[/]")
    for name, t in views["trends"].items():
        out.print(f"  trend     {name}: now {_fmt(t['now'])}, an hour ago {_fmt(t['hour_ago'])}, yesterday "
                  f"{_fmt(t['yesterday'])} → {t['shape']}", highlight=False)
    lat = views["latency"]
    parts = []
    names = {"prefill_latency_p99_seconds": "first token", "prefill_time_p99_seconds": "prefill",
             "queue_time_p99_seconds": "queue", "decode_latency_p99_seconds": "decode",
             "inter_token_latency_p99_seconds": "inter-token"}
    for name, row in lat["signals"].items():
        label = names.get(name, name)
        parts.append(f"{label} p99 {_fmt(row['now'], 's')} (yesterday {_fmt(row['yesterday'], 's')})")
    out.print(f"  latency   {'; '.join(parts)} → {lat['verdict']}", highlight=False)
    kv = views["kv_cache"]
    pods = ", ".join(f"{pod} {value:.2f}" for pod, value in sorted(kv["pods"].items()))
    out.print(f"  kv cache  {pods or kv.get('error') or 'no data'} → {kv['verdict']}", highlight=False)
    failures = views["failures"]
    rows = ", ".join(f"{reason} {_fmt(v['now'], '/min')} (yesterday {_fmt(v['yesterday'], '/min')})"
                     for reason, v in sorted(failures["by_reason"].items()))
    out.print(f"  failures  {rows or failures.get('error') or 'none'}", highlight=False)
    if views.get("unavailable"):
        out.print(f"  [yellow]views incomplete:[/] {views['unavailable']}", highlight=False)


# -- runbook signals --------------------------------------------------------------------------


@click.command()
@click.option("--check", is_flag=True, help="Ask Prometheus whether each signal returns data (at --at).")
@click.option("--at", "at_text", default=None, metavar="TIME", help="With --check: when (default now).")
@click.option("--profile", default=None, help="Signal profile (default: the config file's, else vllm).")
@metrics_options
@output_option
def signals(check: bool, at_text: str | None, profile: str | None, config_path: str | None,
            prometheus_url: str | None, namespace: str | None, output: str) -> None:
    """Show the signal catalog in effect: each signal's PromQL, unit and origin.

    With --check, query each one and say whether it returns data: a signal a playbook detects
    with that playbook's labels (as triage asks it), the others scoped by --namespace. A signal
    without data is "no source" when none of its sources has a series here (the exporter that
    would provide each is named). Exit codes with --check: 0 every detected signal returns data,
    1 one does not, 11 Prometheus could not be read, 12 a detected signal has no source here.
    """
    from runbook.config import load_config
    from runbook.errors import BackendUnavailable, RunbookError
    from runbook.signals.catalog import build_catalog
    from runbook.triage.evaluate import detect_labels
    from runbook.triage.sources import missing_sources

    config = load_config(config_path)
    catalog = build_catalog(config, profile=profile)
    scope = {"namespace": namespace} if namespace else {}
    used: dict[str, list[str]] = {}
    asked: dict[str, dict[str, str]] = {}  # a detected signal is checked as triage asks it
    try:
        playbooks, _ = _load_playbooks((), catalog)
    except InvalidInput:
        playbooks = []
    # A signal is checked as the playbooks for every cluster ask it; one only for some worlds (a
    # canary, a Compose host: `applies_when`) is the way it is asked only where no other asks it.
    for p in sorted(playbooks, key=lambda p: p.detect is not None and p.detect.applies_when is not None):
        if p.detect is not None:
            used.setdefault(p.detect.signal, []).append(p.name)
            try:
                asked.setdefault(p.detect.signal, detect_labels(p, scope))
            except RunbookError:
                pass
    from runbook.signals.alert_table import load_alert_table

    alerted: dict[str, list[str]] = {}  # the alert table's rows, by the signal each reads here
    for row in load_alert_table():
        if row.signal_in(catalog):
            alerted.setdefault(row.signal_in(catalog), []).append(row.alert)  # type: ignore[arg-type]
    rows = []
    for name in catalog.names():
        s = catalog.get(name)
        labels = asked.get(name, scope)
        try:
            promql, unset = catalog.render(name, labels), None
        except InvalidInput as exc:  # a param runbook never guesses (max_num_seqs) is not set
            promql, unset = None, str(exc)
        rows.append({**s.to_json(), "labels_asked": labels, "promql": promql, "detected_by": used.get(name, []),
                     "alerted_by": alerted.get(name, []), **({"unset": unset} if unset else {})})
    code = 0
    if check:
        metrics = _metrics(config, prometheus_url, catalog)
        at = parse_at(at_text)
        unavailable = None
        try:
            for row in rows:
                if row["promql"] is None:
                    row["check"] = {"status": "not set", "reason": row["unset"]}
                    continue
                if unavailable:
                    row["check"] = {"status": "unknown", "reason": unavailable}
                    continue
                try:
                    samples = metrics.query(row["name"], at=at, labels=row["labels_asked"])
                except BackendUnavailable as exc:
                    unavailable = str(exc)
                    row["check"] = {"status": "unknown", "reason": unavailable}
                    continue
                except RunbookError as exc:
                    row["check"] = {"status": "error", "reason": str(exc)}
                    continue
                if samples:
                    row["check"] = {"status": "ok", "series": len(samples), "value": samples[0].value}
                    continue
                try:
                    missing = missing_sources(metrics, row["name"], row["labels_asked"], at)
                except BackendUnavailable as exc:
                    unavailable = str(exc)
                    row["check"] = {"status": "unknown", "reason": unavailable}
                    continue
                except RunbookError as exc:
                    row["check"] = {"status": "no data", "reason": f"its sources could not be checked: {exc}"}
                    continue
                row["check"] = ({"status": "no source", "missing_sources": missing} if missing
                                else {"status": "no data"})
        finally:
            metrics.close()
        detected = [r["check"]["status"] for r in rows if r["detected_by"]]
        if unavailable:
            code = int(ExitCode.BLIND)
        elif "no source" in detected:
            code = int(ExitCode.NO_SOURCE)
        elif any(status != "ok" for status in detected):
            code = int(ExitCode.FAILED)
    params = {k: {"kind": p.kind, "value": catalog.values.get(k), "help": p.help} for k, p in catalog.params.items()}
    missing = [n for n in used if n not in catalog.signals]
    if output == "json":
        print_json({"profile": catalog.profile, "params": params, "signals": rows, "missing": missing})
    else:
        _print_signals(catalog, rows, params, missing, check)
    raise SystemExit(code)


def _print_signals(catalog, rows: list[dict], params: dict, missing: list[str], check: bool) -> None:
    from rich.markup import escape

    out = _console()
    out.print(f"[bold]Signal profile {catalog.profile}[/]  [dim]params: "
              + ", ".join(f"{k}={v['value']!r}" for k, v in params.items()) + "[/]", highlight=False)
    for row in rows:
        head = f"\n[bold]{row['name']}[/] [dim]{row['aggregate']}, {row['unit'] or 'no unit'}, {row['origin']}"
        if row["detected_by"]:
            head += f", detected by {', '.join(row['detected_by'])}"
        if row["alerted_by"]:
            head += f", alert line {', '.join(row['alerted_by'])}"
        out.print(head + "[/]", highlight=False)
        if row["help"]:
            out.print(f"  {row['help']}", markup=False, highlight=False)
        out.print(f"  {row['promql'] or row['unset']}", markup=False, highlight=False)
        if row["sources"]:
            out.print("  sources: " + "; ".join(f"{m} (from {who})" for m, who in row["sources"].items()),
                      markup=False, highlight=False)
        if check:
            c = row["check"]
            style = {"ok": "green", "no data": "yellow"}.get(c["status"], "red")
            if c["status"] == "ok":
                detail = f"{c['series']} series, {c['value']:.4g}"
            elif c["status"] == "no source":
                detail = ": no series of " + " or ".join(f"{m} (from {who})" for m, who in c["missing_sources"].items())
            else:
                detail = c.get("reason", "")
            gap = "" if detail.startswith(":") else " "
            out.print(f"  [{style}]{c['status']}[/]{gap}{escape(detail)}", highlight=False)
    for name in missing:
        out.print(f"[bold red]missing[/] {name}: a playbook detects it but profile {catalog.profile} lacks it")


# -- runbook rules ----------------------------------------------------------------------------


class _RulesFormat(click.Choice):
    """`-o` of `runbook rules`: a format; what looks like a file is pointed to `-f/--out-file`."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and value not in self.choices and (value == "-" or "/" in value or "." in value):
            self.fail(f"{value!r} is not a format: -o is the rules' format ({' or '.join(self.choices)}), as in "
                      f"kubectl; give the destination with -f/--out-file {value}", param, ctx)
        return super().convert(value, param, ctx)


@click.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--output", "-o", "output", type=_RulesFormat(["yaml", "json"]), default="yaml", show_default=True,
              help="The format, as in kubectl: yaml (what Prometheus reads) or json.")
@click.option("--out-file", "-f", "output_file", default=None, type=click.Path(dir_okay=False),
              help="Write the rules to FILE instead of stdout.")
@click.option("--format", "fmt", type=click.Choice(["rules", "prometheusrule"]), default="rules", show_default=True,
              help="A Prometheus rule file, or a prometheus-operator PrometheusRule manifest.")
@click.option("--namespace", "-n", default=None, help="Only this namespace (default: every namespace, one alert each).")
@click.option("--param", "-p", "params", multiple=True, help="Fix a playbook param, key=value (repeatable).")
@click.option("--profile", default=None, help="Signal profile (default: the config file's, else vllm).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None, help="Config file.")
@click.option("--name", default="runbook-playbooks", show_default=True, help="PrometheusRule metadata.name.")
@click.option("--rule-namespace", default=None, help="PrometheusRule metadata.namespace.")
@click.option("--label", "labels", multiple=True,
              help="PrometheusRule metadata label key=value, e.g. release=kube-prometheus-stack (repeatable).")
@click.option("--runbook-url", "runbook_url", default=None, metavar="TEMPLATE",
              help="Each rule's runbook_url annotation, {playbook} standing for the playbook's name, e.g. "
                   "https://git.example.com/ops/runbook/blob/main/playbooks/{playbook}.yaml "
                   "(default: playbooks/{playbook}.yaml).")
@click.option("--workload", "workload_ref", default=None, metavar="KIND/NAME",
              help="Read --max-num-seqs from this workload's containers (with --namespace and a cluster: "
                   "--kubeconfig/--context or the config file's kubernetes: section).")
@click.option("--kubeconfig", default=None, type=click.Path(dir_okay=False), help="With --workload: the kubeconfig.")
@click.option("--context", "kube_context", default=None, help="With --workload: the kubeconfig context.")
def rules(paths: tuple[str, ...], output: str, output_file: str | None, fmt: str, namespace: str | None,
          params: tuple[str, ...],
          profile: str | None, config_path: str | None, name: str, rule_namespace: str | None,
          labels: tuple[str, ...], runbook_url: str | None, workload_ref: str | None, kubeconfig: str | None,
          kube_context: str | None) -> None:
    """Export the playbooks' detect conditions as Prometheus alerting rules.

    Each rule's alertname is the first of the playbook's `match.alerts`, it carries the label
    runbook_playbook=<name>, and it groups by the alert labels the playbook reads into params,
    so the alert that fires starts the playbook that re-checks the same condition. The SOP's
    warning lines (the bundled alert table) follow as a second group, each naming the playbook
    that handles it; no playbook starts on them. A row that needs a param runbook cannot know
    (max_num_seqs) is left out, with a note, until it is given (-p max_num_seqs=256).
    """
    from runbook.cli.run import parse_params
    from runbook.config import load_config
    from runbook.signals.alert_table import load_alert_table
    from runbook.signals.catalog import build_catalog
    from runbook.triage.rules import RUNBOOK_URL, alerting_rules, prometheus_rule, to_yaml

    fixed: dict[str, Any] = parse_params(params)
    if namespace:
        fixed["namespace"] = namespace
    config = load_config(config_path)
    catalog = build_catalog(config, profile=profile)
    read_notes = []
    if workload_ref:
        fixed["max_num_seqs"], note = _max_num_seqs_from(config, workload_ref, namespace, fixed, kubeconfig,
                                                         kube_context)
        read_notes.append(note)
    elif kubeconfig or kube_context:
        raise click.UsageError("--kubeconfig and --context are for --workload: add --workload KIND/NAME")
    playbooks, invalid = _load_playbooks(paths, catalog)
    document, notes = alerting_rules(playbooks, catalog, fixed, alerts=load_alert_table(),
                                     url=runbook_url or RUNBOOK_URL)
    if fmt == "prometheusrule":
        meta = parse_params(labels, "--label")
        document = prometheus_rule(document, name=name, namespace=rule_namespace, labels=meta)
    text = to_yaml(document) if output == "yaml" else json.dumps(document, indent=2) + "\n"
    for note in read_notes + notes + [f"{i.file}: {i.reason}" for i in invalid]:
        click.echo(f"note: {note}", err=True)
    if output_file:
        try:
            Path(output_file).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise InvalidInput(f"cannot write {output_file}: {exc.strerror or exc}") from None
        count = sum(len(g["rules"]) for g in (document.get("spec", document))["groups"])
        click.echo(f"wrote {count} rule(s) to {output_file}", err=True)
    else:
        click.echo(text, nl=False)
    if invalid:
        raise SystemExit(int(ExitCode.INVALID))


def _max_num_seqs_from(config, ref: str, namespace: str | None, fixed: dict[str, Any], kubeconfig: str | None,
                       kube_context: str | None, in_cluster: bool = False) -> tuple[int, str]:
    """(--max-num-seqs of the workload, a note saying where it came from)."""
    from runbook.backends.kubernetes import connect as kubernetes
    from runbook.triage.workload_flags import max_num_seqs

    if "max_num_seqs" in fixed:
        raise click.UsageError("give max_num_seqs either with -p or read from --workload, not both")
    if not namespace:
        raise click.UsageError(f"--workload {ref} needs --namespace: the namespace it runs in")
    cluster = kubernetes.connect(config, kubeconfig=kubeconfig, context=kube_context, in_cluster=in_cluster)
    if cluster is None:
        raise click.UsageError("--workload needs a cluster: give --kubeconfig (and --context), or put a "
                               "`kubernetes:` section in the config file")
    try:
        value = max_num_seqs(cluster, namespace, ref)
    finally:
        cluster.close()
    return value, f"max_num_seqs {value}: read from {ref}'s --max-num-seqs in namespace {namespace}"
