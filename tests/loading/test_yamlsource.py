"""Tests for runbook.files.yamlsource: safe loading, exact positions, and YAML-level problems.
The property test pins the contract that loading matches yaml.safe_load on ordinary data."""

from __future__ import annotations

import datetime as dt
import time

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.errors import InvalidInput
from runbook.files.yamlsource import (
    MAX_NODES,
    LoadedDocument,
    Position,
    Positions,
    load_yaml,
    load_yaml_file,
)

SMALL = """\
name: oom
steps:
  - id: first
    uses: k8s.scale
    with:
      replicas: 3
  - id: second
    tags: [a, b]
"""


def only(doc: LoadedDocument):
    assert len(doc.problems) == 1, [p.format() for p in doc.problems]
    return doc.problems[0]


def test_small_document_data_matches_safe_load():
    doc = load_yaml(SMALL, file="oom.yaml")
    assert doc.problems == ()
    assert doc.data == yaml.safe_load(SMALL)


@pytest.mark.parametrize(
    ("path", "key", "value"),
    [
        ((), None, (1, 1)),
        (("name",), (1, 1), (1, 7)),
        (("steps",), (2, 1), (3, 3)),
        (("steps", 0), None, (3, 5)),
        (("steps", 0, "id"), (3, 5), (3, 9)),
        (("steps", 0, "uses"), (4, 5), (4, 11)),
        (("steps", 0, "with"), (5, 5), (6, 7)),
        (("steps", 0, "with", "replicas"), (6, 7), (6, 17)),
        (("steps", 1), None, (7, 5)),
        (("steps", 1, "tags"), (8, 5), (8, 11)),
        (("steps", 1, "tags", 0), None, (8, 12)),
        (("steps", 1, "tags", 1), None, (8, 15)),
    ],
)
def test_exact_positions(path, key, value):
    positions = load_yaml(SMALL, file="oom.yaml").positions
    assert positions.key(path) == (Position(*key) if key else None)
    assert positions.value(path) == Position(*value)


def test_nearest_prefers_the_key_and_walks_up_to_an_ancestor():
    positions = load_yaml(SMALL, file="oom.yaml").positions
    assert positions.nearest(("steps", 0, "uses")) == (("steps", 0, "uses"), Position(4, 5))
    # A key that is not in the file: the mapping holding it, at its key.
    assert positions.nearest(("steps", 0, "with", "nope")) == (("steps", 0, "with"), Position(5, 5))
    # A list item has no key: its value.
    assert positions.nearest(("steps", 1, "uses")) == (("steps", 1), Position(7, 5))
    assert positions.nearest(("nope", 3)) == ((), Position(1, 1))
    assert Positions().nearest(("a",)) == ((), None)


def test_positions_paths_and_membership():
    positions = load_yaml(SMALL, file="oom.yaml").positions
    assert ("steps", 1, "tags", 1) in positions
    assert ("steps", 2) not in positions
    assert list(positions.paths())[:3] == [(), ("name",), ("steps",)]
    assert len(positions) == 13


def test_duplicate_key_reported_at_second_occurrence_and_first_value_kept():
    text = "steps:\n  - id: a\n    uses: k8s.scale\n    uses: k8s.drain\n"
    doc = load_yaml(text, file="pb.yaml")
    p = only(doc)
    assert (p.file, p.line, p.column, p.path) == ("pb.yaml", 4, 5, "steps[0].uses")
    assert (p.code, p.slug) == ("RB101", "duplicate-key")
    assert p.message == "key `uses` appears twice (first at line 3)"
    assert p.hint == "remove one of them"
    assert doc.data == {"steps": [{"id": "a", "uses": "k8s.scale"}]}
    assert doc.positions.value(("steps", 0, "uses")) == Position(3, 11)


def test_duplicate_key_on_one_line_names_the_column():
    p = only(load_yaml("with: {a: 1, a: 2}\n", file="pb.yaml"))
    assert (p.line, p.column, p.path) == (1, 14, "with.a")
    assert p.message == "key `a` appears twice (first at line 1, column 8)"


def test_every_duplicate_is_reported():
    doc = load_yaml("a: 1\nb: 2\na: 3\nb: 4\n", file="pb.yaml")
    assert [(p.line, p.path) for p in doc.problems] == [(3, "a"), (4, "b")]
    assert doc.data == {"a": 1, "b": 2}


