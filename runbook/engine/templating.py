"""Templated step params and `when` conditions, in an immutable Jinja2 sandbox.

A missing value is an error, never an empty string (an empty label selector must never mean
"every pod"), and rendered text is capped. A string that is one `{{ expression }}` keeps the
expression's type, so `{{ steps['pods'].result.not_ready }}` stays a list.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from runbook.errors import TemplateError

MAX_RENDERED = 64 * 1024
_WHOLE_EXPRESSION = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\}\}).)*)\}\}\s*$", re.DOTALL)
_STEP_REFERENCE = re.compile(r"""steps\[\s*['"]([^'"]+)['"]\s*\]|steps\.([A-Za-z_][A-Za-z0-9_]*)""")
_PARAM_REFERENCE = re.compile(r"params\.([A-Za-z_][A-Za-z0-9_]*)|params\[\s*['\"]([^'\"]+)['\"]\s*\]")


class _Env(ImmutableSandboxedEnvironment):
    pass


_ENV = _Env(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True)
_ENV.filters["percent"] = lambda v, digits=0: f"{float(v) * 100:.{digits}f}%"


def is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def check_syntax(text: str) -> str | None:
    """The syntax error in `text`, or None."""
    try:
        _ENV.parse(text)
    except jinja2.TemplateSyntaxError as exc:
        return f"{exc.message} (line {exc.lineno} of the template)"
    return None


def check_expression(text: str) -> str | None:
    try:
        _ENV.compile_expression(text)
    except jinja2.TemplateSyntaxError as exc:
        return exc.message
    return None


def step_references(text: str) -> set[str]:
    return {a or b for a, b in _STEP_REFERENCE.findall(text)}


def param_references(text: str) -> set[str]:
    return {a or b for a, b in _PARAM_REFERENCE.findall(text)}


def _explain(exc: Exception, source: str) -> TemplateError:
    if isinstance(exc, jinja2.UndefinedError):
        return TemplateError(f"{exc.message} in {source!r}; the value is missing (give it as a param, or guard the step with `when`)")
    if isinstance(exc, jinja2.exceptions.SecurityError):
        return TemplateError(f"not allowed in a template: {exc} in {source!r}")
    if isinstance(exc, jinja2.TemplateSyntaxError):
        return TemplateError(f"template syntax error: {exc.message} in {source!r}")
    return TemplateError(f"{type(exc).__name__}: {exc} in {source!r}")


def evaluate(expression: str, context: Mapping[str, Any]) -> Any:
    """The value of one Jinja2 expression (a `when`, or a whole `{{ … }}` param)."""
    try:
        compiled = _ENV.compile_expression(expression, undefined_to_none=False)
        value = compiled(**context)
    except Exception as exc:  # Jinja2 raises many kinds; each becomes one clear TemplateError
        raise _explain(exc, expression) from exc
    if isinstance(value, jinja2.Undefined):
        raise TemplateError(f"{expression!r} is undefined; the value is missing")
    return value


def render_value(value: Any, context: Mapping[str, Any]) -> Any:
    """Render every template inside `value` (strings, lists, mappings), keeping plain values."""
    if isinstance(value, str):
        if not is_template(value):
            return value
        whole = _WHOLE_EXPRESSION.match(value)
        if whole:
            return evaluate(whole.group("expr"), context)
        try:
            text = _ENV.from_string(value).render(**context)
        except Exception as exc:
            raise _explain(exc, value) from exc
        if len(text) > MAX_RENDERED:
            raise TemplateError(f"{value[:60]!r} rendered to {len(text)} characters, over the cap of {MAX_RENDERED}")
        return text
    if isinstance(value, Mapping):
        return {k: render_value(v, context) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [render_value(v, context) for v in value]
    return value


def truthy(expression: str, context: Mapping[str, Any]) -> bool:
    return bool(evaluate(expression, context))
