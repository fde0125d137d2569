"""Change one flag of one service's `command:` in a Docker Compose file, as text: the pure logic of
`compose.set_arg`. Only the flag's value is rewritten; every other byte (comments, quoting) stays.

The file is read as a YAML node tree to find exactly where that service's command is written; the new
text is read back and must differ from the old in that one value of that one service, or it is refused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import shlex
from typing import Any

import yaml

from runbook.commandline import flags
from runbook.errors import InvalidInput

MAX_COMPOSE_BYTES = 96 * 1024  # the new text travels as one argv word: Linux caps one at 128 KiB
_PLAIN_SAFE = re.compile(r"[A-Za-z0-9_./=:-]+")


# The compose file cannot be changed as asked (no such service, no command, a form not rewritten): bad input.
ComposeFileError = InvalidInput


@dataclasses.dataclass(frozen=True)
class ComposeEdit:
    text: str  # the whole new file
    before: str  # the flag's value as written before
    after: str  # … and after
    location: str  # "command (list item 5)" or "command (string)"
    spelling: str | None = None


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _mapping_get(node: yaml.Node, key: str) -> yaml.Node | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    found = [v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key]
    if len(found) > 1:
        raise ComposeFileError(f"key {key!r} appears {len(found)} times at line {found[1].start_mark.line + 1}")
    return found[0] if found else None


def _compose_tree(text: str, where: str) -> yaml.Node:
    if len(text.encode("utf-8")) > MAX_COMPOSE_BYTES:
        raise ComposeFileError(f"{where} is larger than {MAX_COMPOSE_BYTES // 1024} KiB; runbook does not rewrite it")
    if "\0" in text:
        raise ComposeFileError(f"{where} holds a NUL byte; it is not a compose file")
    try:
        tree = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise ComposeFileError(f"{where} is not valid YAML: {exc}") from None
    if tree is None or not isinstance(tree, yaml.MappingNode):
        raise ComposeFileError(f"{where} is not a compose file (no top-level mapping)")
    # An anchored command shared by services is caught by the read-back: the others would change too.
    return tree


def _command_node(tree: yaml.Node, service: str, where: str) -> yaml.Node:
    services = _mapping_get(tree, "services")
    if services is None or not isinstance(services, yaml.MappingNode):
        raise ComposeFileError(f"{where} has no `services:` mapping")
    names = [k.value for k, _ in services.value if isinstance(k, yaml.ScalarNode)]
    svc = _mapping_get(services, service)
    if svc is None:
        raise ComposeFileError(f"{where} has no service {service!r} (services: {', '.join(names) or 'none'})")
    command = _mapping_get(svc, "command")
    if command is None:
        raise ComposeFileError(f"service {service!r} in {where} has no `command:`; runbook changes flags written "
                               f"there and never adds one (the image's default command is not in the file)")
    return command


def service_command(text: str, service: str, where: str = "the compose file") -> list[str]:
    """The service's `command:` as the argv Compose runs (a string is split the way Compose splits it)."""
    node = _command_node(_compose_tree(text, where), service, where)
    if isinstance(node, yaml.ScalarNode):
        try:
            return shlex.split(node.value)
        except ValueError as exc:
            raise ComposeFileError(f"the command of {service!r} in {where} does not split into words: {exc}") from None
    if isinstance(node, yaml.SequenceNode) and all(isinstance(i, yaml.ScalarNode) for i in node.value):
        return [i.value for i in node.value]
    raise ComposeFileError(f"the command of {service!r} in {where} (line {node.start_mark.line + 1}) is neither a "
                           f"string nor a list of strings")


def _raw(text: str, node: yaml.Node) -> str:
    return text[node.start_mark.index:node.end_mark.index]


def _written_plainly(text: str, node: yaml.ScalarNode) -> str | None:
    """How to rewrite this scalar's value: None where its text is not the value as written (escapes, folding)."""
    raw = _raw(text, node)
    if "\n" in raw:
        return None
    if node.style is None and raw == node.value:
        return ""
    if node.style in ("'", '"') and raw[1:-1] == node.value and "\\" not in raw and "''" not in raw:
        return node.style
    return None


def plan_compose_flag(text: str, service: str, flag: str, *, factor: float | None = None,
                      value: str | int | float | None = None, floor: float | None = None,
                      ceiling: float | None = None, where: str = "the compose file") -> ComposeEdit:
    """The new file text with only `flag`'s value changed in `service`'s command (refused rather than guessed)."""
    tree = _compose_tree(text, where)
    node = _command_node(tree, service, where)
    argv = service_command(text, service, where)
    change = flags.plan_flag_change(argv, (), flag, factor=factor, value=value, floor=floor, ceiling=ceiling,
                                    container=service)
    new_argv = list(change.command)
    changed = [i for i, (a, b) in enumerate(zip(argv, new_argv)) if a != b]
    if not changed:
        return ComposeEdit(text, change.before, change.after, "command", change.spelling)
    if len(changed) != 1 or len(argv) != len(new_argv):
        raise ComposeFileError(f"changing {flag} of {service!r} would rewrite more than one word of its command")
    index = changed[0]
    if isinstance(node, yaml.SequenceNode):
        item = node.value[index]
        style = _written_plainly(text, item)
        new_word = new_argv[index]
        if style is None or (style == "" and not _PLAIN_SAFE.fullmatch(new_word)) or (style and style in new_word):
            raise ComposeFileError(f"item {index + 1} of the command of {service!r} in {where} (line "
                                   f"{item.start_mark.line + 1}) is written in a form runbook does not rewrite; "
                                   f"write it as a plain or quoted one-line string")
        span, replacement = item, f"{style}{new_word}{style}"
        location = f"command (list item {index + 1})"
    else:
        style = _written_plainly(text, node)
        if style is None:
            raise ComposeFileError(f"the command of {service!r} in {where} (line {node.start_mark.line + 1}) is a "
                                   f"folded, multi-line or escaped string; runbook rewrites one-line strings only")
        # the one word that changed, found in the string as written: it must be there exactly once
        old_word, new_word = argv[index], new_argv[index]
        hits = [m.start() for m in re.finditer(rf"(?<!\S){re.escape(old_word)}(?!\S)", node.value)]
        if len(hits) != 1 or (style and style in new_word) or not _PLAIN_SAFE.fullmatch(new_word):
            raise ComposeFileError(f"the command of {service!r} in {where} (line {node.start_mark.line + 1}) does not "
                                   f"hold {old_word!r} as one plain word exactly once; change it by hand")
        value_text = node.value[:hits[0]] + new_word + node.value[hits[0] + len(old_word):]
        span, replacement = node, f"{style}{value_text}{style}"
        location = "command (string)"
    new_text = text[:span.start_mark.index] + replacement + text[span.end_mark.index:]
    _check_only_that_changed(text, new_text, service, argv, new_argv, where)
    return ComposeEdit(new_text, change.before, change.after, location, change.spelling)


def _check_only_that_changed(old: str, new: str, service: str, argv: list[str], new_argv: list[str],
                             where: str) -> None:
    """Read back: the new document equals the old one but for this service's command, which reads as planned."""
    before: Any = yaml.safe_load(old)
    after: Any = yaml.safe_load(new)
    if service_command(new, service, where) != new_argv:
        raise ComposeFileError(f"rewriting {where} would not give {service!r} the planned command; refused")
    before["services"][service]["command"] = after["services"][service]["command"] = None
    if before != after:
        raise ComposeFileError(f"rewriting {where} would change more than the command of {service!r}; refused")
