"""Live progress of a run on the terminal, drawn from journal events as they are written.

The engine never prints; this listener turns each event into a line (and a plan into a diff). On a
terminal, a verify step's current reading, threshold and time left stay on one live line until the
step ends. In a dry run, a plan made after an earlier would-be change says so: it saw the world
before that change. A console that cannot be written to (a closed pipe, a hung-up terminal) makes
it fall silent.
"""

from __future__ import annotations

from typing import Any

from runbook.model import events as ev
from runbook.model.duration import format_duration
from runbook.model.events import Event

_STATUS_STYLE = {"ok": "green", "changed": "bold green", "would_change": "cyan", "skipped": "dim",
                 "refused": "bold red", "failed": "bold red"}


INDENT = " " * 11


def progress_line(step: str, update: dict[str, Any]) -> str:
    """One verify reading as people read it: what is watched, what is seen, how long it held, time left."""
    return (f"{INDENT}watching {update['condition']}: {update['seen']} · held {format_duration(update['held_for'])} "
            f"of {format_duration(update['for'])} · {format_duration(update['left'])} left")


class LiveView:
    def __init__(self, console):
        self.console = console
        self.silent = False
        self.live = None  # the live line of a step's readings, while it waits
        self._would: list[tuple[str, str]] = []  # dry run: (step, change) that would have been made so far

    def __call__(self, event: Event) -> None:
        if self.silent:
            return
        try:
            if event.type == ev.STEP_FINISHED:
                self._stop_live()
            self._show(event)
        except OSError:
            # The run goes on between an apply and its verify or rollback; only its view stops.
            self.silent = True

    def progress(self, step: str, update: dict[str, Any]) -> None:
        """A step's live reading: one line redrawn in place on a terminal; nothing in a log or a pipe."""
        if self.silent or not self.console.is_terminal:
            return
        try:
            from rich.live import Live
            from rich.text import Text

            line = Text(progress_line(step, update), style="dim")
            if self.live is None:
                self.live = Live(line, console=self.console, transient=True, auto_refresh=False,
                                 redirect_stdout=False, redirect_stderr=False)
                self.live.start()
            self.live.update(line, refresh=True)
        except OSError:
            self.silent = True

    def _stop_live(self) -> None:
        if self.live is not None:
            live, self.live = self.live, None
            live.stop()

    def _dependency_note(self) -> str | None:
        if not self._would:
            return None
        earlier = ", ".join(f"{step} ({change})" for step, change in self._would)
        those = "those changes" if len(self._would) > 1 else "that change"
        return f"{INDENT}in a real run this follows {earlier}: planned on the world before {those}"

    def _show(self, event: Event) -> None:
        c, d = self.console, event.data
        clock = event.at.strftime("%H:%M:%S")
        match event.type:
            case ev.ALERT_RECEIVED:
                c.print(f"[dim]{clock}[/] [bold]alert[/] {d.get('name')} "
                        f"[dim]{' '.join(f'{k}={v}' for k, v in (d.get('labels') or {}).items())}[/]")
            case ev.RUN_STARTED:
                c.print(f"[dim]{clock}[/] [bold]playbook[/] {d.get('playbook')}: {d.get('title')}"
                        + (" [cyan](dry run)[/]" if d.get("dry_run") else ""))
            case ev.STEP_STARTED:
                c.print(f"[dim]{clock}[/] ▶ [bold]{event.step}[/] [dim]{d.get('uses')}[/] {d.get('name') or ''}")
            case ev.EVIDENCE:
                c.print(f"           [dim]· {d.get('title')}[/]", highlight=False)
            case ev.ACTION_PLANNED:
                c.print(f"           plan: {d.get('summary')}", markup=False)
                for line in d.get("diff", []):
                    style = "red" if line.startswith("-") else "green" if line.startswith("+") else "dim"
                    c.print(f"             {line}", style=style, markup=False, highlight=False)
                note = self._dependency_note() if d.get("dry_run") else None
                if note:
                    c.print(note, style="yellow", markup=False, highlight=False)
            case ev.GUARD_REFUSED:
                c.print(f"           [bold red]refused[/] by guard [bold]{d.get('guard')}[/]: {d.get('reason')}")
            case ev.ACTION_CONFIRMED:
                c.print(f"           [dim]confirmed by {d.get('by')} ({d.get('how')})[/]")
            case ev.ACTION_APPLIED:
                c.print(f"           [bold green]applied[/] {d.get('summary')}")
            case ev.ROLLBACK_APPLIED:
                c.print(f"           [yellow]rolled back[/] {d.get('target')} to {d.get('restored')}")
            case ev.ESCALATED:
                c.print(f"[dim]{clock}[/] [bold yellow]escalated[/]: {d.get('reason')}")
            case ev.STEP_FINISHED:
                status = d.get("status")
                if status == "would_change":
                    summary = str(d.get("summary") or "")
                    self._would.append((str(event.step), summary.removeprefix("would ")))
                if d.get("reason") == "when":
                    c.print(f"[dim]{clock} – {event.step} skipped ({d.get('summary')})[/]")
                    return
                style = _STATUS_STYLE.get(status, "")
                c.print(f"[dim]{clock}[/]   [{style}]{status}[/] {d.get('summary')}", highlight=False)
            case ev.RUN_FINISHED:
                style = "bold green" if d.get("outcome") in ("resolved", "dry_run") else "bold red"
                c.print(f"[dim]{clock}[/] [{style}]{d.get('outcome')}[/]: {d.get('reason')}")
