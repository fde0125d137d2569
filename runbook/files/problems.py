"""Problems found in a playbook: each located, coded, explained in the playbook's words, with a fix.
Also turns pydantic validation errors into such problems, so no Python jargon reaches on-call."""

from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import enum
import json
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import pydantic
from pydantic import AliasChoices, BaseModel

from runbook.files.positions import Positions
from runbook.record.redaction import looks_secret

__all__ = [
    "CODES",
    "Problem",
    "ValidationProblem",
    "did_you_mean",
    "format_report",
    "path_to_str",
    "problem",
    "problems_from_validation_error",
    "render_value",
    "suggest",
]

# Stable codes: people grep for them and docs link to them, so never renumber one.
CODES: dict[str, str] = {
    "yaml-syntax": "RB100",
    "duplicate-key": "RB101",
    "unknown-action": "RB102",
    "unknown-key": "RB103",
    "missing-key": "RB104",
    "bad-type": "RB110",
    "bad-value": "RB111",
    "bad-template": "RB120",
    "duplicate-id": "RB130",
    "unknown-step": "RB131",
    "unknown-signal": "RB132",
    "not-a-playbook": "RB140",
}

# A hint sharing the message line keeps the report compact; past this it gets its own line.
_ONE_LINE_LIMIT = 100
_VALUE_LIMIT = 40
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


@dataclasses.dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with an input file. Field order is the sort order: file, line, column."""

    file: str
    line: int  # 1-based; 0 when unknown
    column: int  # 1-based; 0 when unknown
    path: str  # "steps[1].with.replicas"; "" for the whole document
    code: str  # "RB102"
    slug: str  # "unknown-action"
    message: str
    hint: str = ""

    @property
    def location(self) -> str:
        if self.line <= 0:
            return self.file
        if self.column <= 0:
            return f"{self.file}:{self.line}"
        return f"{self.file}:{self.line}:{self.column}"

    def format(self, *, code: bool = True) -> str:
        """Two lines (three when the hint is long): where and what, then the explanation.

        `code=False` leaves out `[RB… slug]`, whose names are a playbook's, for other files.
        """
        head = "  ".join(part for part in (self.location, self.path) if part)
        lines = [f"{head}  [{self.code} {self.slug}]" if code else head]
        message = self.message
        hint = self.hint
        if hint and "\n" not in message and len(message) + 2 + len(hint) <= _ONE_LINE_LIMIT:
            message, hint = f"{message}; {hint}", ""
        lines.extend("    " + line for line in message.splitlines() or [""])
        if hint:
            lines.extend("    hint: " + line if i == 0 else "          " + line
                         for i, line in enumerate(hint.splitlines()))
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "path": self.path,
            "code": self.code,
            "slug": self.slug,
            "message": self.message,
            "hint": self.hint,
        }


class _HasPosition(Protocol):
    line: int
    column: int


def problem(
    slug: str,
    *,
    file: str,
    position: _HasPosition | None,
    path: str | Sequence[str | int],
    message: str,
    hint: str = "",
) -> Problem:
    """Build a Problem from a slug; `path` may be a string or a path tuple."""
    try:
        code = CODES[slug]
    except KeyError:
        raise ValueError(f"unknown problem slug {slug!r}; known: {', '.join(CODES)}") from None
    if not isinstance(path, str):
        path = path_to_str(path)
    line = position.line if position is not None else 0
    column = position.column if position is not None else 0
    return Problem(file, line, column, path, code, slug, message, hint)


class ValidationProblem(ValueError):
    """Raise from a pydantic validator to control the problem reported (slug, hint, exact place).

    `at` is a path relative to where the validator runs (a model validator on the playbook can
    point at ("steps", 3, "id")); `also` carries further problems found by the same check, since
    pydantic keeps only one exception per validator.
    """

    def __init__(
        self,
        message: str,
        *,
        slug: str = "bad-value",
        hint: str = "",
        at: Sequence[str | int] = (),
        also: Iterable[ValidationProblem] = (),
    ):
        if slug not in CODES:
            raise ValueError(f"unknown problem slug {slug!r}")
        super().__init__(message)
        self.message = message
        self.slug = slug
        self.hint = hint
        self.at = tuple(at)
        self.also = tuple(also)


def path_to_str(path: Sequence[str | int]) -> str:
    """("steps", 1, "with", "replicas") -> "steps[1].with.replicas"; odd keys go in ["…"]."""
    out = []
    for item in path:
        if isinstance(item, int) and not isinstance(item, bool):
            out.append(f"[{item}]")
        elif _PLAIN_KEY.match(str(item)):
            out.append(f".{item}" if out else str(item))
        else:
            # Keys such as "app.kubernetes.io/name" would read as nesting with dots.
            out.append(f"[{json.dumps(str(item), ensure_ascii=False)}]")
    return "".join(out)


def suggest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest to `name`, or None when nothing is close enough to be a typo."""
    names = [c for c in dict.fromkeys(candidates) if isinstance(c, str)]
    for candidate in names:  # case slips are the commonest typo and difflib scores them low
        if candidate.lower() == name.lower():
            return candidate
    found = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """"did you mean `k8s.scale`?", or the full list when no candidate is close; "" if none."""
    names = list(dict.fromkeys(str(c) for c in candidates))
    if not names:
        return ""
    close = suggest(name, names)
    if close is not None:
        return f"did you mean `{close}`?"
    return "expected one of: " + _one_of(names)


