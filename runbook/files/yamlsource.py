"""The one YAML loader: every file runbook reads (playbooks, config, scenarios, profiles, kubeconfigs)
comes in here, safely, with positions; its mistakes (syntax, duplicates, alias bombs, size) are problems."""

from __future__ import annotations

import dataclasses
import errno
import functools
import os
import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from runbook.errors import InvalidInput
from runbook.files.positions import PathTuple, Position, Positions
from runbook.files.problems import Problem, problem, render_value

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_NODES",
    "LoadedDocument",
    "Position",
    "Positions",
    "load_yaml",
    "load_yaml_file",
    "read_yaml_text",
]


# A playbook has hundreds of values; far more means aliases multiplying (a "billion laughs").
# libyaml composes the same node tree, with the same marks, several times faster when it is there.
_COMPOSER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_NODES = 100_000
# The largest kubeconfigs (hundreds of clusters, certificates inline) are a few MiB; a bigger file
# is a mistake or an attack, and is refused before the parser spends time and memory on it.
MAX_BYTES = 8 * 2**20
# Real playbooks nest a handful of levels; this stays well inside Python's recursion limit.
MAX_DEPTH = 100

_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_BOOL_TAG = "tag:yaml.org,2002:bool"


@functools.cache
def _only_true_false(loader: type) -> type:
    """`loader` with YAML 1.2 booleans: yes/no/on/off stay text, so a key `on:` is the word on."""
    resolvers = {first: [(tag, regexp) for tag, regexp in found if tag != _BOOL_TAG]
                 for first, found in loader.yaml_implicit_resolvers.items()}
    strict = type(f"TrueFalse{loader.__name__}", (loader,), {"yaml_implicit_resolvers": resolvers})
    strict.add_implicit_resolver(_BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                 list("tTfF"))
    return strict


def _position(node: Node) -> Position:
    mark = node.start_mark
    return Position(mark.line + 1, mark.column + 1)


@dataclasses.dataclass(frozen=True)
class LoadedDocument:
    """Plain data (as `yaml.safe_load` would give), positions, and what was wrong.

    `data` is best effort when there are problems (None when the YAML could not be read at
    all); a caller must not act on a document that has problems.
    """

    data: Any
    positions: Positions
    problems: tuple[Problem, ...]


class _Refused(Exception):
    """Stops the walk: the document is not something we will build at all."""

    def __init__(self, found: Problem):
        super().__init__(found.message)
        self.problem = found


