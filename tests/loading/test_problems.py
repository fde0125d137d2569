"""Tests for runbook.files.problems: the Problem record, its text and JSON forms, and how
pydantic errors become located problems in the playbook's own words."""

from __future__ import annotations

from typing import Annotated, Literal, Union

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from runbook.files.problems import (
    CODES,
    Problem,
    ValidationProblem,
    did_you_mean,
    format_report,
    path_to_str,
    problem,
    problems_from_validation_error,
    render_value,
    suggest,
)
from runbook.files.yamlsource import Position, load_yaml

# --- the record ---------------------------------------------------------------------------------


def test_codes_are_the_documented_ones():
    assert CODES == {
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


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ((), ""),
        (("steps", 1, "with", "replicas"), "steps[1].with.replicas"),
        ((0, "a"), "[0].a"),
        (("labels", "app.kubernetes.io/name"), 'labels["app.kubernetes.io/name"]'),
        (("on-failure",), "on-failure"),
    ],
)
def test_path_to_str(path, text):
    assert path_to_str(path) == text


def test_suggest_and_did_you_mean():
    actions = ["k8s.scale", "k8s.drain", "http.probe"]
    assert suggest("k8s.scael", actions) == "k8s.scale"
    assert suggest("K8S.DRAIN", actions) == "k8s.drain"
    assert suggest("zzz", actions) is None
    assert did_you_mean("k8s.scael", actions) == "did you mean `k8s.scale`?"
    assert did_you_mean("zzz", actions) == "expected one of: k8s.scale, k8s.drain, http.probe"
    assert did_you_mean("zzz", []) == ""


def test_problem_helper_and_text_form():
    p = problem("unknown-action", file="playbooks/oom.yaml", position=Position(14, 11),
                path=("steps", 1, "uses"), message='no action named "k8s.scael"',
                hint="did you mean `k8s.scale`?")
    assert p == Problem("playbooks/oom.yaml", 14, 11, "steps[1].uses", "RB102", "unknown-action",
                        'no action named "k8s.scael"', "did you mean `k8s.scale`?")
    assert p.format() == (
        "playbooks/oom.yaml:14:11  steps[1].uses  [RB102 unknown-action]\n"
        '    no action named "k8s.scael"; did you mean `k8s.scale`?'
    )


def test_long_hint_gets_its_own_line_and_unknown_position_is_omitted():
    p = problem("bad-value", file="pb.yaml", position=None, path="", message="m" * 60,
                hint="h" * 60)
    assert p.format() == f"pb.yaml  [RB111 bad-value]\n    {'m' * 60}\n    hint: {'h' * 60}"
    assert problem("bad-value", file="f", position=Position(3, 0), path="", message="x").location \
        == "f:3"


def test_unknown_slug_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown problem slug"):
        problem("nope", file="f", position=None, path="", message="x")


def test_to_json():
    p = problem("bad-type", file="pb.yaml", position=Position(17, 19),
                path=("steps", 1, "with", "replicas"), message='expected a whole number, found "one"')
    assert p.to_json() == {
        "file": "pb.yaml",
        "line": 17,
        "column": 19,
        "path": "steps[1].with.replicas",
        "code": "RB110",
        "slug": "bad-type",
        "message": 'expected a whole number, found "one"',
        "hint": "",
    }


def test_format_report_sorts_and_counts():
    late = problem("bad-type", file="pb.yaml", position=Position(17, 19), path="b", message="y")
    early = problem("unknown-key", file="pb.yaml", position=Position(3, 1), path="a", message="x")
    report = format_report([late, early])
    assert report.splitlines() == [
        "Error: pb.yaml is not a valid playbook (2 problems)",
        "",
        "pb.yaml:3:1  a  [RB103 unknown-key]",
        "    x",
        "pb.yaml:17:19  b  [RB110 bad-type]",
        "    y",
    ]
    assert format_report([early], file_label="oom").startswith(
        "Error: oom is not a valid playbook (1 problem)\n")
    assert format_report([]) == ""


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("one", '"one"'),
        ("x" * 100, '"' + "x" * 39 + '…"'),
        (None, "an empty value"),
        (True, "true"),
        (-1, "-1"),
        (1.5, "1.5"),
        ([1], "a list"),
        ({}, "an empty mapping"),
    ],
)
def test_render_value(value, text):
    assert render_value(value) == text