def _one_of(values: Iterable[Any]) -> str:
    shown = [v if isinstance(v, str) else render_value(v) for v in values]
    if len(shown) > 15:  # a wall of names helps nobody; the docs list them all
        return ", ".join(shown[:15]) + f", … ({len(shown) - 15} more)"
    return ", ".join(shown)


def render_value(value: Any, *, limit: int = _VALUE_LIMIT) -> str:
    """A found value as the playbook author would recognise it (YAML spelling, kept short)."""
    if value is None:
        return "an empty value"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        text = repr(value)
    elif isinstance(value, str):
        text = value if len(value) <= limit else value[: limit - 1] + "…"
        return json.dumps(text, ensure_ascii=False)
    elif isinstance(value, (dt.date, dt.datetime)):
        # Unquoted dates become date objects in YAML; saying so explains "expected text".
        kind = "a date and time" if isinstance(value, dt.datetime) else "a date"
        return f"{kind} ({value.isoformat()})"
    elif isinstance(value, Mapping):
        return "a mapping" if value else "an empty mapping"
    elif isinstance(value, (list, tuple, set, frozenset)):
        return "a list" if value else "an empty list"
    elif isinstance(value, (bytes, bytearray)):
        return "binary data"
    elif isinstance(value, enum.Enum):
        text = str(value.value)
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _found(value: Any, path: Sequence[str | int]) -> str:
    # Error output lands in chat and tickets: a secret must never be echoed, even a wrong one.
    # The journal's detector decides, so a report hides exactly what the journal would.
    if any(isinstance(p, str) and looks_secret(p) for p in path):
        return "a value"
    return render_value(value)


# ---------------------------------------------------------------------------------------------
# pydantic errors -> problems

_EXPECTED_KIND: dict[str, str] = {}
for _types, _phrase in (
    (("int_type", "int_parsing", "int_from_float", "int_parsing_size"), "a whole number"),
    (("float_type", "float_parsing", "decimal_type", "decimal_parsing"), "a number"),
    (("finite_number",), "a finite number"),
    (("bool_type", "bool_parsing"), "true or false"),
    (("string_type", "string_unicode", "string_sub_type"), "text"),
    (("list_type", "tuple_type", "set_type", "frozen_set_type", "iterable_type"), "a list"),
    (("dict_type", "model_type", "model_attributes_type", "dataclass_type", "mapping_type"),
     "a mapping"),
    (("none_required",), "an empty value"),
    (("date_type", "date_parsing", "date_from_datetime_parsing", "date_from_datetime_inexact"),
     "a date (YYYY-MM-DD)"),
    (("datetime_type", "datetime_parsing", "datetime_from_date_parsing", "datetime_object_invalid"),
     "a date and time"),
    (("time_type", "time_parsing"), "a time of day"),
    (("timedelta_type", "timedelta_parsing"), "a duration"),
    (("url_type", "url_parsing", "url_syntax_violation"), "a URL"),
):
    for _type in _types:
        _EXPECTED_KIND[_type] = _phrase