class _Builder:
    """Walks a composed node tree into plain data, recording positions and problems."""

    def __init__(self, file: str, kind: str = "playbook"):
        self.file = file
        self.kind = kind
        # Only used to construct scalars, exactly as safe_load would (ints, floats, dates, …).
        self.loader = yaml.SafeLoader("")
        self.keys: dict[PathTuple, Position] = {}
        self.values: dict[PathTuple, Position] = {}
        self.problems: list[Problem] = []
        self.count = 0
        self.active: set[int] = set()  # collections being built: an alias back to one is a loop

    def report(self, slug: str, node: Node | None, path: PathTuple, message: str, hint: str = ""):
        self.problems.append(problem(
            slug, file=self.file, position=_position(node) if node is not None else None,
            path=path, message=message, hint=hint,
        ))

    def tick(self, node: Node, path: PathTuple) -> None:
        self.count += 1
        if self.count > MAX_NODES:
            # Deep inside the expansion the path means nothing; name the top-level entry.
            top = path[:1]
            raise _Refused(problem(
                "not-a-playbook", file=self.file, position=self.keys.get(top, _position(node)),
                path=top,
                message=f"this file expands to more than {MAX_NODES:,} values, "
                        "most likely through `*aliases` repeating each other; refusing to load it",
                hint="write the values out, or use far fewer aliases",
            ))

    def build(self, node: Node, path: PathTuple, depth: int) -> Any:
        self.tick(node, path)
        self.values[path] = _position(node)
        if isinstance(node, ScalarNode):
            return self.scalar(node, path)
        if depth > MAX_DEPTH:
            raise _Refused(problem(
                "not-a-playbook", file=self.file, position=_position(node), path=path[:1],
                message=f"values are nested more than {MAX_DEPTH} levels deep here",
                hint=f"a {self.kind} is only a few levels deep; check the structure",
            ))
        if id(node) in self.active:
            raise _Refused(problem(
                "not-a-playbook", file=self.file, position=_position(node), path=path,
                message="an `*alias` here refers to a value that contains it, so it never ends",
                hint="an alias may only repeat a value defined before and outside it",
            ))
        self.active.add(id(node))
        try:
            if isinstance(node, SequenceNode):
                self.check_tag(node, path, _SEQ_TAG)
                return [self.build(child, path + (i,), depth + 1)
                        for i, child in enumerate(node.value)]
            self.check_tag(node, path, _MAP_TAG)
            return self.mapping(node, path, depth)
        finally:
            self.active.discard(id(node))

    def check_tag(self, node: Node, path: PathTuple, expected: str) -> None:
        # !!set, !!omap and custom tags would make safe_load build other types; we keep the
        # plain shape so the rest can be checked, and say that the tag is not supported.
        if node.tag != expected:
            self.report("yaml-syntax", node, path, f"the YAML tag `{_tag(node)}` is not supported",
                        f"remove the tag; a {self.kind} uses plain mappings, lists and values")

    def scalar(self, node: ScalarNode, path: PathTuple) -> Any:
        try:
            return self.loader.construct_object(node)
        except Exception as exc:  # noqa: BLE001 - any constructor failure is the file's fault
            unknown = "constructor for the tag" in str(exc)
            if isinstance(exc, yaml.constructor.ConstructorError) and unknown:
                message = f"the YAML tag `{_tag(node)}` is not supported"
                hint = "remove the tag, or quote the value to make it text"
            else:
                message = f"cannot read `{node.value}` as `{_tag(node)}`"
                hint = "fix the value, or quote it to make it text"
            self.report("yaml-syntax", node, path, message, hint)
            return None

    def mapping(self, node: MappingNode, path: PathTuple, depth: int) -> dict[str, Any]:
        result: dict[str, Any] = {}
        first: dict[str, Node] = {}
        for key_node, value_node, merged in self.entries(node, path, depth):
            key = self.key(key_node, path)
            if key is None:
                continue
            if key in first:
                # Merged keys are overridden by design; only a key written twice is a mistake.
                if not merged:
                    earlier = _position(first[key])
                    where = f"line {earlier.line}"
                    if earlier.line == key_node.start_mark.line + 1:
                        where += f", column {earlier.column}"
                    self.report("duplicate-key", key_node, path + (key,),
                                f"key `{key}` appears twice (first at {where})",
                                "remove one of them")
                continue
            first[key] = key_node
            child = path + (key,)
            self.keys[child] = _position(key_node)
            result[key] = self.build(value_node, child, depth + 1)
        return result

    def entries(
        self, node: MappingNode, path: PathTuple, depth: int
    ) -> list[tuple[Node, Node, bool]]:
        """The mapping's (key, value, merged) pairs, `<<` merges flattened, winners first.

        YAML merge semantics: keys written in the mapping beat merged ones, and an earlier
        merged mapping beats a later one; the caller keeps the first occurrence of each key.
        """
        written: list[tuple[Node, Node, bool]] = []
        merged: list[tuple[Node, Node, bool]] = []
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE_TAG:
                written.append((key_node, value_node, False))
                continue
            if isinstance(value_node, MappingNode):
                sources = [value_node]
            elif isinstance(value_node, SequenceNode):
                sources = value_node.value
            else:
                sources = [value_node]
            for source in sources:
                if not isinstance(source, MappingNode):
                    self.report("bad-type", source, path,
                                f"`<<` merges a mapping, found {_node_kind(source)}",
                                "give `<<` an alias of a mapping, or a list of them")
                    continue
                if id(source) in self.active or depth > MAX_DEPTH:
                    raise _Refused(problem(
                        "not-a-playbook", file=self.file, position=_position(source), path=path,
                        message="this `<<` merge includes itself, so it never ends",
                        hint="merge only mappings defined before and outside this one",
                    ))
                self.active.add(id(source))
                try:
                    for key_node2, value_node2, _ in self.entries(source, path, depth + 1):
                        self.tick(key_node2, path)
                        merged.append((key_node2, value_node2, True))
                finally:
                    self.active.discard(id(source))
        return written + merged

    def key(self, node: Node, path: PathTuple) -> str | None:
        if isinstance(node, ScalarNode):
            key = self.scalar(node, path)
            if isinstance(key, str):
                return key
            # `on:`, `yes:`, `1:`, dates: YAML turns these into non-text keys.
            self.report("bad-type", node, path,
                        f"expected a key made of text, found {render_value(key)}",
                        f'put the key in quotes: "{node.value}":')
        else:
            self.report("bad-type", node, path,
                        f"expected a key made of text, found {_node_kind(node)}",
                        "keys are plain text; check the `?` or brackets before the `:`")
        return None


