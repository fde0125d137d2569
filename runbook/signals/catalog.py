"""The signal catalog: signal names → PromQL templates, from a profile plus the config file.

A profile (YAML, bundled in this package or a file of your own) declares typed params and
signals; the config's `signals:` section picks the profile, sets params and overrides signals.
`Catalog.render(signal, labels, by)` is the one place where PromQL is built from them.

Template language: `{labels}` becomes the caller's label matchers (`namespace="llm",`),
`{by}` the grouping labels (`pod,`, for an inner `sum by ({by}le)`), and `{param}` a declared
param's checked value; a `value` param may also be filled by a caller's label of that name,
which then stays out of `{labels}`. The result is `<aggregate> by (<by>) (<expr>)`, with
playbook label names mapped to the metric's own (`node` → `Hostname`) and back. Where a metric
carries a playbook label only inside another label's value (Envoy Gateway names the namespace in
`envoy_cluster_name="httproute/<namespace>/…"`), a signal's `label_patterns` turns the label into a
regex matcher on that one, its value checked and escaped, and reads it back for `by`.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import pydantic

from runbook.errors import InvalidInput
from runbook.model.duration import Duration
from runbook.parsers import log_matches
from runbook.signals import promql

DEFAULT_PROFILE = "vllm"
SOURCE_LABEL = "runbook_source"  # carries each present source's metric name in a source query
RESERVED = ("labels", "by")
VALUE = "{value}"  # where a label_patterns regex takes the playbook label's value
CAPTURE = "runbook_value"  # the named group that reads the value back out for `by`
ParamKind = Literal["duration", "matchers", "value", "number"]
Aggregate = Literal["sum", "max", "min", "avg"]


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)


def _check_label_map(value: dict[str, str]) -> dict[str, str]:
    for ours, theirs in value.items():
        promql.check_label_name(ours)
        promql.check_label_name(theirs)
    return value


class LabelPattern(_Strict):
    """A playbook label the metric carries inside another label's value: `regex` (RE2, anchored as
    Prometheus anchors matchers) holds {value} once, where the checked, escaped value goes."""

    label: str
    regex: str

    @pydantic.field_validator("label")
    @classmethod
    def _label(cls, value: str) -> str:
        return promql.check_label_name(value)

    @pydantic.field_validator("regex")
    @classmethod
    def _regex(cls, value: str) -> str:
        if value.count(VALUE) != 1:
            raise ValueError(f"regex {value!r} must hold {VALUE} exactly once, where the label's value goes, "
                             f"e.g. 'httproute/{VALUE}/.+'")
        if "\n" in value:
            raise ValueError(f"regex {value!r} must be one line")
        try:  # Python's re as a first check of the RE2 that Prometheus runs (it reports the rest itself)
            re.compile(value.replace(VALUE, "(?P<%s>.+?)" % CAPTURE))
        except re.error as exc:
            raise ValueError(f"regex {value!r} is not a regular expression: {exc}") from None
        return value

    def matching(self, name: str, value: object) -> str:
        """The regex that matches the value `value` of the playbook label `name` (ValueError if unfit)."""
        return self.regex.replace(VALUE, promql.regex_literal(name, value))

    def any_value(self) -> str:
        return self.regex.replace(VALUE, ".+")

    def capture(self) -> str:
        return self.regex.replace(VALUE, f"(?P<{CAPTURE}>.+?)")


def _check_label_patterns(labels: Mapping[str, str], patterns: Mapping[str, LabelPattern]) -> None:
    for ours in patterns:
        promql.check_label_name(ours)
        if ours in labels:
            raise ValueError(f"both `labels` and `label_patterns` map {ours}; keep one")


class Param(_Strict):
    """A template parameter: its kind decides the pattern its value must match."""

    kind: ParamKind
    default: str | float | None = None  # None: must come from the config (or a caller's label)
    help: str = ""

    @pydantic.model_validator(mode="after")
    def _default_fits(self) -> "Param":
        if self.default is not None:
            render_param(self.kind, self.default)
        return self


def _check_sources(value: dict[str, str]) -> dict[str, str]:
    for metric in value:
        if not promql.SIGNAL_NAME.fullmatch(metric):
            raise ValueError(f"{metric!r} is not a metric name (letters, digits, '_' and ':')")
    return value


class LogSpec(_Strict):
    """How triage reads the signal from the pods' own logs where none of its sources is there (a stock
    vLLM exports no OOM counter, but logs each CUDA out-of-memory error): the lines of the playbook
    workload's pods that match one of `patterns`, current and previous containers, per minute over
    `rate_window` as the expression's rate() counts them; a restart after an OOMKilled termination
    counts one. A signal in events per minute; triage reads logs only with a cluster configured."""

    patterns: list[str] = pydantic.Field(min_length=1, max_length=log_matches.MAX_PATTERNS)
    counts: str = pydantic.Field("matching log lines", min_length=1, max_length=100)  # what one event is, in words
    window: Duration = pydantic.Field(300.0, ge=60, le=3600)  # how far back: at least the detect's `for:` more
    rate_window: Duration = pydantic.Field(60.0, ge=15, le=900)  # the events of this long make a value
    oom_killed: bool = True  # a restart after an OOMKilled termination in the window counts one
    max_pods: int = pydantic.Field(32, ge=1, le=512)  # more pods than this: not read (never quiet), say so
    max_bytes: int = pydantic.Field(4 * 1_048_576, ge=65_536, le=64 * 1_048_576)  # per container log

    @pydantic.field_validator("patterns")
    @classmethod
    def _bounded(cls, value: list[str]) -> list[str]:
        return [log_matches.check_pattern(p) for p in value]

    @pydantic.model_validator(mode="after")
    def _window_holds_a_rate(self) -> "LogSpec":
        if self.rate_window > self.window:
            raise ValueError(f"rate_window ({self.rate_window:g}s) must fit in window ({self.window:g}s)")
        return self


class SignalSpec(_Strict):
    help: str = ""
    unit: str = ""
    aggregate: Aggregate
    expr: str = pydantic.Field(min_length=1)
    labels: dict[str, str] = {}  # playbook label -> the metric's label, e.g. {node: Hostname}
    # playbook label -> a regex on the metric's label that names it, e.g. {namespace: {label: envoy_cluster_name,
    # regex: 'httproute/{value}/.+'}}
    label_patterns: dict[str, LabelPattern] = {}
    # metric -> who exports it: the series whose presence means the signal gives a reading (0 included).
    # Where none of them has a series, the signal has no source here, and reads nothing (never 0).
    sources: dict[str, str] = {}
    logs: LogSpec | None = None  # where none of the sources is there: how to read it from the pods' logs

    @pydantic.field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_label_map(value)

    @pydantic.field_validator("sources")
    @classmethod
    def _sources(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_sources(value)

    @pydantic.model_validator(mode="after")
    def _one_mapping_per_label(self) -> "SignalSpec":
        _check_label_patterns(self.labels, self.label_patterns)
        return self

    @pydantic.model_validator(mode="after")
    def _sources_are_read(self) -> "SignalSpec":
        unread = [m for m in self.sources if not promql.reads_metric(self.expr, m)]
        if unread:
            raise ValueError(f"source(s) {', '.join(unread)} do not appear in the expression")
        return self


class Profile(_Strict):
    name: str
    description: str = ""
    extends: str | None = None
    params: dict[str, Param] = {}
    signals: dict[str, SignalSpec] = {}

    @pydantic.field_validator("params")
    @classmethod
    def _param_names(cls, params: dict[str, Param]) -> dict[str, Param]:
        for name in params:
            promql.check_label_name(name, "param name")
            if name in RESERVED:
                raise ValueError(f"`{name}` is filled by runbook itself; choose another param name")
        return params

    @pydantic.field_validator("signals")
    @classmethod
    def _signal_names(cls, signals: dict[str, SignalSpec]) -> dict[str, SignalSpec]:
        for name in signals:
            if not promql.SIGNAL_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a signal name (letters, digits, '_' and ':')")
        return signals


class SignalOverride(_Strict):
    """A config file's change to one signal: the fields given replace the profile's."""

    help: str | None = None
    unit: str | None = None
    aggregate: Aggregate | None = None
    expr: str | None = pydantic.Field(None, min_length=1)
    labels: dict[str, str] | None = None
    label_patterns: dict[str, LabelPattern] | None = None
    sources: dict[str, str] | None = None  # default: the profile's sources that the expression still reads
    logs: LogSpec | None = None  # default: the profile's

    @pydantic.model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        # `waiting_requests: 'my_queue{{labels}}'` is the common case: just the expression.
        return {"expr": value} if isinstance(value, str) else value

    @pydantic.field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return None if value is None else _check_label_map(value)

    @pydantic.field_validator("sources")
    @classmethod
    def _sources(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return None if value is None else _check_sources(value)


class SignalsSection(_Strict):
    """The config file's `signals:` section."""

    profile: str = DEFAULT_PROFILE  # a bundled profile's name, or a path to a profile file
    params: dict[str, str | float] = {}
    overrides: dict[str, SignalOverride] = {}

    @pydantic.field_validator("overrides")
    @classmethod
    def _names(cls, overrides: dict[str, SignalOverride]) -> dict[str, SignalOverride]:
        for name in overrides:
            if not promql.SIGNAL_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a signal name (letters, digits, '_' and ':')")
        return overrides