del _types, _phrase, _type

_BOUNDS = {
    "greater_than": ("gt", ">"),
    "greater_than_equal": ("ge", "≥"),
    "less_than": ("lt", "<"),
    "less_than_equal": ("le", "≤"),
}
_MISSING_TYPES = {"missing", "missing_argument", "missing_keyword_only_argument",
                  "missing_positional_only_argument"}
_EXTRA_TYPES = {"extra_forbidden", "unexpected_keyword_argument"}
# Items pydantic puts in `loc` that name a schema, not a place in the data.
_SCHEMA_TAG = re.compile(r"^[a-z][a-z0-9_-]*\[.*\]$")


@dataclasses.dataclass
class _Record:
    error: dict[str, Any]
    path: tuple[str | int, ...]  # data path, base_path included, schema tags removed
    annotation: Any  # type expected at `path`, when the model walk could tell
    parent: type[BaseModel] | None  # model holding the last key of `path`, when known
    unions: list[tuple[tuple[str | int, ...], str]]  # (path of the union, member tag) crossed


def problems_from_validation_error(
    error: pydantic.ValidationError,
    *,
    file: str,
    positions: Positions | None,
    base_path: Sequence[str | int] = (),
    model: type[BaseModel] | Any | None = None,
) -> list[Problem]:
    """One Problem per pydantic error (fewer for unions), located through `positions`.

    `model` is what was validated (a BaseModel class or any annotation); with it, union member
    tags are told apart from keys and unknown-key hints list the keys that are allowed.
    """
    base = tuple(base_path)
    records = [_record(err, base, positions, model) for err in error.errors(include_url=False)]
    records, merged = _resolve_unions(records)
    out: list[Problem] = list(_merged_problem(m, file, positions) for m in merged)
    for record in records:
        out.extend(_convert(record, file, positions))
    return sorted(set(out))


def _record(
    err: dict[str, Any],
    base: tuple[str | int, ...],
    positions: Positions | None,
    model: Any,
) -> _Record:
    loc = list(err.get("loc", ()))
    kind = err.get("type", "")
    data: list[str | int] = []
    unions: list[tuple[tuple[str | int, ...], str]] = []
    annotation = model
    parent: type[BaseModel] | None = None
    i = 0
    while i < len(loc):
        item = loc[i]
        last = i == len(loc) - 1
        here = base + tuple(data)
        if item == "[key]":  # a dict key failed; the place is the entry itself
            i += 1
            continue
        ann = _strip(annotation) if annotation is not None else None
        if ann is not None and _is_union(ann):
            # pydantic always names the member (or the discriminator's tag) after a union.
            unions.append((here, str(item)))
            annotation = _union_member(ann, item)
            parent = None
            i += 1
            continue
        if ann is None and _looks_like_tag(item, here, last, kind, positions):
            unions.append((here, str(item)))
            i += 1
            continue
        annotation, parent = _step_into(ann, item)
        data.append(item)
        i += 1
    return _Record(err, base + tuple(data), annotation, parent, unions)


def _looks_like_tag(
    item: Any, here: tuple[str | int, ...], last: bool, kind: str, positions: Positions | None
) -> bool:
    """Without a model, a string in `loc` that is not in the data names a union member."""
    if not isinstance(item, str):
        return False
    if positions is None or len(positions) == 0:
        return bool(_SCHEMA_TAG.match(item))
    if positions.key(here + (item,)) is not None or positions.value(here + (item,)) is not None:
        return False
    # Only a missing key is legitimately absent from the data.
    return not (last and kind in _MISSING_TYPES)


def _strip(ann: Any) -> Any:
    """Annotated[X, …] -> X and Optional[X] -> X: neither adds an item to pydantic's loc."""
    while True:
        origin = typing.get_origin(ann)
        if origin is typing.Annotated:
            ann = typing.get_args(ann)[0]
            continue
        if origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(ann) if a is not type(None)]
            if len(members) == 1:
                ann = members[0]
                continue
        return ann