def _tag(node: Node) -> str:
    # Show tags the way they are written in the file: !!set, not tag:yaml.org,2002:set.
    prefix = "tag:yaml.org,2002:"
    return "!!" + node.tag[len(prefix):] if node.tag.startswith(prefix) else node.tag


def _node_kind(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    return f"`{node.value}`"


def _syntax_problem(exc: yaml.YAMLError, text: str, file: str) -> Problem:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        message = exc.problem or exc.context or "this is not valid YAML"
        if exc.problem and exc.context:
            message += f" ({exc.context}"
            context = exc.context_mark
            if context is not None and mark is not None and context.line != mark.line:
                message += f" started at line {context.line + 1}"
            message += ")"
        position = Position(mark.line + 1, mark.column + 1) if mark is not None else None
        lines = text.splitlines()
        line_text = lines[mark.line] if mark is not None and mark.line < len(lines) else ""
        hint = _syntax_hint(message, line_text)
        return problem("yaml-syntax", file=file, position=position, path="",
                       message=message, hint=hint)
    # ReaderError: a character YAML does not accept; it knows the offset, not the line.
    offset = getattr(exc, "position", None)
    position = None
    if isinstance(offset, int):
        before = text[:offset]
        position = Position(before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1)
    return problem("yaml-syntax", file=file, position=position, path="",
                   message=str(exc).split("\n")[0],
                   hint="remove the control character; YAML only accepts printable text")


_HINTS = (
    ("found undefined alias", "define the anchor (`&name`) before using the alias (`*name`)"),
    ("duplicate anchor", "give each anchor (`&name`) its own name"),
    ("mapping values are not allowed here",
     "a value containing `: ` must be quoted, or the indentation is off"),
    ("could not find expected ':'", "a key needs a `:` after it; check the line above too"),
    ("while scanning a quoted scalar", "a quote is not closed"),
    ("expected <block end>", "check this line's indentation against the lines above"),
    ("expected ',' or ']'", "a `[` list is not closed with `]`"),
    ("expected ',' or '}'", "a `{` mapping is not closed with `}`"),
    ("while scanning an alias", "an alias is `*` followed by the anchor's name"),
    ("while scanning an anchor", "an anchor is `&` followed by a name"),
    ("found character '@'", "values starting with `@` or a backtick must be quoted"),
    ("found character '`'", "values starting with `@` or a backtick must be quoted"),
    ("found character '%'", "values starting with `%` must be quoted"),
)


def _syntax_hint(message: str, line_text: str) -> str:
    indent = line_text[: len(line_text) - len(line_text.lstrip())]
    if "'\\t'" in message or "tab" in message or "\t" in indent:
        return "YAML does not allow tabs for indentation; use spaces"
    for needle, hint in _HINTS:
        if needle in message:
            return hint
    return "check the indentation and quoting around this line"


def load_yaml(text: str, *, file: str, kind: str = "playbook", only_true_false: bool = False) -> LoadedDocument:
    """Parse one YAML document safely; every problem found comes back, nothing is raised.

    `kind` names the file in hints ("scenario", "kubeconfig"); `only_true_false` reads booleans
    as YAML 1.2 does (yes, no, on and off stay text), for files whose keys include `on:`.
    """
    if len(text) > MAX_BYTES:  # characters, so a bound on bytes too; read_yaml_text stops earlier
        return LoadedDocument(None, Positions(), (problem(
            "not-a-playbook", file=file, position=None, path="",
            message=f"the file is larger than {MAX_BYTES // 2**20} MiB; refusing to load it",
            hint=f"a {kind} is far smaller; check that this is the file you meant",
        ),))
    composer, fallback = _COMPOSER, yaml.SafeLoader
    if only_true_false:
        composer, fallback = _only_true_false(composer), _only_true_false(fallback)
    try:
        # SafeLoader only: the document is data, never a request to build Python objects.
        try:
            documents = list(yaml.compose_all(text, Loader=composer))
        except yaml.YAMLError:
            if composer is fallback:
                raise
            # The pure-Python composer words and places syntax errors best: ask it again.
            documents = list(yaml.compose_all(text, Loader=fallback))
    except yaml.YAMLError as exc:
        return LoadedDocument(None, Positions(), (_syntax_problem(exc, text, file),))
    except RecursionError:
        return LoadedDocument(None, Positions(), (problem(
            "not-a-playbook", file=file, position=None, path="",
            message="values are nested too deeply to read",
            hint=f"a {kind} is only a few levels deep; check the brackets",
        ),))

    if not documents:
        return LoadedDocument(None, Positions(), (problem(
            "not-a-playbook", file=file, position=None, path="",
            message="the file is empty", hint=_mapping_hint(kind),
        ),))

    builder = _Builder(file, kind)
    if len(documents) > 1:
        builder.report("not-a-playbook", documents[1], (),
                       f"the file holds {len(documents)} YAML documents; expected one",
                       "remove the `---` line(s), or split the documents into separate files")
    root = documents[0]
    try:
        data = builder.build(root, (), 0)
    except _Refused as refused:
        return LoadedDocument(None, Positions(), tuple(builder.problems) + (refused.problem,))
    except RecursionError:
        return LoadedDocument(None, Positions(), tuple(builder.problems) + (problem(
            "not-a-playbook", file=file, position=_position(root), path="",
            message="values are nested too deeply to read", hint="check the structure"),))

    if data is None and isinstance(root, ScalarNode):
        builder.report("not-a-playbook", root, (), "the document is empty", _mapping_hint(kind))
    problems = tuple(dict.fromkeys(builder.problems))  # merges can report one key twice
    return LoadedDocument(data, Positions(builder.keys, builder.values), problems)


def _mapping_hint(kind: str) -> str:
    if kind == "playbook":
        return "a playbook is a YAML mapping of keys (such as `steps:`) to values"
    return f"a {kind} is a YAML mapping of keys to values"


def read_yaml_text(path: str | os.PathLike[str]) -> str:
    """A YAML file's UTF-8 text, read no further than MAX_BYTES.

    Raises what `Path.read_text` does (OSError, UnicodeDecodeError), and OSError EFBIG for a
    file over the limit, so each caller's own "cannot read" message covers that case too.
    """
    with open(path, "rb") as file:
        raw = file.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise OSError(errno.EFBIG, f"it is larger than {MAX_BYTES // 2**20} MiB, "
                                   "far more than any file runbook reads should be")
    return raw.decode("utf-8")


def load_yaml_file(path: str | os.PathLike[str], *, kind: str = "playbook",
                   only_true_false: bool = False) -> LoadedDocument:
    """Read and parse a file; problems are labelled with `path` exactly as given.

    Raises InvalidInput when the file cannot be read at all.
    """
    label = os.fspath(path)
    try:
        text = read_yaml_text(path)
    except OSError as exc:
        raise InvalidInput(f"cannot read {label}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raw = exc.object
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        return LoadedDocument(None, Positions(), (problem(
            "yaml-syntax", file=label, position=Position(line, column), path="",
            message=f"the file is not UTF-8 text (byte 0x{raw[exc.start]:02x} here)",
            hint="save the file as UTF-8",
        ),))
    return load_yaml(text, file=label, kind=kind, only_true_false=only_true_false)