def render_param(kind: str, value: object) -> str:
    """The param's text as it goes into PromQL; ValueError when it does not match its kind."""
    if isinstance(value, bool):
        raise ValueError(f"expected a {kind}, found {value!r}")
    if kind == "duration":
        if isinstance(value, (int, float)):
            return promql.prom_duration(float(value))
        if isinstance(value, str) and promql.DURATION.fullmatch(value.strip()):
            return value.strip()
        raise ValueError(f"expected a Prometheus duration such as 1m, 5m or 30s, found {value!r}")
    if kind == "number":
        if isinstance(value, (int, float)):
            return promql.format_number(float(value))
        if isinstance(value, str) and promql.NUMBER.fullmatch(value.strip()):
            return value.strip()
        raise ValueError(f"expected a number, found {value!r}")
    if kind == "matchers":
        if not isinstance(value, str):
            raise ValueError(f"expected label matchers such as job=\"vllm\", found {value!r}")
        return promql.parse_matchers(value)
    return promql.check_label_value("value", value)


@dataclasses.dataclass(frozen=True)
class Signal:
    name: str
    help: str
    unit: str
    aggregate: str
    expr: str
    labels: Mapping[str, str]
    origin: str  # "profile vllm", "config file"
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict)  # metric -> who exports it
    label_patterns: Mapping[str, LabelPattern] = dataclasses.field(default_factory=dict)
    logs: LogSpec | None = None  # how triage reads it from the pods' logs where no source is there

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "help": self.help, "unit": self.unit, "aggregate": self.aggregate,
                "expr": self.expr, "labels": dict(self.labels), "origin": self.origin,
                "sources": dict(self.sources),
                "label_patterns": {k: p.model_dump() for k, p in self.label_patterns.items()},
                "logs": self.logs.model_dump() if self.logs is not None else None}

    def matchers(self, checked: Mapping[str, str], grouped: Sequence[str] = ()) -> str:
        """`{labels}`: the checked playbook labels as the metric's matchers; a label of `label_patterns`
        is a regex matcher on the label that names it, and one only grouped by keeps to the series
        that name some value (the others belong to none)."""
        plain = {self.labels.get(k, k): v for k, v in checked.items() if k not in self.label_patterns}
        regexes = [(p.label, p.matching(k, checked[k])) for k, p in self.label_patterns.items() if k in checked]
        regexes += [(p.label, p.any_value()) for k, p in self.label_patterns.items()
                    if k in grouped and k not in checked]
        return promql.matchers(plain) + "".join(f"{name}=~{promql.quote(rx)}," for name, rx in regexes)

    def metric_label(self, ours: str) -> str:
        pattern = self.label_patterns.get(ours)
        return pattern.label if pattern is not None else self.labels.get(ours, ours)


