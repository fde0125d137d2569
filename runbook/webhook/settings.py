"""The `webhook:` config section, and the secrets, which come only from the environment or files.

Secrets are never flags (they would show in `ps`) and never printed: `Secrets` has no useful repr.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import pydantic

from runbook import settings
from runbook.model.patterns import checked_regex
from runbook.errors import InvalidInput
from runbook.model.duration import Duration

PAGERDUTY_SECRET_ENV = "RUNBOOK_PAGERDUTY_SECRET"
ALERTMANAGER_TOKEN_ENV = "RUNBOOK_ALERTMANAGER_TOKEN"
OPERATOR_TOKEN_ENV = "RUNBOOK_OPERATOR_TOKEN"
PAGERDUTY_API_TOKEN_ENV = "RUNBOOK_PAGERDUTY_API_TOKEN"  # REST API key for notes back to the incident
HOURS_48 = 48 * 3600.0
OPERATOR_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)


class RouteRule(_Strict):
    """Send matching alerts to a playbook; every given condition must hold. Checked in order."""

    playbook: str
    source: Literal["pagerduty", "alertmanager"] | None = None
    service: str | None = None  # PagerDuty service id or name
    title: str | None = None  # regular expression searched in the PagerDuty incident title
    alertname: str | None = None
    params: dict[str, str | int | float] = {}

    @pydantic.field_validator("title")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        return checked_regex(value) if value is not None else None


class Policy(_Strict):
    """What a webhook-started run may apply without a human; everything else is proposed."""

    unattended: dict[str, list[str]] = {}  # playbook name -> step ids applied unattended
    proposal_ttl: Duration = pydantic.Field(3600.0, gt=0)

    def allows(self, playbook: str, step: str) -> bool:
        return step in self.unattended.get(playbook, ())


class PagerDutyNotes(_Strict):
    """Notes back to the PagerDuty incident a run came from; on when RUNBOOK_PAGERDUTY_API_TOKEN is set."""

    # PagerDuty requires `From: <a valid user's email>` on notes and incident updates made with an account key.
    from_email: str | None = pydantic.Field(None, pattern=r"^[^@\s,;<>\"']+@[^@\s,;<>\"']+$", max_length=254)
    api_url: str = pydantic.Field("https://api.pagerduty.com", pattern=r"^https://[A-Za-z0-9.-]+(:[0-9]{1,5})?/?$")
    ca_file: str | None = None  # a CA bundle for a TLS-intercepting egress proxy; default: the system's
    resolve: bool = False  # also resolve the PagerDuty incident when the run resolved it
    attempts: int = pydantic.Field(6, ge=1, le=20)  # per request, on 429, 5xx and connection errors
    backoff: Duration = pydantic.Field(2.0, gt=0)  # doubled after each failed attempt
    max_backoff: Duration = pydantic.Field(60.0, gt=0)
    timeout: Duration = pydantic.Field(10.0, gt=0, le=120)
    max_chars: int = pydantic.Field(4000, ge=500, le=25000)  # PagerDuty takes up to 25000


class WebhookConfig(_Strict):
    routes: list[RouteRule] = []
    policy: Policy = Policy()
    max_body_bytes: int = pydantic.Field(1 << 20, ge=1024, le=16 << 20)
    queue_size: int = pydantic.Field(256, ge=1, le=100_000)
    workers: int = pydantic.Field(4, ge=1, le=64)
    # PagerDuty retries for up to 48 hours; a key forgotten sooner would let a retry act twice.
    dedupe_retention: Duration = pydantic.Field(7 * 86400.0, ge=HOURS_48)
    sweep_interval: Duration = pydantic.Field(5.0, gt=0)
    # A run still going after this long holds its worker stuck (a backend that never answers): /readyz says so.
    # The default outlasts the longest bundled run (oom-surge observes for up to 15m, then may roll back).
    worker_deadline: Duration = pydantic.Field(1800.0, gt=0)
    pagerduty_notes: PagerDutyNotes = PagerDutyNotes()


@dataclasses.dataclass(frozen=True)
class OperatorToken:
    name: str | None  # None: the caller names the operator
    token: str


@dataclasses.dataclass(frozen=True, repr=False)
class Secrets:
    pagerduty: tuple[bytes, ...] = ()
    alertmanager: tuple[str, ...] = ()
    operators: tuple[OperatorToken, ...] = ()
    pagerduty_api: str | None = None  # REST API token for notes back to PagerDuty

    def __repr__(self) -> str:  # counts only: a secret must never reach a log line
        return (f"Secrets(pagerduty={len(self.pagerduty)}, alertmanager={len(self.alertmanager)}, "
                f"operators={len(self.operators)}, pagerduty_api={'set' if self.pagerduty_api else 'unset'})")


def _split(text: str) -> list[str]:
    return [part.strip() for part in re.split(r"[,\n]", text) if part.strip() and not part.strip().startswith("#")]


def _read(path: str | Path, what: str) -> str:
    try:
        return Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read the {what} file {path}: {getattr(exc, 'strerror', None) or exc}") from None


def load_secrets(env: Mapping[str, str] | None = None, *, pagerduty_file: str | None = None,
                 alertmanager_file: str | None = None, operator_file: str | None = None) -> Secrets:
    """Secrets from the files given, else from the environment (comma-separated lists allow rotation)."""
    env = settings.environment() if env is None else env
    pd = _split(_read(pagerduty_file, "PagerDuty secret")) if pagerduty_file else _split(env.get(PAGERDUTY_SECRET_ENV, ""))
    am = (_split(_read(alertmanager_file, "Alertmanager token")) if alertmanager_file
          else _split(env.get(ALERTMANAGER_TOKEN_ENV, "")))
    operators = []
    raw = _read(operator_file, "operator token") if operator_file else env.get(OPERATOR_TOKEN_ENV, "")
    for entry in _split(raw):
        # `name token` binds a token to a person; a bare token lets the caller say who they are.
        name, _, token = entry.partition(" ")
        if token.strip():
            if not OPERATOR_NAME.fullmatch(name):
                raise InvalidInput(f"operator name {name[:64]!r} must be letters, digits, '.', '_', '@' or '-'")
            operators.append(OperatorToken(name, token.strip()))
        else:
            operators.append(OperatorToken(None, entry))
    for token in [*am, *(o.token for o in operators)]:
        if len(token) < 16:
            raise InvalidInput("a webhook or operator token must be at least 16 characters long")
    api_token = env.get(PAGERDUTY_API_TOKEN_ENV, "").strip() or None
    return Secrets(tuple(s.encode("utf-8") for s in pd), tuple(am), tuple(operators), api_token)