# --- pydantic errors ----------------------------------------------------------------------------


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    uses: str
    timeout: int = 60
    on_failure: Literal["stop", "continue", "rollback"] = Field("stop", alias="on-failure")
    with_: dict[str, int] = Field(default_factory=dict, alias="with")
    retries: int = Field(0, ge=0)

    @field_validator("uses")
    @classmethod
    def _known(cls, value: str) -> str:
        if value.startswith("shell."):
            raise ValueError("shell actions are not allowed in playbooks")
        return value


class Playbook(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    api_token: str = ""
    steps: list[Step]

    @model_validator(mode="after")
    def _unique_ids(self) -> Playbook:
        seen: dict[str, int] = {}
        found = []
        for index, step in enumerate(self.steps):
            if step.id in seen:
                found.append(ValidationProblem(
                    f"step id `{step.id}` is already used by steps[{seen[step.id]}]",
                    slug="duplicate-id", hint="give each step its own id",
                    at=("steps", index, "id")))
            seen.setdefault(step.id, index)
        if found:
            raise found[0] if len(found) == 1 else ValidationProblem(
                found[0].message, slug=found[0].slug, hint=found[0].hint, at=found[0].at,
                also=found[1:])
        return self


PLAYBOOK = """\
name: oom
api_token: [hunter2]
stpes: []
steps:
  - id: drain
    uses: k8s.drain
    timeout: one
    on-failure: rollbak
    wiht: {}
  - uses: shell.run
    retries: -1
    with:
      replicas: lots
"""


def check(text: str, model: type[BaseModel], *, tell_model: bool = True) -> list[tuple]:
    """Load, validate against `model`, convert; rows sorted as the report shows them."""
    doc = load_yaml(text, file="pb.yaml")
    assert doc.problems == ()
    with pytest.raises(ValidationError) as info:
        model.model_validate(doc.data)
    problems = problems_from_validation_error(info.value, file="pb.yaml", positions=doc.positions,
                                              model=model if tell_model else None)
    return [(p.line, p.column, p.path, p.code, p.slug, p.message, p.hint) for p in problems]


def test_playbook_errors_become_located_problems():
    assert check(PLAYBOOK, model=Playbook) == [
        (2, 12, "api_token", "RB110", "bad-type", "expected text, found a value", ""),
        (3, 1, "stpes", "RB103", "unknown-key", "unknown key `stpes`", "did you mean `steps`?"),
        (7, 14, "steps[0].timeout", "RB110", "bad-type",
         'expected a whole number, found "one"', ""),
        (8, 17, "steps[0].on-failure", "RB111", "bad-value",
         'expected one of: stop, continue, rollback, found "rollbak"', "did you mean `rollback`?"),
        (9, 5, "steps[0].wiht", "RB103", "unknown-key", "unknown key `wiht`",
         "did you mean `with`?"),
        (10, 5, "steps[1].id", "RB104", "missing-key", "missing required key `id`",
         "add `id: …`"),
        (10, 11, "steps[1].uses", "RB111", "bad-value",
         "shell actions are not allowed in playbooks", ""),
        (11, 14, "steps[1].retries", "RB111", "bad-value", "expected a number ≥ 0, found -1", ""),
        (13, 17, "steps[1].with.replicas", "RB110", "bad-type",
         'expected a whole number, found "lots"', ""),
    ]


def test_without_the_model_the_problems_are_still_located():
    rows = check(PLAYBOOK, Playbook, tell_model=False)
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        (2, 12, "api_token", "RB110"),
        (3, 1, "stpes", "RB103"),
        (7, 14, "steps[0].timeout", "RB110"),
        (8, 17, "steps[0].on-failure", "RB111"),
        (9, 5, "steps[0].wiht", "RB103"),
        (10, 5, "steps[1].id", "RB104"),
        (10, 11, "steps[1].uses", "RB111"),
        (11, 14, "steps[1].retries", "RB111"),
        (13, 17, "steps[1].with.replicas", "RB110"),
    ]
    # Without the model the allowed keys are unknown; the hint says what to do instead.
    assert rows[1][6] == "remove it, or check its indentation"