def _is_union(ann: Any) -> bool:
    return typing.get_origin(ann) in (typing.Union, types.UnionType)


def _is_model(ann: Any) -> bool:
    return isinstance(ann, type) and issubclass(ann, BaseModel)


def _union_member(ann: Any, tag: Any) -> Any:
    members = [_strip(m) for m in typing.get_args(ann) if m is not type(None)]
    tag = str(tag)
    head = tag.split("[", 1)[0]
    for member in members:
        origin = typing.get_origin(member)
        if _is_model(member) and member.__name__ == tag:
            return member
        if origin is typing.Literal and head == "literal":
            return member
        name = getattr(origin or member, "__name__", None)
        if name is not None and name.lower() == head.lower():
            return member
    for member in members:  # a discriminated union names the member by its tag value
        if _is_model(member) and any(tag in _literal_values(f.annotation)
                                     for f in member.model_fields.values()):
            return member
    return None


def _literal_values(ann: Any) -> list[Any]:
    ann = _strip(ann)
    if typing.get_origin(ann) is typing.Literal:
        return [str(v) if isinstance(v, enum.Enum) else v for v in typing.get_args(ann)]
    if isinstance(ann, type) and issubclass(ann, enum.Enum):
        return [m.value for m in ann]
    if _is_union(ann):
        values: list[Any] = []
        for member in typing.get_args(ann):
            values.extend(v for v in _literal_values(member) if v not in values)
        return values
    return []


def _step_into(ann: Any, item: Any) -> tuple[Any, type[BaseModel] | None]:
    """The annotation of `item` inside `ann`, and the model holding it (for key hints)."""
    if ann is None:
        return None, None
    if _is_model(ann):
        found = _field(ann, item)
        return (found[1].annotation if found else None), ann
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if origin in (list, set, frozenset, Sequence, typing.Sequence) or (
        origin is tuple and len(args) == 2 and args[1] is Ellipsis
    ):
        return (args[0] if args else None), None
    if origin is tuple and isinstance(item, int):
        return (args[item] if item < len(args) else None), None
    if origin in (dict, Mapping, typing.Mapping):
        return (args[1] if len(args) == 2 else None), None
    return None, None


def _field_key(name: str, info: Any) -> str:
    """The key a playbook author writes for a field: its alias when it has one."""
    alias = info.validation_alias
    if isinstance(alias, str):
        return alias
    if isinstance(alias, AliasChoices):
        for choice in alias.choices:
            if isinstance(choice, str):
                return choice
    return info.alias or name


def _field(model: type[BaseModel], key: Any) -> tuple[str, Any] | None:
    fields = model.model_fields
    for name, info in fields.items():
        if _field_key(name, info) == key:
            return name, info
    for name, info in fields.items():
        if name == key or info.alias == key:
            return name, info
    return None


def _allowed_keys(model: type[BaseModel] | None) -> list[str]:
    if model is None:
        return []
    return [_field_key(name, info) for name, info in model.model_fields.items()]


def _resolve_unions(records: list[_Record]) -> tuple[list[_Record], list[list[_Record]]]:
    """Keep the errors of the union member the input most likely meant.

    pydantic reports every member's failures; an author wrote one of them. A member whose
    errors are all at the union itself did not even match the shape, so a member with deeper
    errors wins, and among those the one with the fewest. If no member matched the shape, the
    failures merge into one "expected A or B" problem.
    """
    merged: list[list[_Record]] = []
    while True:
        first = next((r for r in records if r.unions), None)
        if first is None:
            return records, merged
        where = first.unions[0][0]
        group = [r for r in records if r.unions and r.unions[0][0] == where]
        rest = [r for r in records if not (r.unions and r.unions[0][0] == where)]
        by_tag: dict[str, list[_Record]] = {}
        for record in group:
            by_tag.setdefault(record.unions[0][1], []).append(record)
        deep = [rs for rs in by_tag.values() if any(r.path != where for r in rs)]
        if len(by_tag) == 1:
            chosen = group
        elif deep:
            chosen = min(deep, key=len)
        else:
            merged.append(group)
            records = rest
            continue
        for record in chosen:
            record.unions = record.unions[1:]
        records = rest + chosen


