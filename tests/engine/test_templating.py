"""Templates: sandboxed, strict about missing values, capped, and typed for whole expressions."""

from __future__ import annotations

import pytest

from runbook.engine import templating
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