@dataclasses.dataclass(frozen=True)
class Catalog:
    profile: str
    params: Mapping[str, Param]
    values: Mapping[str, str | None]  # each param's checked PromQL text; None when not set
    signals: Mapping[str, Signal]

    def names(self) -> list[str]:
        return sorted(self.signals)

    def get(self, name: str) -> Signal:
        signal = self.signals.get(name)
        if signal is None:
            from runbook.files.problems import did_you_mean

            raise InvalidInput(f"unknown signal {name!r} in profile {self.profile}; "
                               f"{did_you_mean(name, self.names())} (see `runbook signals`)")
        return signal

    def render(self, name: str, labels: Mapping[str, object] = {}, by: Sequence[str] = ()) -> str:
        """The PromQL for `name` filtered by `labels`, aggregated by `by` (one series when empty)."""
        signal = self.get(name)
        try:
            checked = {promql.check_label_name(k): promql.check_label_value(k, v) for k, v in labels.items()}
            by = [promql.check_label_name(b) for b in dict.fromkeys(by)]
        except ValueError as exc:
            raise InvalidInput(f"signal {name}: {exc}") from None
        values: dict[str, str] = {}
        for placeholder in promql.placeholders(signal.expr):
            if placeholder in RESERVED:
                continue
            param = self.params[placeholder]
            if placeholder in checked:
                if param.kind != "value":
                    raise InvalidInput(f"signal {name}: label {placeholder} cannot fill the {param.kind} "
                                       f"param `{placeholder}`")
                values[placeholder] = checked.pop(placeholder)
            elif self.values.get(placeholder) is not None:
                values[placeholder] = self.values[placeholder]  # type: ignore[assignment]
            else:
                also = f", or pass the label {placeholder}" if param.kind == "value" else ""
                raise InvalidInput(f"signal {name} needs the param `{placeholder}`: set it under "
                                   f"`signals: params:` in the config file{also}")
        try:
            values["labels"] = signal.matchers(checked, by)
        except ValueError as exc:
            raise InvalidInput(f"signal {name}: {exc}") from None
        values["by"] = promql.grouping(dict.fromkeys(signal.metric_label(b) for b in by))
        inner = promql.substitute(signal.expr, values)
        for b in by:
            theirs = signal.metric_label(b)
            if b in signal.label_patterns:  # read back out of the label that names it
                regex = promql.quote(signal.label_patterns[b].capture())
                inner = f'label_replace({inner}, "{b}", "${{{CAPTURE}}}", "{theirs}", {regex})'
            elif theirs != b:  # results speak the playbooks' label names
                inner = f'label_replace({inner}, "{b}", "$1", "{theirs}", "(.*)")'
        if not by:
            return promql.tidy(f"{signal.aggregate}({inner})")
        return promql.tidy(f"{signal.aggregate} by ({', '.join(by)}) ({inner})")

    def source_query(self, name: str, labels: Mapping[str, object] = {}) -> str | None:
        """PromQL naming, in the label `runbook_source`, each source metric of `name` that has a series
        with these labels; None when the signal declares no sources."""
        signal = self.get(name)
        if not signal.sources:
            return None
        try:
            checked = {k: promql.check_label_value(k, v) for k, v in labels.items() if promql.check_label_name(k)}
            matchers = signal.matchers(checked)
        except ValueError as exc:
            raise InvalidInput(f"signal {name}: {exc}") from None
        selector = f'{{__name__=~"{"|".join(sorted(signal.sources))}",{matchers}}}'
        return promql.tidy(f'count by ({SOURCE_LABEL}) (label_replace({selector}, "{SOURCE_LABEL}", "$1", '
                           f'"__name__", "(.+)"))')


