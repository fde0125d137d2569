"""How deep a JSON text nests, measured without recursing, before a parser that recurses reads it.

The webhook bodies and the journal lines both bound their depth with it, so a hostile text can
never exhaust a thread's stack in `json.loads` or in the code that walks what it returns.
"""

from __future__ import annotations

import itertools
import re

# A string token, or an unterminated one up to the end: every quote outside a string matches at the
# first try, so the scan is linear whatever the text (a failing match would be retried per quote).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.S)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_STEP = str.maketrans({"[": "\x01", "{": "\x01", "]": "\xff", "}": "\xff"})


def nesting_depth(text: str | bytes) -> int:
    """How deep arrays and objects nest outside string literals (a few passes in C, no recursion).

    Bytes are read as Latin-1: UTF-8 never uses a quote, backslash or bracket byte inside a
    multi-byte character, so the count is the same as over the decoded text.
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("latin-1")
    steps = _NOT_BRACKETS.sub("", _STRING.sub("", text)).translate(_STEP).encode("latin-1")
    return max(itertools.accumulate(memoryview(steps).cast("b")), default=0)