def test_syntax_error_is_located():
    doc = load_yaml("name: x\nsteps: a: b\n", file="pb.yaml")
    p = only(doc)
    assert doc.data is None
    assert (p.line, p.column, p.code, p.slug, p.path) == (2, 9, "RB100", "yaml-syntax", "")
    assert p.message == "mapping values are not allowed here"
    assert "quoted" in p.hint


def test_unclosed_flow_list_names_where_it_started():
    p = only(load_yaml("name: x\nsteps: [a, b\n", file="pb.yaml"))
    assert (p.line, p.column) == (3, 1)
    assert p.message.startswith("expected ',' or ']'")
    assert "started at line 2" in p.message
    assert p.hint == "a `[` list is not closed with `]`"


def test_tabs_get_their_own_hint():
    p = only(load_yaml("steps:\n\t- id: a\n", file="pb.yaml"))
    assert (p.line, p.column, p.slug) == (2, 1, "yaml-syntax")
    assert p.hint == "YAML does not allow tabs for indentation; use spaces"


def test_undefined_alias():
    p = only(load_yaml("a: *nope\n", file="pb.yaml"))
    assert (p.line, p.column, p.slug) == (1, 4, "yaml-syntax")
    assert "anchor" in p.hint


def test_control_character_is_located():
    p = only(load_yaml("a: 1\nb: x\x07\n", file="pb.yaml"))
    assert (p.line, p.column, p.slug) == (2, 5, "yaml-syntax")


@pytest.mark.parametrize("text", ["", "\n\n", "# just a comment\n", "---\n", "~\n"])
def test_empty_file_is_not_a_playbook(text):
    doc = load_yaml(text, file="pb.yaml")
    p = only(doc)
    assert doc.data is None
    assert (p.code, p.slug) == ("RB140", "not-a-playbook")
    assert "empty" in p.message


def test_several_documents_are_reported_and_the_first_kept():
    doc = load_yaml("a: 1\n---\nb: 2\n", file="pb.yaml")
    p = only(doc)
    assert (p.line, p.column, p.slug) == (3, 1, "not-a-playbook")
    assert p.message == "the file holds 2 YAML documents; expected one"
    assert doc.data == {"a": 1}


def test_alias_bomb_is_refused_quickly():
    text = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
    for i in range(1, 10):
        prev, name = chr(ord("a") + i - 1), chr(ord("a") + i)
        text += f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]\n"
    start = time.monotonic()
    doc = load_yaml(text, file="lol.yaml")
    assert time.monotonic() - start < 10
    p = only(doc)
    assert doc.data is None
    assert p.slug == "not-a-playbook"
    assert f"{MAX_NODES:,}" in p.message and "aliases" in p.message
    assert p.line > 0


def test_ordinary_aliases_are_fine():
    text = "defaults: &d {replicas: 2}\nfirst: *d\nsecond: [*d, *d]\n"
    doc = load_yaml(text, file="pb.yaml")
    assert doc.problems == ()
    assert doc.data == yaml.safe_load(text)
    # Values reached through an alias are located where they are written (the anchor).
    assert doc.positions.value(("second", 1, "replicas")) == Position(1, 25)


def test_alias_loop_is_refused():
    doc = load_yaml("a: &a [*a]\n", file="pb.yaml")
    p = only(doc)
    assert doc.data is None
    assert p.slug == "not-a-playbook" and "never ends" in p.message


def test_deep_nesting_is_refused_not_crashed():
    doc = load_yaml("a: " + "[" * 5000 + "]" * 5000 + "\n", file="pb.yaml")
    assert doc.data is None
    assert only(doc).slug in ("not-a-playbook", "yaml-syntax")


def test_merge_keys_follow_yaml_semantics():
    text = (
        "base: &base {replicas: 2, timeout: 30}\n"
        "more: &more {timeout: 60, grace: 5}\n"
        "step:\n"
        "  <<: [*base, *more]\n"
        "  replicas: 3\n"
    )
    doc = load_yaml(text, file="pb.yaml")
    assert doc.problems == ()
    # The YAML merge spec: earlier mappings in the list win. PyYAML releases disagree on this
    # (some let the later one win), so the expectation is written out rather than taken from safe_load.
    assert doc.data["step"] == {"replicas": 3, "timeout": 30, "grace": 5}
    assert doc.positions.key(("step", "replicas")) == Position(5, 3)
    assert doc.positions.value(("step", "timeout")) == Position(1, 36)
    assert doc.positions.value(("step", "grace")) == Position(2, 34)