# -- loading --------------------------------------------------------------------------------


def bundled_profiles() -> list[str]:
    folder = importlib.resources.files("runbook.signals")
    return sorted(Path(str(p)).stem for p in folder.iterdir()
                  if str(p).endswith(".yaml") and Path(str(p)).name != "alerts.yaml")  # alerts.yaml: the alert table


def _profile_path(name: str, relative_to: Path | None = None) -> Path:
    if name in bundled_profiles():
        return Path(str(importlib.resources.files("runbook.signals") / f"{name}.yaml"))
    path = Path(name).expanduser()
    if relative_to is not None and not path.is_absolute():
        path = relative_to / path
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    raise InvalidInput(f"no signal profile {name!r}: use a bundled one ({', '.join(bundled_profiles())}) "
                       f"or the path of a profile file (.yaml)")


def _read_profile(path: Path) -> tuple[Profile, Any, str]:
    from runbook.files.problems import problems_from_validation_error
    from runbook.files.yamlsource import load_yaml, read_yaml_text

    label = _label(path)
    try:
        text = read_yaml_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read the signal profile {label}: {exc}") from None
    doc = load_yaml(text, file=label)
    problems = list(doc.problems)
    profile = None
    if not problems:
        try:
            profile = Profile.model_validate(doc.data if doc.data is not None else {})
        except pydantic.ValidationError as exc:
            problems = problems_from_validation_error(exc, file=label, positions=doc.positions, model=Profile)
    if problems or profile is None:
        _raise(f"the signal profile {label} is invalid", problems)
    return profile, doc.positions, label  # type: ignore[return-value]


def _label(path: Path) -> str:
    bundled = Path(str(importlib.resources.files("runbook.signals")))
    try:
        return f"<bundled>/signals/{path.resolve().relative_to(bundled.resolve())}"
    except ValueError:
        return str(path)


def _messages(exc: pydantic.ValidationError) -> str:
    return "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())


def _raise(what: str, problems: Sequence[Any]) -> None:
    raise InvalidInput(f"{what} ({len(problems)} problem(s)):\n" + "\n".join(p.format() for p in sorted(problems)))


@dataclasses.dataclass
class _Source:
    """Where a signal or param was written, for located problems."""

    file: str
    positions: Any
    base: tuple[str, ...]


