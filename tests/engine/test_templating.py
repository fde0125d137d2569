"""Templates: sandboxed, strict about missing values, capped, and typed for whole expressions."""

from __future__ import annotations

import pytest

from runbook.text import templating
from runbook.errors import TemplateError

CONTEXT = {"params": {"namespace": "llm", "n": 3}, "steps": {"pods": {"result": {"not_ready": ["a", "b"]}}},
           "alert": {"labels": {"pod": "vllm-server-1"}}}


def test_a_whole_expression_keeps_its_type():
    assert templating.render_value("{{ steps['pods'].result.not_ready }}", CONTEXT) == ["a", "b"]
    assert templating.render_value("{{ params.n }}", CONTEXT) == 3


def test_mixed_text_renders_to_a_string():
    assert templating.render_value("ns={{ params.namespace }}", CONTEXT) == "ns=llm"


def test_nested_structures_render_throughout():
    assert templating.render_value({"labels": {"namespace": "{{ params.namespace }}"}, "by": ["pod"]}, CONTEXT) == \
        {"labels": {"namespace": "llm"}, "by": ["pod"]}


@pytest.mark.parametrize("text", ["{{ params.missing }}", "app={{ alert.labels.app }}", "{{ steps['nope'].result }}"])
def test_a_missing_value_is_an_error_never_empty(text):
    with pytest.raises(TemplateError, match="missing|undefined"):
        templating.render_value(text, CONTEXT)


def test_the_sandbox_refuses_mutation_and_internals():
    with pytest.raises(TemplateError):
        templating.render_value("{{ params.update({'namespace': 'kube-system'}) }}", CONTEXT)
    with pytest.raises(TemplateError):
        templating.render_value("{{ ''.__class__.__mro__ }}", CONTEXT)


def test_rendered_size_is_capped():
    with pytest.raises(TemplateError, match="cap"):
        templating.render_value("{% for i in range(100000) %}xxxxxxxxxx{% endfor %}", CONTEXT)


def test_references_are_found_for_validation():
    assert templating.step_references("steps['a'].result + steps.b") == {"a", "b"}
    assert templating.param_references("{{ params.x }} {{ params['y'] }}") == {"x", "y"}


# -- finding 6: every render is bounded in size, steps and time -----------------------------------

import concurrent.futures  # noqa: E402
import tracemalloc  # noqa: E402

from runbook.text import template_limits# noqa: E402


def _peak_bytes_of_refused(text: str) -> int:
    """Render `text`, which must be refused for a bound, and return the peak memory it took."""
    tracemalloc.start()
    try:
        with pytest.raises(TemplateError, match="cap|bits"):
            templating.render_value(text, CONTEXT)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_f6_a_whole_expression_is_capped_like_rendered_text():
    with pytest.raises(TemplateError, match="cap"):
        templating.render_value("{{ 'a' * 40000 ~ 'b' * 40000 }}", CONTEXT)
    with pytest.raises(TemplateError, match="cap"):
        templating.evaluate("'a' * 40000 ~ 'b' * 40000", CONTEXT)


@pytest.mark.parametrize("text", [
    "{{ ('a' * 10**8)|length }}",                      # a string multiplication
    "{{ (['a' * 1000] * 1000)|length }}",              # a list whose text would be a megabyte
    "{{ ('x' * 2000).join(['a'] * 30000)|length }}",   # a join whose separator repeats
    "{{ ('a' * 1000).replace('a', 'b' * 1000)|length }}",
    "{{ 'a'.ljust(10**8)|length }}",                   # padding methods
    "{{ ('a'|center(10**8))|length }}",                # …and filters, which the sandbox's `call` never sees
    "{{ ('%0100000000d' % 1)|length }}",               # a format width
])
def test_f6_a_value_over_the_cap_is_refused_before_it_is_computed(text):
    assert _peak_bytes_of_refused(text) < 2 * 1024 * 1024


def test_f6_a_range_longer_than_the_cap_is_refused():
    with pytest.raises(TemplateError, match="range"):
        templating.render_value("{{ range(70000)|length }}", CONTEXT)


def test_f6_a_huge_power_or_product_is_refused_before_it_is_computed():
    with pytest.raises(TemplateError, match="bits"):
        templating.render_value("{{ 10 ** 1000000 > 0 }}", CONTEXT)
    with pytest.raises(TemplateError, match="bits"):
        templating.render_value("{{ (10 ** 1000) * (10 ** 1000) > 0 }}", CONTEXT)


def test_f6_rendered_text_is_capped_as_it_streams_not_after_joining():
    # 2000 copies of a 60 000-character value: joined first, that is 120 MB.
    assert _peak_bytes_of_refused("{% set s = 'x' * 60000 %}{% for i in range(2000) %}{{ s }}{% endfor %}") \
        < 2 * 1024 * 1024


NESTED_LOOPS = "{% set r = range(300) %}{% for i in r %}{% for j in r %}{% for k in r %}{% endfor %}{% endfor %}{% endfor %}"


def test_f6_nested_loops_are_bounded_by_a_step_budget():
    with pytest.raises(TemplateError, match="steps"):
        templating.render_value(NESTED_LOOPS, CONTEXT)


def test_f6_recursive_macros_are_bounded_by_the_step_budget():
    text = ("{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
            "{{ f(25) }}")
    with pytest.raises(TemplateError, match="steps"):
        templating.render_value(text, CONTEXT)


class _SteppingClock:
    """A fake monotonic clock: every read is one second after the last."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_f6_a_render_has_a_time_limit(monkeypatch):
    monkeypatch.setattr(template_limits, "monotonic", _SteppingClock())
    with pytest.raises(TemplateError, match="s to render"):
        templating.render_value("{% for i in range(5000) %}{% endfor %}", CONTEXT)


def test_f6_the_bounds_hold_in_a_worker_thread():
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(templating.render_value, NESTED_LOOPS, CONTEXT)
        with pytest.raises(TemplateError, match="steps"):
            future.result()


def test_f6_ordinary_templates_still_render():
    assert templating.render_value("{% for p in steps['pods'].result.not_ready %}{{ p }},{% endfor %}", CONTEXT) \
        == "a,b,"
    assert templating.render_value("{{ params.n * 2 }}", CONTEXT) == 6
    assert templating.render_value("{{ '%d pods' % params.n }}", CONTEXT) == "3 pods"
    assert templating.render_value("{{ ['a', 'b']|join(', ') }}", CONTEXT) == "a, b"
    assert templating.render_value("{{ 0.9|percent }}", CONTEXT) == "90%"


def test_a_compiled_template_is_reused_and_holds_no_renders_state():
    templating._expression.cache_clear()
    templating._template.cache_clear()
    for n in (1, 2, 3):
        assert templating.render_value("{{ params.n * 2 }}", {"params": {"n": n}}) == n * 2
        assert templating.render_value("n={{ params.n }}", {"params": {"n": n}}) == f"n={n}"
    assert templating._expression.cache_info().hits == 2 and templating._template.cache_info().hits == 2
    with pytest.raises(TemplateError, match="missing"):
        templating.render_value("{{ params.n }}", {"params": {}})  # the cached expression still refuses a gap
