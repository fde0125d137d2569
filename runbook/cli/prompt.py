"""The terminal's operator: shows the plan as a diff and asks; without a terminal, refuses.

A prompt is never left hanging: no TTY on stdin means a refusal that names `--yes`.
"""

from __future__ import annotations

import sys

from runbook.engine.operator import AssumeYes, Confirmation, ConfirmRequest, NoTerminal, Operator


class TerminalOperator:
    def __init__(self, console, by: str):
        self.console, self.by = console, by

    def confirm(self, request: ConfirmRequest) -> Confirmation:
        from rich.prompt import Confirm

        self.console.print(f"[bold yellow]?[/] {request.summary}  [dim]({request.target})[/]")
        answer = Confirm.ask("  apply this change?", console=self.console, default=False)
        return Confirmation(answer, self.by, "prompt" if answer else "declined at the prompt")


def operator_for(*, yes: bool, by: str, console) -> Operator:
    if yes:
        return AssumeYes(by)
    if sys.stdin is not None and sys.stdin.isatty():
        return TerminalOperator(console, by)
    return NoTerminal(by)
