"""A rich Console that falls silent when its stream closes, instead of raising or exiting.

A closed pipe (`| head`) or a hung-up terminal must never stop a run between an apply and its
verify or rollback: the journal is the record, the console only a view of it.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from runbook.cli.streams import silence


class QuietOnCloseConsole(Console):
    def print(self, *objects: Any, **kwargs: Any) -> None:
        if self.quiet:
            return
        try:
            super().print(*objects, **kwargs)
        except OSError:  # EIO from a terminal that hung up; EPIPE when rich did not catch it
            self.on_broken_pipe()

    def on_broken_pipe(self) -> None:
        # rich's default points stdout at /dev/null and exits 1, even when the broken stream is stderr.
        self.quiet = True
        del self._buffer[:]
        silence(self.file)
