"""The terminal's operator: asks yes / skip this step / abort; without a terminal, refuses.

A prompt is never left hanging: no TTY on stdin means a refusal that names `--yes`, and the end
of input at the prompt aborts. Letters or words are taken (`y`/`yes`, `n`/`no`/`s`/`skip`, `a`/`abort`).
"""

from __future__ import annotations

import sys
from typing import TextIO

from runbook.engine.operator import AssumeYes, Confirmation, ConfirmRequest, NoTerminal, Operator, skipped

ANSWERS = {"y": "yes", "yes": "yes", "n": "skip", "no": "skip", "s": "skip", "skip": "skip",
           "a": "abort", "abort": "abort", "q": "abort", "quit": "abort"}
ASK = "  apply this change? [y]es / [n]o, skip this step / [a]bort the playbook: "
AGAIN = "  answer y (apply this change), n (skip this step) or a (abort the playbook)"


def parse_answer(text: str) -> str | None:
    """"yes", "skip" or "abort" for what was typed; None for anything else (asked again)."""
    return ANSWERS.get(text.strip().lower())


class TerminalOperator:
    """`stream`: where answers are read (default: the terminal on stdin)."""

    def __init__(self, console, by: str, stream: TextIO | None = None):
        self.console, self.by, self.stream = console, by, stream

    def confirm(self, request: ConfirmRequest) -> Confirmation:
        self.console.print(f"[bold yellow]?[/] {request.summary}  [dim]({request.target})[/]", markup=True,
                           highlight=False)
        while True:
            try:
                answer = parse_answer(self._read(ASK))
            except EOFError:
                return Confirmation(False, self.by, "aborted at the prompt (end of input)")
            if answer == "yes":
                return Confirmation(True, self.by, "prompt", by_person=True)
            if answer == "skip":
                return skipped(self.by, "skipped at the prompt")
            if answer == "abort":
                return Confirmation(False, self.by, "aborted at the prompt")
            self.console.print(AGAIN, markup=False, highlight=False)

    def _read(self, prompt: str) -> str:
        self.console.print(prompt, end="", markup=False, highlight=False)
        if self.stream is None:
            return input()
        line = self.stream.readline()
        if not line:
            raise EOFError
        return line


def operator_for(*, yes: bool, by: str, console, rehearsal: bool = False) -> Operator:
    """`rehearsal`: a drill, where `--yes` stands in for the person at the prompt."""
    if yes:
        return AssumeYes(by, rehearsal=rehearsal)
    if sys.stdin is not None and sys.stdin.isatty():
        return TerminalOperator(console, by)
    return NoTerminal(by)
