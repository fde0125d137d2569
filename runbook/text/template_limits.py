"""Bounds on one template render: the size of every value it makes, its loop iterations, its time.

Checked inside the sandbox's hooks *before* an operation runs, so `'a' * 10**9` is refused, not
allocated; the time limit is a deadline checked in those hooks and at every loop step (no tracer, no
signal), so it holds in any thread.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from time import monotonic
from typing import Any

from runbook.errors import TemplateError

MAX_SIZE = 64 * 1024  # characters a render may produce; elements and characters a value may hold
MAX_INT_BITS = 4096  # an integer made by a template (about 1200 digits); more is never a param
MAX_STEPS = 1_000_000  # loop iterations, calls and attribute reads in one render
TIME_LIMIT = 2.0  # seconds one render may take
MACRO_CALL_STEPS = 100  # a macro call renders a whole body: charged so recursion meets the step bound first
_CLOCK_EVERY = 256  # steps between two reads of the clock
_DIGITS = re.compile(r"\d+")
_NESTED_FIELD = re.compile(r"\{[^{}]*\{")


class LimitExceeded(TemplateError):
    """A render went over one of its bounds; the message names which and how far."""


@dataclasses.dataclass
class Budget:
    """What one render may still spend; shared by every hook called while it runs."""

    steps: int = MAX_STEPS
    deadline: float = 0.0
    _until_clock: int = 0

    def step(self, count: int = 1) -> None:
        self.steps -= count
        if self.steps < 0:
            raise LimitExceeded(f"the template took more than {MAX_STEPS} steps (loop iterations and calls); "
                                "simplify it, or do the work in a step")
        self._until_clock -= count
        if self._until_clock <= 0:
            self._until_clock = _CLOCK_EVERY
            if monotonic() > self.deadline:
                raise LimitExceeded(f"the template took more than {TIME_LIMIT:g}s to render")


_CURRENT: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("runbook_template_budget", default=None)


@contextlib.contextmanager
def budget() -> Iterator[Budget]:
    """One budget for the render in hand; a render inside a render spends the outer one."""
    current = _CURRENT.get()
    if current is not None:
        yield current
        return
    fresh = Budget(deadline=monotonic() + TIME_LIMIT)
    token = _CURRENT.set(fresh)
    try:
        yield fresh
    finally:
        _CURRENT.reset(token)


def step(count: int = 1) -> None:
    current = _CURRENT.get()
    if current is not None:  # outside a render (constant folding at compile time) only sizes are checked
        current.step(count)


def size_of(value: Any, limit: int = MAX_SIZE) -> int:
    """Roughly the characters `value` renders to: string lengths, element counts, digits.

    Stops counting once past `limit`, so measuring a huge value costs no more than the limit.
    """
    total = 0
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, (str, bytes)):
            total += len(item)
        elif isinstance(item, bool) or item is None:
            total += 5
        elif isinstance(item, int):
            total += item.bit_length() * 3 // 10 + 1
        elif isinstance(item, float):
            total += 24
        elif isinstance(item, range):
            total += len(item) * (len(str(max(abs(item.start), abs(item.stop)))) + 2)
        elif isinstance(item, Mapping):
            total += 4 * len(item)
            if total <= limit:
                pending.extend(item.keys())
                pending.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += 2 * len(item)
            if total <= limit:
                pending.extend(item)
        else:
            total += 16
        if total > limit:
            return total
    return total


def check_size(value: Any, what: str) -> Any:
    size = size_of(value)
    if size > MAX_SIZE:
        raise LimitExceeded(f"{what} would be about {size} characters or more, over the cap of {MAX_SIZE}")
    return value


def _over(estimate: int, what: str) -> None:
    if estimate > MAX_SIZE:
        raise LimitExceeded(f"{what} would make about {estimate} characters or elements, over the cap of {MAX_SIZE}; "
                            "refused before it was computed")


def _sized(value: Any) -> bool:
    return isinstance(value, (str, bytes, list, tuple))


def check_binop(operator: str, left: Any, right: Any) -> None:
    """Refuse an operation whose result would be over a bound, before it is computed."""
    if operator == "*":
        if isinstance(left, int) and isinstance(right, int):
            if left.bit_length() + right.bit_length() > MAX_INT_BITS:
                raise LimitExceeded(f"a product of more than {MAX_INT_BITS} bits; refused before it was computed")
            return
        sequence, times = (left, right) if isinstance(right, int) else (right, left)
        if _sized(sequence) and isinstance(times, int) and times > 0:
            _over(size_of(sequence) * times, f"repeating a value of {size_of(sequence)} {times} times")
    elif operator == "**":
        if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
            if (left.bit_length() - 1) * right > MAX_INT_BITS:
                raise LimitExceeded(f"a power of more than {MAX_INT_BITS} bits; refused before it was computed")
    elif operator == "+":
        if _sized(left) and _sized(right):
            _over(size_of(left) + size_of(right), "joining two values")
    elif operator == "%" and isinstance(left, str):
        check_format(left, right if isinstance(right, tuple) else (right,), {}, star=True)


def check_format(template: str, args: Iterable[Any], kwargs: Mapping[str, Any], *, star: bool) -> None:
    """A format string's widths are spent before it runs: `'%999999999d'` or `'{:>{w}}'` with a huge w."""
    widths = sum(int(d) for d in _DIGITS.findall(template) if len(d) < 12) + \
        sum(MAX_SIZE + 1 for d in _DIGITS.findall(template) if len(d) >= 12)
    if (star and "*" in template) or (not star and _NESTED_FIELD.search(template)):
        widths += sum(abs(v) for v in [*args, *kwargs.values()] if isinstance(v, int))
    _over(len(template) + widths, "formatting with these widths")


