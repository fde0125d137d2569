"""`runbook validate`, `runbook list`, `runbook actions`: what playbooks and actions there are.

These read files and the registry only; they never reach a backend.
"""

from __future__ import annotations

from pathlib import Path

import click

from runbook.cli.complete import action_names
from runbook.cli.output import output_option, print_columns, print_json, stdout_console
from runbook.errors import ExitCode, InvalidInput
from runbook.files import discovery

# `list` and `validate` answer from `loading.listing_cache` when nothing they read has changed; the
# playbook models, YAML and Jinja2 are imported only to load playbooks afresh (bench/startup.py).


def load_all(paths: tuple[str, ...], catalog=None) -> list:
    """`catalog`: the signal catalog to check signal names against (default: the config file's)."""
    from runbook.actions import load_builtin
    from runbook.loading import validation

    registry = load_builtin()
    return [validation.load_playbook_file(f, registry, label=label, catalog=catalog) for label, f in _files(paths)]


def _files(paths: tuple[str, ...]) -> list[tuple[str, Path]]:
    files = discovery.discover(paths or discovery.default_paths())
    missing = [str(f) for f in files if not Path(f).exists()]
    if missing:
        raise InvalidInput(f"no such file or folder: {', '.join(missing)}")
    return [(_label(f), Path(f)) for f in files]


def _label(path: Path) -> str:
    """Bundled playbooks are named as `<bundled>/x.yaml`, not by a site-packages path."""
    try:
        return f"<bundled>/{Path(path).resolve().relative_to(discovery.bundled_dir().resolve())}"
    except ValueError:
        return str(path)


def summaries(paths: tuple[str, ...]) -> list[dict]:
    """Per playbook file what `list` and `validate` print: from the cache, or loaded and then cached."""
    from runbook.loading import listing_cache

    files = _files(paths)
    key = listing_cache.Key(files)
    cached = listing_cache.lookup(key)
    if cached is not None:
        return cached
    from runbook.actions import load_builtin
    from runbook.loading import validation
    from runbook.files.problems import format_report

    registry = load_builtin()
    found = []
    for label, path in files:
        result = validation.load_playbook_file(path, registry, label=label)
        p = result.playbook
        found.append({
            "file": result.file,
            "problems": [problem.to_json() for problem in result.problems],
            "report": format_report(list(result.problems), file_label=result.file) if result.problems else None,
            "playbook": None if p is None else {
                "name": p.name, "title": p.title, "severity": p.severity, "alerts": list(p.match.alerts),
                "titles": list(p.match.titles), "detect": _detect_text(p), "steps": len(p.steps)},
        })
    listing_cache.store(key, found)
    return found


@click.command()
@click.argument("paths", nargs=-1, type=click.Path())
@output_option
def validate(paths: tuple[str, ...], output: str) -> None:
    """Check playbooks (default: the bundled ones and ./playbooks); exit 3 if any is invalid."""
    results = summaries(paths)
    problems = [p for r in results for p in r["problems"]]
    if output == "json":
        print_json(problems)
    else:
        # Plain echo, not rich: a location must never be wrapped across lines.
        for result in results:
            if result["problems"]:
                click.echo(result["report"], err=True)
            else:
                playbook = result["playbook"]
                click.echo(f"ok  {result['file']}  ({playbook['name']}, {playbook['steps']} steps)")
        if problems:
            bad = sum(1 for r in results if r["problems"])
            click.echo(f"{bad} of {len(results)} playbook(s) invalid, {len(problems)} problem(s)", err=True)
    if problems:
        raise SystemExit(int(ExitCode.INVALID))


def _detect_text(playbook) -> str:
    if playbook.detect is None:
        return "-"
    text = playbook.detect.describe()
    return text + (f" for {playbook.detect.for_:g}s" if playbook.detect.for_ else "")


@click.command("list")
@click.argument("paths", nargs=-1, type=click.Path())
@output_option
def list_playbooks(paths: tuple[str, ...], output: str) -> None:
    """Show playbooks: name, title, severity, the alerts that start them, what triage detects."""
    results = summaries(paths)
    valid = [r["playbook"] for r in results if r["playbook"] is not None]
    invalid = [r["file"] for r in results if r["playbook"] is None]
    if output == "json":
        print_json([{"name": p["name"], "title": p["title"], "severity": p["severity"], "alerts": p["alerts"],
                     "titles": p["titles"], "detect": p["detect"], "steps": p["steps"]} for p in valid])
    else:
        # Plain columns, not a rich table: `list` is a start-up-time command (bench/startup.py).
        print_columns(["name", "severity", "title", "alerts", "detects"],
                      [[p["name"], p["severity"], p["title"], ", ".join(p["alerts"]) or "-", p["detect"]]
                       for p in valid])
    if invalid:
        click.echo(f"invalid, not listed: {', '.join(invalid)} (see `runbook validate`)", err=True)
        raise SystemExit(int(ExitCode.INVALID))


def _param_rows(spec) -> list[dict]:
    schema = spec.params.model_json_schema(by_alias=True)
    required = set(schema.get("required", []))
    rows = []
    for name, field in schema.get("properties", {}).items():
        kind = field.get("type") or " | ".join(sorted({a.get("type", "?") for a in field.get("anyOf", [])} - {"null"})) or "any"
        rows.append({"name": name, "type": kind, "required": name in required,
                     "default": field.get("default"), "description": field.get("description", "")})
    return rows


@click.command()
@click.argument("name", required=False, shell_complete=action_names)
@output_option
def actions(name: str | None, output: str) -> None:
    """List every action (or describe one) with its kind, documentation and params."""
    from runbook.actions import load_builtin

    registry = load_builtin()
    specs = registry.specs()
    if name is not None:
        spec = registry.get(name)
        if spec is None:
            from runbook.files.problems import did_you_mean

            raise InvalidInput(f"no action named {name!r}; {did_you_mean(name, registry.names())}")
        specs = [spec]
    if output == "json":
        print_json([{"name": s.name, "kind": s.kind.value, "doc": s.doc, "reversible": s.reversible,
                     "params": _param_rows(s)} for s in specs])
        return
    console = stdout_console()
    for spec in specs:
        console.print(f"[bold]{spec.name}[/bold]  [dim]{spec.kind.value}{', reversible' if spec.reversible else ''}[/dim]")
        for line in spec.doc.splitlines():
            console.print(f"    {line.strip()}", markup=False)
        params = ", ".join(f"{r['name']}{'' if r['required'] else '?'}: {r['type']}" for r in _param_rows(spec))
        console.print(f"    [dim]params:[/dim] {params}", highlight=False)
        console.print()