def test_merge_of_a_scalar_is_reported():
    doc = load_yaml("a: 1\nb:\n  <<: 1\n  c: 2\n", file="pb.yaml")
    p = only(doc)
    assert (p.line, p.column, p.slug, p.path) == (3, 7, "bad-type", "b")
    assert doc.data == {"a": 1, "b": {"c": 2}}


@pytest.mark.parametrize(
    ("text", "found"),
    [("on: 1\n", "true"), ("1: x\n", "1"), ("2024-01-01: x\n", "a date (2024-01-01)")],
)
def test_keys_that_are_not_text(text, found):
    doc = load_yaml(text, file="pb.yaml")
    p = only(doc)
    assert (p.line, p.column, p.slug, p.code) == (1, 1, "bad-type", "RB110")
    assert p.message == f"expected a key made of text, found {found}"
    raw = text.split(":")[0]
    assert p.hint == f'put the key in quotes: "{raw}":'
    assert doc.data == {}


def test_complex_key_is_reported():
    p = only(load_yaml("? [a, b]\n: x\n", file="pb.yaml"))
    assert p.slug == "bad-type" and p.message.endswith("found a list")


def test_scalars_come_out_as_safe_load_makes_them():
    text = (
        "i: 12\nhex: 0x1f\nf: 1.5\ninf: .inf\nt: true\ny: yes\nn: null\ne:\ns: '12'\n"
        "d: 2024-05-01\nts: 2024-05-01T10:00:00Z\nb: !!binary aGVsbG8=\nstr: !!str 3\n"
    )
    doc = load_yaml(text, file="pb.yaml")
    assert doc.problems == ()
    assert doc.data == yaml.safe_load(text)
    assert doc.data["d"] == dt.date(2024, 5, 1)
    assert doc.data["y"] is True and doc.data["str"] == "3"


def test_unsafe_tags_are_reported_never_built():
    text = "a: !!python/object/apply:os.system ['true']\nb: !custom 1\n"
    doc = load_yaml(text, file="pb.yaml")
    assert [(p.line, p.path, p.slug) for p in doc.problems] == [
        (1, "a", "yaml-syntax"),
        (2, "b", "yaml-syntax"),
    ]
    assert doc.problems[1].message == "the YAML tag `!custom` is not supported"
    assert doc.data == {"a": ["true"], "b": None}  # plain shape kept, nothing run


def test_set_tag_is_reported():
    p = only(load_yaml("x: !!set {a, b}\n", file="pb.yaml"))
    assert p.message == "the YAML tag `!!set` is not supported"


def test_load_yaml_file_labels_with_the_path_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "oom.yaml").write_text("a: 1\na: 2\n")
    doc = load_yaml_file("playbooks/oom.yaml")
    assert only(doc).file == "playbooks/oom.yaml"
    assert doc.data == {"a": 1}


def test_load_yaml_file_not_utf8(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"a: 1\nb: caf\xe9\n")
    p = only(load_yaml_file(path))
    assert (p.file, p.line, p.column, p.slug) == (str(path), 2, 7, "yaml-syntax")


def test_load_yaml_file_missing(tmp_path):
    with pytest.raises(InvalidInput, match="cannot read"):
        load_yaml_file(tmp_path / "nope.yaml")


# --- property: same data as safe_load, and every value located -------------------------------

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _text
_data = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=20,
)


def _paths(data, path=()):
    yield path
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _paths(value, path + (key,))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _paths(value, path + (index,))


@settings(max_examples=300, deadline=None)
@given(data=_data, flow=st.sampled_from([None, True, False]))
def test_matches_safe_load_and_locates_every_value(data, flow):
    text = yaml.safe_dump(data, default_flow_style=flow, allow_unicode=True)
    doc = load_yaml(text, file="x.yaml")
    expected = yaml.safe_load(text)
    assert doc.data == expected
    if expected is not None:
        assert doc.problems == ()
    for path in _paths(expected):
        assert doc.positions.value(path) is not None, path
        if path and isinstance(path[-1], str):
            assert doc.positions.key(path) is not None, path
