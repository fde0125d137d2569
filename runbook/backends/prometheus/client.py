"""The real `Metrics`: signals resolved through the catalog, asked of Prometheus over its HTTP API.

Built on prometheus-api-client with explicit timeouts and bounded retries. Silence is never
health: no answer raises `BackendUnavailable`; a rejected query raises `InvalidInput` with the
server's own message; other HTTP errors raise `BackendError`.
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from runbook.backends.base import Sample, Series
from runbook.backends.prometheus.config import TOKEN_ENV, PrometheusSection, check_url, credentials, retry, session
from runbook.config import Config
from runbook.errors import BackendError, BackendUnavailable, InvalidInput
from runbook.signals import promql
from runbook.signals.catalog import Catalog, build_catalog

__all__ = ["PrometheusMetrics", "PrometheusSection", "connect"]

_STATUS = re.compile(r"HTTP Status Code (\d+) \((.*)\)\s*$", re.DOTALL)
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")]+)")


def connect(config: Config, *, url: str | None, env: Mapping[str, str]) -> "PrometheusMetrics | None":
    """The metrics backend from `url` (flag or environment) or the config file; None when neither."""
    section = config.section_model("prometheus", PrometheusSection)
    chosen = url or section.url
    if not chosen:
        return None
    try:
        chosen = check_url(chosen)
    except ValueError as exc:
        raise InvalidInput(f"--prometheus-url: {exc}") from None
    return PrometheusMetrics(chosen, build_catalog(config), section=section, env=env)


def _utc(t: dt.datetime) -> dt.datetime:
    return t.replace(tzinfo=dt.timezone.utc) if t.tzinfo is None else t


class PrometheusMetrics:
    """`Metrics` over one Prometheus (or a compatible API: Thanos, Mimir, VictoriaMetrics)."""

    def __init__(self, url: str, catalog: Catalog, *, section: PrometheusSection | None = None,
                 env: Mapping[str, str] | None = None):
        from prometheus_api_client import PrometheusConnect

        self.url = url
        self.catalog = catalog
        self.section = section or PrometheusSection()
        headers, auth = credentials(self.section, env or {})
        self._client = PrometheusConnect(url=url, headers=headers or None, auth=auth, session=session(self.section),
                                         retry=retry(self.section))

    # -- the Metrics protocol ------------------------------------------------------------------

    def query(self, signal: str, *, at: dt.datetime, labels: Mapping[str, str] = {},
              by: Sequence[str] = ()) -> list[Sample]:
        return self.query_promql(self.catalog.render(signal, labels, by), at=at, what=f"signal {signal}")

    def query_range(self, signal: str, *, start: dt.datetime, end: dt.datetime, step_seconds: float,
                    labels: Mapping[str, str] = {}, by: Sequence[str] = ()) -> list[Series]:
        return self.query_range_promql(self.catalog.render(signal, labels, by), start=start, end=end,
                                       step_seconds=step_seconds, what=f"signal {signal}")

    # -- raw PromQL -----------------------------------------------------------------------------

    def query_promql(self, expr: str, *, at: dt.datetime, what: str = "the query") -> list[Sample]:
        params = {"time": f"{_utc(at).timestamp():.3f}", "timeout": promql.prom_duration(self.section.timeout)}
        rows = self._call(lambda: self._client.custom_query(query=expr, params=params), expr, what)
        samples = []
        for row in _rows(rows, self.url, what):
            try:
                value = float(row["value"][1])
                labels = _labels(row)
            except (KeyError, IndexError, TypeError, ValueError, AttributeError):
                raise BackendError(f"Prometheus at {self.url} answered {what} with a malformed sample "
                                   f"{str(row)[:200]}") from None
            if not math.isnan(value):  # NaN is "no value" (a quantile of no requests), not a reading
                samples.append(Sample(labels=labels, value=value))
        return samples

    def query_range_promql(self, expr: str, *, start: dt.datetime, end: dt.datetime, step_seconds: float,
                           what: str = "the query") -> list[Series]:
        start, end = _utc(start), _utc(end)
        if step_seconds <= 0:
            raise InvalidInput(f"range query step must be > 0, found {step_seconds}")
        if end < start:
            raise InvalidInput(f"range query ends ({end.isoformat()}) before it starts ({start.isoformat()})")
        points = int((end - start).total_seconds() // step_seconds) + 1
        if points > promql.MAX_RANGE_POINTS:
            raise InvalidInput(f"range query of {points} points per series exceeds Prometheus' limit of "
                               f"{promql.MAX_RANGE_POINTS}; use a larger step")
        params = {"timeout": promql.prom_duration(self.section.timeout)}
        rows = self._call(lambda: self._client.custom_query_range(query=expr, start_time=start, end_time=end,
                                                                  step=f"{step_seconds:g}", params=params),
                          expr, what)
        out = []
        when: dict[Any, dt.datetime] = {}  # the series share one grid: each time is converted once
        for row in _rows(rows, self.url, what):
            try:
                pts = range_points(row.get("values", []), when)
                labels = _labels(row)
            except (KeyError, IndexError, TypeError, ValueError, AttributeError, OverflowError, OSError):
                raise BackendError(f"Prometheus at {self.url} answered {what} with a malformed series "
                                   f"{str(row)[:200]}") from None
            if pts:
                out.append(Series(labels=labels, points=pts))
        return out

    def close(self) -> None:
        close = getattr(self._client, "close", None)  # older client releases have none
        if callable(close):
            close()

    # -- errors -----------------------------------------------------------------------------------

    def _call(self, request: Callable[[], Any], expr: str, what: str) -> Any:
        import requests
        from prometheus_api_client import PrometheusApiClientException

        where = f"prometheus at {self.url}"
        s = self.section
        try:
            result = request()
        except requests.exceptions.SSLError as exc:
            raise BackendUnavailable(f"{where}: TLS failed ({_reason(exc)}); set prometheus.tls.ca_file to the CA "
                                     f"that signed its certificate") from None
        except requests.exceptions.ConnectTimeout:
            raise BackendUnavailable(f"{where} is unreachable: no connection within {s.connect_timeout:g}s "
                                     f"({s.retries + 1} attempt(s))") from None
        except requests.exceptions.ReadTimeout:
            raise BackendUnavailable(f"{where} did not answer within {s.timeout:g}s "
                                     f"(raise prometheus.timeout in the config file if it is just slow)") from None
        except (ValueError, KeyError, TypeError):  # requests' JSONDecodeError is a ValueError too
            raise BackendError(f"{where} answered with something that is not the Prometheus API; is the URL "
                               f"the server's base URL (like http://prometheus:9090)?") from None
        except requests.exceptions.RequestException as exc:
            raise BackendUnavailable(f"{where} is unreachable: {_reason(exc)}") from None
        except PrometheusApiClientException as exc:
            raise self._http_error(str(exc), expr, what) from None
        if not isinstance(result, list):
            raise BackendError(f"{where} answered a {type(result).__name__} where the API gives a list of series")
        return result

    def _http_error(self, text: str, expr: str, what: str) -> Exception:
        where = f"prometheus at {self.url}"
        found = _STATUS.match(text)
        status = int(found.group(1)) if found else 0
        message = _server_message(found.group(2)) if found else text
        if status == 400:
            return InvalidInput(f"{where} rejected {what}: {message}\n  query: {expr}\n  fix the expression in the "
                                f"config file (`signals: overrides:`) or the profile")
        if status in (401, 403):
            return BackendError(f"{where} refused access (HTTP {status}: {message}); check bearer_token_file, "
                                f"bearer_token_env, basic_auth or ${TOKEN_ENV}")
        if status == 404:
            return BackendError(f"{where} has no query API (HTTP 404); give the server's base URL, such as "
                                f"http://prometheus:9090, without /api/v1")
        if status == 422:
            return BackendError(f"{where} could not run {what}: {message}\n  query: {expr}")
        if status == 429 or status >= 500:
            return BackendUnavailable(f"{where} could not answer (HTTP {status}): {message}")
        return BackendError(f"{where} answered HTTP {status or '?'}: {message}")


def range_points(values: Any, when: dict[Any, dt.datetime]) -> tuple[tuple[dt.datetime, float], ...]:
    """A range query's `[time, "value"]` pairs as (UTC time, number), NaNs left out; `when` keeps the
    times already converted (a query's series share one grid: 512 pods × 241 points are 241 times)."""
    points = []
    for t, v in values:
        value = float(v)
        if value != value:  # NaN: a stale or missing sample, not a reading
            continue
        at = when.get(t)
        if at is None:
            at = when[t] = dt.datetime.fromtimestamp(float(t), dt.timezone.utc)
        points.append((at, value))
    return tuple(points)


def _rows(rows: Any, url: str, what: str) -> list[Mapping[str, Any]]:
    """The result rows, each an object; anything else is a malformed answer, named as such."""
    if not isinstance(rows, list) or not all(isinstance(row, Mapping) for row in rows):
        raise BackendError(f"Prometheus at {url} answered {what} with a malformed result {str(rows)[:200]}")
    return rows


def _labels(row: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (row.get("metric") or {}).items() if k != "__name__"}


def _server_message(body_repr: str) -> str:
    """The `error` of Prometheus' JSON answer, else the body's first line (proxies send HTML)."""
    try:
        raw = ast.literal_eval(body_repr)
        body = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    except (ValueError, SyntaxError):
        body = body_repr
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and doc.get("error"):
        kind = doc.get("errorType")
        return f"{doc['error']}" + (f" ({kind})" if kind else "")
    line = next((ln.strip() for ln in body.splitlines() if ln.strip()), "no message")
    return line[:300]


def _reason(exc: BaseException) -> str:
    """The root cause in a few words: 'Connection refused', not three nested reprs."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.strerror:
            return current.strerror
        nxt = current.__cause__ or current.__context__
        if nxt is None and current.args and isinstance(current.args[0], BaseException):
            nxt = current.args[0]
        current = nxt
    text = str(exc)
    found = _ERRNO.search(text)
    if found:
        return found.group(1).strip()
    if "RemoteDisconnected" in text or "closed connection without response" in text:
        return "the connection was closed without an answer"
    if "Connection reset" in text:
        return "the connection was reset"
    return text[:200]
