"""The config file's `prometheus:` section, and the HTTP session it describes (auth, TLS, timeouts).

Secrets never sit in the config file: a bearer token or a password comes from a file or an
environment variable (`RUNBOOK_PROMETHEUS_TOKEN` by default).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pydantic

from runbook.errors import InvalidInput
from runbook.model.duration import Duration

TOKEN_ENV = "RUNBOOK_PROMETHEUS_TOKEN"
# Gateways in front of Prometheus fail this way for a moment; retrying once more is cheap.
# 503 is not here: Prometheus answers 503 when a query timed out, and retrying doubles the wait.
RETRY_STATUSES = (502, 504)


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)


class BasicAuth(_Strict):
    username: str = pydantic.Field(min_length=1)
    password_env: str | None = None
    password_file: str | None = None

    @pydantic.model_validator(mode="after")
    def _one_password(self) -> "BasicAuth":
        if (self.password_env is None) == (self.password_file is None):
            raise ValueError("give exactly one of `password_env` or `password_file` (never the password itself)")
        return self


class Tls(_Strict):
    ca_file: str | None = None  # CA bundle that signed the server's certificate
    cert_file: str | None = None  # client certificate (mutual TLS)
    key_file: str | None = None
    insecure_skip_verify: bool = False

    @pydantic.model_validator(mode="after")
    def _pair(self) -> "Tls":
        if self.key_file and not self.cert_file:
            raise ValueError("`key_file` needs `cert_file`")
        return self


class PrometheusSection(_Strict):
    """`prometheus:` in the config file. Precedence for the URL: flag > env > this section."""

    url: str | None = None
    timeout: Duration = pydantic.Field(10.0, gt=0, le=300)  # waiting for an answer, per request
    connect_timeout: Duration = pydantic.Field(3.0, gt=0, le=60)
    retries: int = pydantic.Field(2, ge=0, le=5)  # refused connections and 502/504, with backoff
    bearer_token_file: str | None = None
    bearer_token_env: str | None = None
    basic_auth: BasicAuth | None = None
    headers: dict[str, str] = {}  # e.g. X-Scope-OrgID for Mimir, Cortex or Thanos tenants
    tls: Tls = Tls()

    @pydantic.field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return None if value is None else check_url(value)

    @pydantic.field_validator("headers")
    @classmethod
    def _headers(cls, headers: dict[str, str]) -> dict[str, str]:
        if any(k.lower() == "authorization" for k in headers):
            raise ValueError("no Authorization header here: use `bearer_token_file`, `bearer_token_env` or "
                             "`basic_auth`, so the secret stays out of the config file")
        return headers

    @pydantic.model_validator(mode="after")
    def _one_auth(self) -> "PrometheusSection":
        given = [k for k in ("bearer_token_file", "bearer_token_env", "basic_auth") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give one way to authenticate, found {', '.join(given)}")
        return self


def check_url(value: str) -> str:
    parsed = urllib.parse.urlparse(value.strip())
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"{value!r} is not a Prometheus base URL such as http://prometheus:9090")
    if parsed.query or parsed.fragment:
        raise ValueError(f"{value!r}: give the base URL, without ?query or #fragment")
    return value.strip().rstrip("/")


def _read_secret(path: str, what: str) -> str:
    try:
        secret = Path(path).expanduser().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read the Prometheus {what} from {path}: {exc}") from None
    if not secret:
        raise InvalidInput(f"the Prometheus {what} file {path} is empty")
    return secret


def _env_secret(env: Mapping[str, str], name: str, what: str) -> str:
    secret = env.get(name, "").strip()
    if not secret:
        raise InvalidInput(f"the Prometheus {what} is to come from ${name}, which is not set")
    return secret


def credentials(section: PrometheusSection, env: Mapping[str, str]) -> tuple[dict[str, str], tuple[str, str] | None]:
    """(headers, basic auth) from the section; secrets are read now, so a bad path fails early."""
    headers = dict(section.headers)
    auth = None
    if section.bearer_token_file:
        headers["Authorization"] = f"Bearer {_read_secret(section.bearer_token_file, 'bearer token')}"
    elif section.bearer_token_env:
        headers["Authorization"] = f"Bearer {_env_secret(env, section.bearer_token_env, 'bearer token')}"
    elif section.basic_auth is not None:
        basic = section.basic_auth
        password = (_read_secret(basic.password_file, "password") if basic.password_file
                    else _env_secret(env, basic.password_env or "", "password"))
        auth = (basic.username, password)
    elif env.get(TOKEN_ENV, "").strip():
        headers["Authorization"] = f"Bearer {env[TOKEN_ENV].strip()}"
    return headers, auth


def session(section: PrometheusSection) -> Any:
    """A requests session that never waits without a limit (the client library's default)."""
    import requests

    class _TimeoutSession(requests.Session):
        def request(self, method: str, url: str, **kwargs: Any) -> Any:  # type: ignore[override]
            if kwargs.get("timeout") is None:
                kwargs["timeout"] = (section.connect_timeout, section.timeout)
            return super().request(method, url, **kwargs)

    s = _TimeoutSession()
    tls = section.tls
    s.verify = False if tls.insecure_skip_verify else (str(Path(tls.ca_file).expanduser()) if tls.ca_file else True)
    if tls.cert_file:
        s.cert = (tls.cert_file, tls.key_file) if tls.key_file else tls.cert_file
    return s


def retry(section: PrometheusSection) -> Any:
    from urllib3.util.retry import Retry

    # Reads are not retried (False re-raises the timeout itself): a server that accepted and
    # went quiet has had its `timeout`.
    return Retry(total=section.retries, connect=section.retries, read=False, other=0, status=section.retries,
                 status_forcelist=RETRY_STATUSES, allowed_methods=frozenset({"GET", "POST"}),
                 backoff_factor=0.2, raise_on_status=False, respect_retry_after_header=False)