def _width(args: tuple, kwargs: Mapping[str, Any], name: str, position: int, default: Any) -> Any:
    return kwargs.get(name, args[position] if len(args) > position else default)


def _replace_estimate(text: str, old: Any, new: Any) -> int:
    if not isinstance(old, str) or not isinstance(new, str):
        return len(text)
    hits = text.count(old) if old else len(text) + 1
    return len(text) + hits * len(new)


def _join_estimate(separator: str, items: list) -> int:
    return sum(size_of(i) for i in items) + len(separator) * max(len(items) - 1, 0)


def check_str_method(text: str, name: str, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Bound a str method that can grow its string; returns the arguments to call it with."""
    if name in ("ljust", "rjust", "center", "zfill"):
        width = _width(args, kwargs, "width", 0, 0)
        if isinstance(width, int):
            _over(width, f"str.{name}({width})")
    elif name == "expandtabs":
        tabsize = _width(args, kwargs, "tabsize", 0, 8)
        if isinstance(tabsize, int):
            _over(len(text) + text.count("\t") * tabsize, f"str.expandtabs({tabsize})")
    elif name == "replace" and args:
        _over(_replace_estimate(text, args[0], args[1] if len(args) > 1 else ""), "str.replace")
    elif name == "join" and args:
        items = list(args[0])  # a generator would be spent by measuring it: join the list instead
        _over(_join_estimate(text, items), "str.join")
        return (items, *args[1:]), kwargs
    elif name in ("format", "format_map"):
        values = args[0] if name == "format_map" and args and isinstance(args[0], Mapping) else {}
        check_format(text, args if name == "format" else (), {**kwargs, **values}, star=False)
    return args, kwargs


# -- filters: Jinja2 calls them directly, not through the sandbox's `call`, so each is wrapped ------


def _filter_estimates() -> dict[str, Callable[..., None]]:
    def center(value: Any, width: Any = 80, *_: Any, **__: Any) -> None:
        if isinstance(width, int):
            _over(max(width, len(str(value)) if isinstance(value, str) else 0), f"center({width})")

    def indent(value: Any, width: Any = 4, *_: Any, **__: Any) -> None:
        if isinstance(value, str):
            per_line = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
            _over(len(value) + (value.count("\n") + 1) * per_line, "indent")

    def wordwrap(value: Any, width: Any = 79, break_long_words: Any = True, wrapstring: Any = None,
                 *_: Any, **kw: Any) -> None:
        wrapstring = kw.get("wrapstring", wrapstring)
        width = kw.get("width", width)
        if isinstance(value, str) and isinstance(width, int) and width > 0:
            breaks = len(value) // width + value.count("\n") + 1
            _over(len(value) + breaks * len(wrapstring if isinstance(wrapstring, str) else "\n"), "wordwrap")

    def format_(value: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(value, str):
            check_format(value, args, kwargs, star=True)

    def replace(text: Any, old: Any = "", new: Any = "", *_: Any, **__: Any) -> None:
        if isinstance(text, str):
            _over(_replace_estimate(text, old, new), "replace")

    def count_argument(name: str, position: int) -> Callable[..., None]:
        def check(*args: Any, **kwargs: Any) -> None:
            value = kwargs.get(name, args[position] if len(args) > position else 0)
            if isinstance(value, int):
                _over(value, f"{name}={value}")
        return check

    return {"center": center, "indent": indent, "wordwrap": wordwrap, "format": format_, "replace": replace,
            "batch": count_argument("linecount", 1), "slice": count_argument("slices", 1)}


def guard_filters(filters: dict[str, Callable[..., Any]]) -> None:
    """Wrap every filter: a step of the budget, a size estimate where one can grow, its result measured."""
    estimates = _filter_estimates()
    for name, original in list(filters.items()):
        if name == "join":
            original = _materialized_join(original)
        filters[name] = _guarded(name, original, estimates.get(name))


def _guarded(name: str, original: Callable[..., Any], estimate: Callable[..., None] | None) -> Callable[..., Any]:
    @functools.wraps(original)  # keeps jinja_pass_arg, so context/environment are still passed
    def guarded(*args: Any, **kwargs: Any) -> Any:
        step()
        if estimate is not None:
            estimate(*_without_passed(original, args), **kwargs)
        result = original(*args, **kwargs)
        if _sized(result):
            check_size(result, f"the filter {name}")
        return result

    return guarded


def _without_passed(original: Callable[..., Any], args: tuple) -> tuple:
    """The filter's own arguments, without the context or environment Jinja2 passes first."""
    return args[1:] if getattr(original, "jinja_pass_arg", None) is not None else args


def _materialized_join(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def join(eval_ctx: Any, value: Any, d: str = "", attribute: Any = None) -> Any:
        items = list(value)
        if attribute is None:
            _over(_join_estimate(d if isinstance(d, str) else "", items), "join")
        return original(eval_ctx, items, d, attribute)

    return join


def counted(iterable: Iterable[Any]) -> Iterator[Any]:
    """A `{% for %}` loop's items, each one a step of the render's budget (nested loops multiply)."""
    for item in iterable:
        step()
        yield item


def bounded_range(*args: int) -> range:
    numbers = range(*args)
    if len(numbers) > MAX_SIZE:
        raise LimitExceeded(f"range of {len(numbers)} numbers, over the cap of {MAX_SIZE}")
    return numbers
