"""What people wrote in a report's "for the humans" sections, carried over when the report is regenerated.

Each section sits between `<!-- runbook:human begin NAME -->` and `<!-- runbook:human end NAME -->`
(in Markdown and HTML alike); the rest of the report is runbook's and is written anew each time.
"""

from __future__ import annotations

import dataclasses
import re

from runbook.errors import InvalidInput

BEGIN = "<!-- runbook:human begin {} -->"
END = "<!-- runbook:human end {} -->"
MARKER = re.compile(r"<!-- runbook:human (?P<edge>begin|end) (?P<name>[A-Za-z0-9_-]+) -->")
FORCE = "pass --force to overwrite the report"


@dataclasses.dataclass(frozen=True)
class Section:
    name: str
    body: str
    start: int  # where the body begins in the text
    end: int  # where it ends (the end marker begins there)


@dataclasses.dataclass(frozen=True)
class Merged:
    text: str
    kept: tuple[str, ...]  # the sections whose text people changed, carried over


def sections(text: str, *, where: str) -> dict[str, Section]:
    """Every section of `text` by name; InvalidInput naming `where`:line for a marker out of place."""
    found: dict[str, Section] = {}
    open_: re.Match[str] | None = None
    for marker in MARKER.finditer(text):
        name, edge = marker.group("name"), marker.group("edge")
        line = text.count("\n", 0, marker.start()) + 1
        if edge == "begin":
            if open_ is not None:
                break  # the open section lacks its end: said below
            if name in found:
                raise InvalidInput(f"{where}:{line}: a second {BEGIN.format(name)}; keep one section of each name "
                                   f"(or {FORCE})")
            open_ = marker
        elif open_ is None or open_.group("name") != name:
            raise InvalidInput(f"{where}:{line}: {END.format(name)} without {BEGIN.format(name)} before it; put the "
                               f"begin marker back before your text (or {FORCE})")
        else:
            found[name] = Section(name, text[open_.end():marker.start()], open_.end(), marker.start())
            open_ = None
    if open_ is not None:
        name = open_.group("name")
        line = text.count("\n", 0, open_.start()) + 1
        raise InvalidInput(f"{where}:{line}: {BEGIN.format(name)} has no {END.format(name)} after it; put the end "
                           f"marker back after your text (or {FORCE})")
    return found


def carry_over(old: str, new: str, *, where: str) -> Merged:
    """`new` with the bodies of `old`'s sections; refused when one of them would be lost."""
    kept = sections(old, where=where)
    if not kept:
        raise InvalidInput(f"{where} has no {BEGIN.format('NAME')} sections to keep (written by hand, or by an older "
                           "runbook): overwriting it would lose what people wrote; pass --force to overwrite it, or "
                           "write the report elsewhere with -f FILE")
    slots = sections(new, where="the new report")
    lost = [name for name in kept if name not in slots]
    if lost:
        raise InvalidInput(f"{where}: the new report has no place for the section{'s' if len(lost) > 1 else ''} "
                           f"{', '.join(lost)} that {where} holds; {FORCE}, or write it elsewhere with -f FILE "
                           "(a --template that keeps those markers keeps the text)")
    pieces, at, changed = [], 0, []
    for slot in sorted(slots.values(), key=lambda s: s.start):
        body = kept[slot.name].body if slot.name in kept else slot.body
        if body != slot.body:
            changed.append(slot.name)
        pieces += [new[at:slot.start], body]
        at = slot.end
    pieces.append(new[at:])
    return Merged("".join(pieces), tuple(sorted(changed)))