def test_unknown_key_with_no_close_match_lists_the_allowed_keys():
    rows = check("name: x\nsteps: []\nzzz: 1\n", model=Playbook)
    assert rows == [(3, 1, "zzz", "RB103", "unknown-key", "unknown key `zzz`",
                     "expected one of: name, api_token, steps")]


def test_missing_top_level_key_points_at_the_document():
    rows = check("steps: []\n", model=Playbook)
    assert rows == [(1, 1, "name", "RB104", "missing-key", "missing required key `name`",
                     "add `name: …`")]


def test_model_validator_problems_land_on_the_exact_key():
    text = "name: x\nsteps:\n  - {id: a, uses: k}\n  - {id: a, uses: k}\n  - {id: a, uses: k}\n"
    assert check(text, model=Playbook) == [
        (4, 10, "steps[1].id", "RB130", "duplicate-id",
         "step id `a` is already used by steps[0]", "give each step its own id"),
        (5, 10, "steps[2].id", "RB130", "duplicate-id",
         "step id `a` is already used by steps[0]", "give each step its own id"),
    ]


def test_base_path_locates_a_validated_fragment():
    class Params(BaseModel):
        model_config = ConfigDict(extra="forbid")
        replicas: int

    text = "steps:\n  - uses: k8s.scale\n    with:\n      replicas: one\n      replica: 2\n"
    doc = load_yaml(text, file="pb.yaml")
    with pytest.raises(ValidationError) as info:
        Params.model_validate(doc.data["steps"][0]["with"])
    problems = problems_from_validation_error(info.value, file="pb.yaml", positions=doc.positions,
                                              base_path=("steps", 0, "with"), model=Params)
    assert [(p.line, p.column, p.path, p.slug, p.hint) for p in problems] == [
        (4, 17, "steps[0].with.replicas", "bad-type", ""),
        (5, 7, "steps[0].with.replica", "unknown-key", "did you mean `replicas`?"),
    ]


class Scale(BaseModel):
    model_config = ConfigDict(extra="forbid")
    uses: Literal["k8s.scale"]
    replicas: int


class Drain(BaseModel):
    model_config = ConfigDict(extra="forbid")
    uses: Literal["k8s.drain"]
    node: str


class Tagged(BaseModel):
    model_config = ConfigDict(extra="forbid")
    steps: list[Annotated[Union[Scale, Drain], Field(discriminator="uses")]]
    timeout: int | str = 0


TAGGED = """\
steps:
  - uses: k8s.scael
  - uses: k8s.scale
    replicas: one
  - node: n1
timeout: [1]
"""


@pytest.mark.parametrize("tell_model", [True, False])
def test_discriminated_unions_speak_of_actions(tell_model):
    assert check(TAGGED, Tagged, tell_model=tell_model) == [
        (2, 11, "steps[0].uses", "RB102", "unknown-action", 'no action named "k8s.scael"',
         "did you mean `k8s.scale`?"),
        (4, 15, "steps[1].replicas", "RB110", "bad-type", 'expected a whole number, found "one"',
         ""),
        (5, 5, "steps[2].uses", "RB104", "missing-key", "missing required key `uses`",
         "add `uses: …`"),
        (6, 10, "timeout", "RB110", "bad-type", "expected a whole number or text, found a list",
         ""),
    ]


def test_plain_union_picks_the_member_that_was_meant():
    class Holder(BaseModel):
        model_config = ConfigDict(extra="forbid")
        step: Union[Scale, Drain, None] = None

    rows = check("step:\n  uses: k8s.drain\n  nod: n1\n", model=Holder)
    # Drain fails on two counts, Scale on three (its `uses` does not even match): Drain it is.
    # The missing key is not in the file, so it is located at the key of the mapping lacking it.
    assert rows == [
        (1, 1, "step.node", "RB104", "missing-key", "missing required key `node`",
         "add `node: …`"),
        (3, 3, "step.nod", "RB103", "unknown-key", "unknown key `nod`", "did you mean `node`?"),
    ]


def test_secrets_are_never_echoed():
    class Conn(BaseModel):
        password: int
        token: str

    rows = check("password: hunter2\ntoken: 12345\n", model=Conn)
    assert [r[5] for r in rows] == ["expected a whole number, found a value",
                                    "expected text, found a value"]
    assert all("hunter2" not in str(r) and "12345" not in str(r) for r in rows)
