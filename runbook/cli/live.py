"""Live progress of a run on the terminal, drawn from journal events as they are written.

The engine never prints; this listener turns each event into a line (and a plan into a diff).
A console that cannot be written to (a closed pipe, a hung-up terminal) makes it fall silent.
"""

from __future__ import annotations

from runbook.model import events as ev
from runbook.model.events import Event

_STATUS_STYLE = {"ok": "green", "changed": "bold green", "would_change": "cyan", "skipped": "dim",
                 "refused": "bold red", "failed": "bold red"}


class LiveView:
    def __init__(self, console):
        self.console = console
        self.silent = False

    def __call__(self, event: Event) -> None:
        if self.silent:
            return
        try:
            self._show(event)
        except OSError:
            # The run goes on between an apply and its verify or rollback; only its view stops.
            self.silent = True

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
                    c.print(f"             [{style}]{line}[/]", highlight=False)
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
                if d.get("reason") == "when":
                    c.print(f"[dim]{clock} – {event.step} skipped ({d.get('summary')})[/]")
                    return
                style = _STATUS_STYLE.get(status, "")
                c.print(f"[dim]{clock}[/]   [{style}]{status}[/] {d.get('summary')}", highlight=False)
            case ev.RUN_FINISHED:
                style = "bold green" if d.get("outcome") in ("resolved", "dry_run") else "bold red"
                c.print(f"[dim]{clock}[/] [{style}]{d.get('outcome')}[/]: {d.get('reason')}")
