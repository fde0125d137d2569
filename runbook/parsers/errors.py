"""The one error every parser raises on output it cannot read.

Callers catch ParseError alone: a parser never leaks IndexError, ValueError or KeyError.
"""

from __future__ import annotations

from runbook.errors import RunbookError


class ParseError(RunbookError):
    """Output did not have the expected shape; `format` names the command, `line` is 1-based."""

    def __init__(self, message: str, *, format: str, line: int | None = None):
        where = f" (line {line})" if line is not None else ""
        super().__init__(f"cannot parse {format} output{where}: {message}")
        self.format = format
        self.line = line
        self.reason = message

    def __reduce__(self):
        # keyword-only arguments defeat Exception's default pickling (multiprocessing, caches)
        return (_rebuild, (type(self), self.reason, self.format, self.line))


def quote(text: str, width: int = 120) -> str:
    """The offending input as it goes into a message: stripped, repr-quoted, cut at `width` characters."""
    text = text.strip()
    return repr(text if len(text) <= width else text[:width] + "...")


def _rebuild(cls: type[ParseError], message: str, format: str, line: int | None) -> ParseError:
    return cls(message, format=format, line=line)