def load_profile(name: str) -> tuple[str, dict[str, Param], dict[str, tuple[SignalSpec, str, _Source]]]:
    """A profile with what it extends merged in: (name, params, signals with their origin)."""
    seen: list[Path] = []
    chain: list[tuple[Profile, _Source]] = []
    path = _profile_path(name)
    while True:
        if path.resolve() in seen:
            raise InvalidInput(f"signal profile {path} extends itself (through {', '.join(map(str, seen))})")
        seen.append(path.resolve())
        profile, positions, label = _read_profile(path)
        chain.append((profile, _Source(label, positions, ())))
        if profile.extends is None:
            break
        path = _profile_path(profile.extends, relative_to=path.parent)
    params: dict[str, Param] = {}
    signals: dict[str, tuple[SignalSpec, str, _Source]] = {}
    for profile, source in reversed(chain):
        params.update(profile.params)
        signals.update({k: (v, f"profile {profile.name}", source) for k, v in profile.signals.items()})
    return chain[0][0].name, params, signals


def build_catalog(config: Any = None, *, profile: str | None = None) -> Catalog:
    """The catalog in effect: the profile (flag > config > default), params and overrides."""
    from runbook.files.problems import did_you_mean, problem, suggest

    section = config.section_model("signals", SignalsSection) if config is not None else SignalsSection()
    config_source = _Source(str(config.path) if config is not None and config.path else "<no config file>",
                            getattr(config, "positions", None), ("signals",))
    name, params, specs = load_profile(profile or section.profile)
    problems = []

    def report(source: _Source, path: tuple, message: str, hint: str = "", *, at_key: bool = False) -> None:
        full = source.base + path
        position = None
        if source.positions is not None:
            first, second = (source.positions.key, source.positions.value)
            if not at_key:
                first, second = second, first
            position = first(full) or second(full) or source.positions.nearest(full)[1]
        problems.append(problem("bad-value", file=source.file, position=position, path=full,
                                message=message, hint=hint))

    values: dict[str, str | None] = {}
    for key, param in params.items():
        values[key] = render_param(param.kind, param.default) if param.default is not None else None
    for key, raw in section.params.items():
        if key not in params:
            report(config_source, ("params", key), f"profile {name} has no param `{key}`",
                   did_you_mean(key, params), at_key=True)
            continue
        try:
            values[key] = render_param(params[key].kind, raw)
        except ValueError as exc:
            report(config_source, ("params", key), str(exc))
    for key, override in section.overrides.items():
        if key in specs:
            base, _, _ = specs[key]
            # dict(override): the given fields as they are (a label_patterns entry stays a LabelPattern)
            merged = base.model_copy(update={k: v for k, v in dict(override).items() if v is not None})
            if override.sources is None:  # a new expression keeps only the sources it still reads
                merged = merged.model_copy(update={"sources": {m: who for m, who in base.sources.items()
                                                               if promql.reads_metric(merged.expr, m)}})
            try:
                merged = SignalSpec.model_validate(merged.model_dump())
            except pydantic.ValidationError as exc:
                report(config_source, ("overrides", key), _messages(exc))
                continue
        elif override.expr is None or override.aggregate is None:
            close = suggest(key, specs)
            report(config_source, ("overrides", key),
                   f"`{key}` is not a signal of profile {name}, so it needs both `expr` and `aggregate`",
                   f"did you mean `{close}`?" if close else "", at_key=True)
            continue
        else:
            try:
                merged = SignalSpec(**{k: v for k, v in override.model_dump().items() if v is not None})
            except pydantic.ValidationError as exc:
                report(config_source, ("overrides", key), _messages(exc))
                continue
        specs[key] = (merged, "config file", config_source)
    for key, (spec, _, source) in specs.items():
        for placeholder in promql.placeholders(spec.expr):
            if placeholder not in params and placeholder not in RESERVED:
                where = ("overrides", key, "expr") if source is config_source else ("signals", key, "expr")
                report(source, where, f"unknown placeholder `{{{placeholder}}}` in the expression of {key}",
                       did_you_mean(placeholder, [*params, *RESERVED]))
    if problems:
        _raise("the signal catalog is invalid", problems)
    signals = {k: Signal(k, s.help, s.unit, s.aggregate, s.expr, dict(s.labels), origin, dict(s.sources),
                         dict(s.label_patterns), s.logs)
               for k, (s, origin, _) in sorted(specs.items())}
    return Catalog(name, dict(params), values, signals)