def _expected_phrase(record: _Record) -> str:
    err = record.error
    kind = err.get("type", "")
    if kind in _EXPECTED_KIND:
        return _EXPECTED_KIND[kind]
    if kind in ("literal_error", "enum"):
        return "one of: " + _one_of(_choices(record))
    return _lower_first(err.get("msg", "a valid value"))


def _merged_problem(group: list[_Record], file: str, positions: Positions | None) -> Problem:
    phrases = list(dict.fromkeys(_expected_phrase(r) for r in group))
    first = group[0]
    slug = "bad-type" if all(r.error.get("type") in _EXPECTED_KIND for r in group) else "bad-value"
    found = _found(first.error.get("input"), first.path)
    return problem(
        slug,
        file=file,
        position=_locate(positions, first.path, prefer="value"),
        path=first.path,
        message=f"expected {' or '.join(phrases)}, found {found}",
    )


def _choices(record: _Record) -> list[Any]:
    values = _literal_values(record.annotation) if record.annotation is not None else []
    if values:
        return values
    expected = (record.error.get("ctx") or {}).get("expected", "")
    return _parse_reprs(expected) or [expected]


def _parse_reprs(text: str) -> list[str]:
    # pydantic renders choices as "'a', 'b' or 'c'"; pull the quoted items back out.
    return [m.group(1) or m.group(2) for m in re.finditer(r"'((?:[^'\\]|\\.)*)'|\b(\d+)\b", text)]


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:] if text else text


def _locate(positions: Positions | None, path: tuple[str | int, ...], *, prefer: str):
    """Where to send the reader: the value (or key) itself, else the nearest enclosing entry."""
    if positions is None:
        return None
    exact = positions.value(path) if prefer == "value" else positions.key(path)
    if exact is None:
        exact = positions.key(path) if prefer == "value" else positions.value(path)
    if exact is not None:
        return exact
    return positions.nearest(path)[1]


