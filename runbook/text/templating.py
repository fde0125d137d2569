"""Templated step params and `when` conditions, in an immutable Jinja2 sandbox.

A missing value is an error, never an empty string (an empty label selector must never mean
"every pod"), and every render is bounded (`template_limits`: size, steps, time), whole expressions
included. A string that is one `{{ expression }}` keeps the expression's type, so
`{{ steps['pods'].result.not_ready }}` stays a list.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator
from jinja2.sandbox import ImmutableSandboxedEnvironment

from runbook.text import template_limits as limits
from runbook.errors import TemplateError

MAX_RENDERED = limits.MAX_SIZE
_WHOLE_EXPRESSION = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\}\}).)*)\}\}\s*$", re.DOTALL)
_STEP_REFERENCE = re.compile(r"""steps\[\s*['"]([^'"]+)['"]\s*\]|steps\.([A-Za-z_][A-Za-z0-9_]*)""")
_PARAM_REFERENCE = re.compile(r"params\.([A-Za-z_][A-Za-z0-9_]*)|params\[\s*['\"]([^'\"]+)['\"]\s*\]")


class _CountedLoops(CodeGenerator):
    """Every `{% for %}` iterates through `counted`, so nested loops spend the render's step budget."""

    def visit_Template(self, node: nodes.Template, frame: Any = None) -> None:
        for loop in node.find_all(nodes.For):
            loop.iter = nodes.Filter(loop.iter, "_counted", [], [], None, None, lineno=loop.iter.lineno)
        super().visit_Template(node, frame)


class _Env(ImmutableSandboxedEnvironment):
    """The sandbox, with each hook spending the render's budget and refusing what would be too big."""

    code_generator_class = _CountedLoops
    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        limits.step()
        limits.check_binop(operator, left, right)
        return super().call_binop(context, operator, left, right)

    def getattr(self, obj: Any, attribute: str) -> Any:
        limits.step()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        limits.step()
        return super().getitem(obj, argument)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 (Jinja2's form)
        limits.step(limits.MACRO_CALL_STEPS if isinstance(__obj, jinja2.runtime.Macro) else 1)
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str):
            args, kwargs = limits.check_str_method(owner, getattr(__obj, "__name__", ""), args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        if isinstance(result, (str, list, tuple)):
            limits.check_size(result, "the call's result")
        return result


def _finalize(value: Any) -> Any:
    # Before Jinja2 turns a `{{ value }}` into text: str() of a huge list would allocate it all.
    return limits.check_size(value, "a value in the text")


_ENV = _Env(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True, finalize=_finalize)
_ENV.filters["percent"] = lambda v, digits=0: f"{float(v) * 100:.{digits}f}%"
limits.guard_filters(_ENV.filters)
_ENV.filters["_counted"] = limits.counted
_ENV.globals["range"] = limits.bounded_range
del _ENV.globals["lipsum"]  # n paragraphs of filler text: nothing a playbook needs, and unbounded


# Compiled once per source: a playbook's templates repeat on every step, run and fan-out, and
# compiling one costs more than rendering it. A compiled template holds no render's state.
COMPILED_KEPT = 1024


@functools.lru_cache(maxsize=COMPILED_KEPT)
def _expression(expression: str) -> Any:
    return _ENV.compile_expression(expression, undefined_to_none=False)


@functools.lru_cache(maxsize=COMPILED_KEPT)
def _template(source: str) -> jinja2.Template:
    return _ENV.from_string(source)


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
    if isinstance(exc, limits.LimitExceeded):
        return TemplateError(f"{exc} in {source[:80]!r}")
    if isinstance(exc, RecursionError):
        return TemplateError(f"the template recurses too deeply in {source[:80]!r}")
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
        with limits.budget():
            compiled = _expression(expression)
            value = limits.check_size(compiled(**context), "the expression's value")
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
        return _render_text(value, context)
    if isinstance(value, Mapping):
        return {k: render_value(v, context) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [render_value(v, context) for v in value]
    return value


def _render_text(source: str, context: Mapping[str, Any]) -> str:
    """Render piece by piece, stopping at the cap: joining first would allocate the whole output."""
    pieces: list[str] = []
    length = 0
    try:
        with limits.budget():
            for piece in _template(source).generate(**context):
                length += len(piece)
                if length > MAX_RENDERED:
                    raise TemplateError(f"{source[:60]!r} rendered to more than {MAX_RENDERED} characters, "
                                        f"over the cap of {MAX_RENDERED}")
                pieces.append(piece)
    except limits.LimitExceeded as exc:  # a TemplateError of its own: named with its source like the others
        raise _explain(exc, source) from exc
    except TemplateError:
        raise
    except Exception as exc:
        raise _explain(exc, source) from exc
    return "".join(pieces)


def truthy(expression: str, context: Mapping[str, Any]) -> bool:
    return bool(evaluate(expression, context))
