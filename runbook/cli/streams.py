"""Standard streams that closed under us: point them at /dev/null so nothing more can fail.

Python's advice for SIGPIPE (see the `signal` docs): redirect the closed stream to devnull, so
later writes and the flush at exit are silent instead of a traceback or a changed exit code.
"""

from __future__ import annotations

import os
import select
import sys
from typing import Any, TextIO


def silence(stream: Any) -> None:
    """Redirect the file descriptor under `stream` to /dev/null; a stream with none is left alone."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (a test's buffer): nothing at exit will flush it to a closed pipe
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def is_closed(stream: Any) -> bool:
    """True when nobody can read what is written to `stream`: a pipe whose reader left, a hung-up tty."""
    try:
        poller = select.poll()
        poller.register(stream.fileno(), select.POLLOUT)
        return any(mask & (select.POLLERR | select.POLLHUP) for _, mask in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def silence_standard_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            silence(stream)


def write_or_fall_silent(stream: TextIO | None, text: str) -> bool:
    """Write and flush `text`; a closed stream is silenced instead of raising. True if it was written."""
    if stream is None:
        return False  # started with the descriptor closed (`>&-`): Python gave us no stream at all
    try:
        stream.write(text)
        stream.flush()
        return True
    except OSError:
        silence(stream)
        return False
