"""Playbook files → a `Playbook`, or every problem in them at once, each located and with a fix.

Checks the shape (unknown, missing and duplicate keys, types), each step's action against the
registry and its `with:` against that action's params model, template syntax, references to
steps and params, and every metric signal named against the signal catalog — at load time, not at 3am.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pydantic

from runbook.text import templating
from runbook.files import discovery
from runbook.files.problems import Problem, did_you_mean, path_to_str, problem, problems_from_validation_error
from runbook.files.yamlsource import Positions, load_yaml, read_yaml_text
from runbook.model.playbook import Playbook
from runbook.model.registry import Registry

if TYPE_CHECKING:
    from runbook.signals.catalog import Catalog



@dataclasses.dataclass(frozen=True)
class LoadResult:
    file: str
    playbook: Playbook | None
    problems: tuple[Problem, ...]

    @property
    def ok(self) -> bool:
        return self.playbook is not None and not self.problems


# Where playbooks are found lives in `discovery` (light: `list` and `validate` start fast); kept here
# under their old names for the callers that load playbooks anyway.
PLAYBOOK_SUFFIXES = discovery.PLAYBOOK_SUFFIXES
bundled_dir = discovery.bundled_dir
discover = discovery.discover
default_paths = discovery.default_paths


def load_playbook_file(path: str | Path, registry: Registry, *, label: str | None = None,
                       catalog: Catalog | None = None) -> LoadResult:
    """`catalog`: the signal catalog the playbook's signals must be in (default: the config file's)."""
    file = label or str(path)
    try:
        text = read_yaml_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
        return LoadResult(file, None, (problem("not-a-playbook", file=file, position=None, path="",
                                               message=f"cannot read the file: {reason}",
                                               hint="check the path and that it is a YAML text file"),))
    return load_playbook_text(text, file=file, registry=registry, catalog=catalog)


_CATALOGS: dict[tuple, Catalog] = {}  # one build per config file version, not one per playbook loaded


def catalog_in_effect() -> Catalog:
    """The signal catalog of the config file found by default (`$RUNBOOK_CONFIG`, ./runbook.yaml, …)."""
    from runbook.config import find_config, load_config
    from runbook.signals.catalog import build_catalog

    path = find_config()
    key: tuple = ()
    if path is not None:
        stat = path.stat()
        key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if key not in _CATALOGS:
        _CATALOGS.clear()
        _CATALOGS[key] = build_catalog(load_config(path))
    return _CATALOGS[key]


def load_playbook_text(text: str, *, file: str, registry: Registry, catalog: Catalog | None = None) -> LoadResult:
    doc = load_yaml(text, file=file)
    problems: list[Problem] = list(doc.problems)
    data = doc.data
    if data is None and problems:
        return LoadResult(file, None, tuple(sorted(problems)))
    if not isinstance(data, Mapping):
        problems.append(problem("not-a-playbook", file=file, position=doc.positions.value(()), path="",
                                message=f"expected a mapping with name, title and steps, found {type(data).__name__}",
                                hint="start the file with `name: my-playbook`"))
        return LoadResult(file, None, tuple(sorted(problems)))
    data, bound_problems = _detect_bounds_from_params(data, doc.positions, file)
    problems.extend(bound_problems)
    playbook: Playbook | None = None
    try:
        playbook = Playbook.model_validate(data)
    except pydantic.ValidationError as exc:
        problems.extend(problems_from_validation_error(exc, file=file, positions=doc.positions, model=Playbook))
    problems.extend(_check_steps(data, doc.positions, file, registry))
    problems.extend(_check_signals(data, doc.positions, file, registry, catalog or catalog_in_effect()))
    problems = _dedupe(problems)
    return LoadResult(file, playbook if not problems else None, tuple(sorted(problems)))


_PARAM_ONLY = re.compile(r"^\{\{\s*params\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$")


def _detect_bounds_from_params(data: Mapping[str, Any], positions: Positions,
                               file: str) -> tuple[Mapping[str, Any], list[Problem]]:
    """`detect: {above: "{{ params.x }}"}` takes the param's default, once, when the playbook loads: one
    number for the steps that use the param and for the detect that triage, the re-check and the
    exported alert rule read."""
    detect = data.get("detect")
    if not isinstance(detect, Mapping):
        return data, []
    params = data.get("params") if isinstance(data.get("params"), Mapping) else {}
    resolved, problems = dict(detect), []
    for key in ("above", "below"):
        value = detect.get(key)
        found = _PARAM_ONLY.match(value.strip()) if isinstance(value, str) else None
        if found is None:
            continue
        name = found.group(1)
        default = params.get(name) if params else None
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            resolved[key] = float(default)
            continue
        message = (f"param `{name}` is {default!r}, not a number: `{key}` takes its default when the playbook loads"
                   if name in (params or {}) else f"no param `{name}` in this playbook's params")
        problems.append(problem("bad-value", file=file, position=positions.value(("detect", key)),
                                path=path_to_str(("detect", key)), message=message,
                                hint=did_you_mean(name, params or {}) if name not in (params or {}) else
                                "give the param a number as its default"))
        resolved[key] = 0.0  # reported above; a number keeps the model's own checks quiet about it
    return {**data, "detect": resolved}, problems


def _dedupe(problems: list[Problem]) -> list[Problem]:
    seen: set[tuple] = set()
    out = []
    for item in problems:
        key = (item.file, item.line, item.column, item.path, item.code, item.message)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def _has_template(value: Any) -> bool:
    return any(templating.is_template(s) for s in _strings(value))


def _check_steps(data: Mapping[str, Any], positions: Positions, file: str, registry: Registry) -> list[Problem]:
    problems: list[Problem] = []
    params = data.get("params") if isinstance(data.get("params"), Mapping) else {}
    known_params = set(params or {})

    def add(slug: str, path: tuple, message: str, hint: str = "", *, at_value: bool = False) -> None:
        # A wrong value is pointed at where the value starts; anything else at its key.
        position = positions.value(path) if at_value else None
        if position is None:
            _, position = positions.nearest(path)
        problems.append(problem(slug, file=file, position=position, path=path_to_str(path), message=message, hint=hint))

    def check_template(text: str, path: tuple, earlier: set[str], *, expression: bool = False) -> None:
        error = templating.check_expression(text) if expression else templating.check_syntax(text)
        if error:
            add("bad-template", path, f"template does not parse: {error}", "check the braces and quotes")
            return
        for ref in sorted(templating.step_references(text) - earlier):
            add("unknown-step", path, f"`steps['{ref}']` is not an earlier step",
                did_you_mean(ref, earlier) if earlier else "a step can only read the steps before it")
        for ref in sorted(templating.param_references(text) - known_params):
            add("bad-template", path, f"no param `{ref}` in this playbook's params",
                did_you_mean(ref, known_params) if known_params else "declare it under `params:`")

    for key in ("detect",):
        section = data.get(key)
        if isinstance(section, Mapping):
            for label, value in (section.get("labels") or {}).items() if isinstance(section.get("labels"), Mapping) else ():
                if isinstance(value, str) and templating.is_template(value):
                    check_template(value, (key, "labels", label), set())

    steps = data.get("steps")
    if not isinstance(steps, list):
        return problems
    seen_ids: dict[str, int] = {}
    earlier: set[str] = set()
    for index, step in enumerate(steps):
        if not isinstance(step, Mapping):
            continue
        step_id = step.get("id")
        if isinstance(step_id, str):
            if step_id in seen_ids:
                add("duplicate-id", ("steps", index, "id"), f"step id `{step_id}` is used twice (first by steps[{seen_ids[step_id]}])",
                    "give each step its own id: the journal and later steps refer to it")
            seen_ids.setdefault(step_id, index)
        when = step.get("when")
        if isinstance(when, str):
            check_template(when, ("steps", index, "when"), earlier, expression=True)
        uses = step.get("uses")
        with_ = step.get("with", {})
        if isinstance(with_, Mapping):
            for path_key, text in _template_strings(with_, ("steps", index, "with")):
                check_template(text, path_key, earlier)
        if isinstance(uses, str):
            spec = registry.get(uses)
            if spec is None:
                add("unknown-action", ("steps", index, "uses"), f"no action named `{uses}`",
                    did_you_mean(uses, registry.names()) + " (`runbook actions` lists them)", at_value=True)
            elif isinstance(with_, Mapping):
                problems.extend(_check_params(spec.params, with_, positions, file, ("steps", index, "with")))
        if isinstance(step_id, str):
            earlier.add(step_id)
    return problems


def _named_signals(data: Mapping[str, Any], registry: Registry) -> Iterable[tuple[tuple, str]]:
    """(path, name) of every metric signal named literally: the detect's, and each step's fields that
    its action declares as metric signals (a kill's `signal: KILL` is a Unix signal, not one of these)."""
    detect = data.get("detect")
    if isinstance(detect, Mapping) and isinstance(detect.get("signal"), str):
        yield ("detect", "signal"), detect["signal"]
    applies = detect.get("applies_when") if isinstance(detect, Mapping) else None
    if isinstance(applies, Mapping) and isinstance(applies.get("signal"), str):
        yield ("detect", "applies_when", "signal"), applies["signal"]
    steps = data.get("steps")
    for index, step in enumerate(steps if isinstance(steps, list) else ()):
        if not isinstance(step, Mapping) or not isinstance(step.get("uses"), str):
            continue
        spec = registry.get(step["uses"])
        with_ = step.get("with")
        if spec is None or not isinstance(with_, Mapping):
            continue
        for field in spec.params.signal_fields():
            value = with_.get(field)
            if isinstance(value, str) and not templating.is_template(value):  # a template is known when rendered
                yield ("steps", index, "with", field), value


def _check_signals(data: Mapping[str, Any], positions: Positions, file: str, registry: Registry,
                   catalog: Catalog) -> list[Problem]:
    problems = []
    for path, name in _named_signals(data, registry):
        if name in catalog.signals:
            continue
        problems.append(problem(
            "unknown-signal", file=file, position=positions.value(path) or positions.nearest(path)[1],
            path=path_to_str(path), message=f"no signal `{name}` in signal profile {catalog.profile}",
            hint=(did_you_mean(name, catalog.names()) + " `runbook signals` lists them; add one of your own "
                  "under `signals: overrides:` in the config file")))
    return problems


def _template_strings(value: Any, path: tuple) -> Iterable[tuple[tuple, str]]:
    if isinstance(value, str):
        if templating.is_template(value):
            yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _template_strings(item, (*path, key))
    elif isinstance(value, list):
        for number, item in enumerate(value):
            yield from _template_strings(item, (*path, number))


def _check_params(model: type[pydantic.BaseModel], with_: Mapping[str, Any], positions: Positions, file: str,
                  base: tuple) -> list[Problem]:
    """Validate the literal part of `with:` now; templated values are checked when rendered."""
    templated = {key for key, value in with_.items() if _has_template(value)}
    literal = {key: value for key, value in with_.items() if key not in templated}
    try:
        model.model_validate(literal)
    except pydantic.ValidationError as exc:
        kept = [e for e in exc.errors() if not (e["loc"] and e["loc"][0] in templated)
                and not (templated and (not e["loc"] or e["type"] == "value_error" and len(e["loc"]) == 0))]
        if not kept:
            return []
        filtered = pydantic.ValidationError.from_exception_data(exc.title, kept)  # type: ignore[arg-type]
        return problems_from_validation_error(filtered, file=file, positions=positions, base_path=base, model=model)
    return []