def _convert(record: _Record, file: str, positions: Positions | None) -> list[Problem]:
    err = record.error
    kind: str = err.get("type", "")
    ctx: dict[str, Any] = err.get("ctx") or {}
    path = record.path
    value = err.get("input")

    def make(slug: str, message: str, hint: str = "", *, at=path, prefer="value") -> Problem:
        return problem(slug, file=file, position=_locate(positions, at, prefer=prefer),
                       path=at, message=message, hint=hint)

    if kind in _EXTRA_TYPES:
        key = str(path[-1]) if path else "?"
        allowed = _allowed_keys(record.parent)
        hint = did_you_mean(key, allowed) if allowed else "remove it, or check its indentation"
        return [make("unknown-key", f"unknown key `{key}`", hint, prefer="key")]

    if kind in _MISSING_TYPES:
        key = str(path[-1]) if path else "?"
        hint = f"add `{key}: …`"
        found = _field(record.parent, key) if record.parent is not None else None
        if found and found[1].description:
            hint += f" ({found[1].description})"
        # The key is not in the file; point at the mapping that should hold it.
        return [make("missing-key", f"missing required key `{key}`", hint, at=path,
                     prefer="key")]

    if kind in ("union_tag_invalid", "union_tag_not_found"):
        return [_union_tag_problem(record, make, positions)]

    if kind in _EXPECTED_KIND:
        hint = ""
        if _EXPECTED_KIND[kind] == "text" and isinstance(value, (bool, int, float, dt.date)):
            hint = "YAML read this as something other than text; put it in quotes"
        return [make("bad-type", f"expected {_EXPECTED_KIND[kind]}, found {_found(value, path)}",
                     hint)]

    if kind in ("literal_error", "enum"):
        choices = _choices(record)
        close = suggest(str(value), [str(c) for c in choices]) if isinstance(value, str) else None
        return [make("bad-value",
                     f"expected one of: {_one_of(choices)}, found {_found(value, path)}",
                     f"did you mean `{close}`?" if close else "")]

    if kind in _BOUNDS:
        name, sign = _BOUNDS[kind]
        return [make("bad-value",
                     f"expected a number {sign} {ctx.get(name)}, found {_found(value, path)}")]

    if kind == "multiple_of":
        return [make("bad-value", f"expected a multiple of {ctx.get('multiple_of')}, "
                                  f"found {_found(value, path)}")]

    if kind in ("string_too_short", "string_too_long"):
        if kind == "string_too_short":
            n = ctx.get("min_length")
            wanted = "non-empty text" if n == 1 else f"text of at least {n} characters"
        else:
            wanted = f"text of at most {ctx.get('max_length')} characters"
        return [make("bad-value", f"expected {wanted}, found {_found(value, path)}")]

    if kind in ("too_short", "too_long"):
        bound = ctx.get("min_length") if kind == "too_short" else ctx.get("max_length")
        word = "at least" if kind == "too_short" else "at most"
        items = "item" if bound == 1 else "items"
        actual = ctx.get("actual_length")
        found = f"{actual}" if actual is not None else _found(value, path)
        return [make("bad-value", f"expected {word} {bound} {items}, found {found}")]

    if kind == "string_pattern_mismatch":
        return [make("bad-value", f"expected text matching `{ctx.get('pattern')}`, "
                                  f"found {_found(value, path)}")]

    if kind in ("value_error", "assertion_error"):
        exc = ctx.get("error")
        if isinstance(exc, ValidationProblem):
            return [make(p.slug, p.message, p.hint, at=path + p.at)
                    for p in (exc, *exc.also)]
        message = err.get("msg", "")
        for prefix in ("Value error, ", "Assertion failed, "):
            if message.startswith(prefix):
                message = message[len(prefix):]
        return [make("bad-value", message)]

    if kind in CODES:  # PydanticCustomError raised with one of our slugs as its type
        return [make(kind, err.get("msg", ""), str(ctx.get("hint", "")))]

    # Anything else: pydantic's words, but still located and with the found value.
    message = _lower_first(err.get("msg", "invalid value"))
    if value is not None and not isinstance(value, (Mapping, list)):
        message += f", found {_found(value, path)}"
    return [make("bad-value", message)]


def _union_tag_problem(record: _Record, make, positions: Positions | None) -> Problem:
    err = record.error
    ctx = err.get("ctx") or {}
    discriminator = str(ctx.get("discriminator", "")).strip("'\"")
    path = record.path
    # Point at the discriminating key itself when it is a plain key; that is what to edit.
    at = path + (discriminator,) if _PLAIN_KEY.match(discriminator) else path
    if err.get("type") == "union_tag_not_found":
        message = f"missing required key `{discriminator}`"
        return make("missing-key", message, f"add `{discriminator}: …`", at=at, prefer="key")
    tag = str(ctx.get("tag", ""))
    tags: list[Any] = []
    ann = _strip(record.annotation) if record.annotation is not None else None
    if ann is not None and _is_union(ann):
        for member in typing.get_args(ann):
            member = _strip(member)
            if _is_model(member):
                found = _field(member, discriminator)
                if found:
                    tags.extend(v for v in _literal_values(found[1].annotation) if v not in tags)
    if not tags:
        tags = _parse_reprs(str(ctx.get("expected_tags", "")))
    hint = did_you_mean(tag, [str(t) for t in tags])
    if discriminator == "uses":
        return make("unknown-action", f"no action named {json.dumps(tag)}", hint, at=at)
    return make("bad-value", f"unknown `{discriminator}` {json.dumps(tag)}", hint, at=at)


def format_report(problems: Sequence[Problem], *, file_label: str | None = None) -> str:
    """The text report: one header, then every problem in file order."""
    problems = sorted(set(problems))
    if not problems:
        return ""
    count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
    files = list(dict.fromkeys(p.file for p in problems))
    if file_label is not None or len(files) == 1:
        header = f"Error: {file_label or files[0]} is not a valid playbook ({count})"
    else:
        header = f"Error: {len(files)} files are not valid playbooks ({count})"
    return "\n".join([header, ""] + [p.format() for p in problems])
