"""Calls through the official client with a timeout each, bounded retries and runbook's errors.

429, 5xx and transport errors (refused, timed out) are retried at most `retries` times, waiting
at most `max_wait` seconds in all and honouring Retry-After. Every write runbook sends carries a
precondition (or creates), so a retried write whose first answer was lost meets a 409 or 404,
which the caller resolves by re-reading. Responses are read as plain JSON.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import time
from collections.abc import Callable
from typing import Any

from runbook.errors import BackendUnavailable, Conflict, InvalidInput, NotFound, RunbookError

RETRIABLE = frozenset({429, 500, 502, 503, 504})


@dataclasses.dataclass(frozen=True)
class Settings:
    connect_timeout: float = 5.0
    request_timeout: float = 15.0
    retries: int = 3
    max_wait: float = 30.0  # seconds of waiting between retries, in all, for one call
    evict: bool = False  # delete pods through the Eviction API
    lock_namespace: str | None = None  # where target Leases live; None: the target's own namespace
    lease_seconds: int = 60


@dataclasses.dataclass
class ApiFailure:
    """What an error response said: HTTP status, the Status document's reason/message, Retry-After."""

    status: int
    reason: str = ""
    message: str = ""
    causes: tuple[dict, ...] = ()
    retry_after: float | None = None


def failure_of(exc: Exception) -> ApiFailure:
    """An ApiException (or a transport error, as status 0) read into an ApiFailure."""
    status = getattr(exc, "status", None)
    if not isinstance(status, int):
        return ApiFailure(0, type(exc).__name__, _short(str(exc)))
    body = getattr(exc, "body", None) or ""
    reason, message, causes = getattr(exc, "reason", "") or "", "", ()
    try:
        doc = json.loads(body) if body else {}
    except ValueError:
        doc = {}
    if isinstance(doc, dict) and doc.get("kind") == "Status":
        reason = doc.get("reason") or reason
        message = doc.get("message") or ""
        causes = tuple(c for c in (doc.get("details") or {}).get("causes") or [] if isinstance(c, dict))
    elif body:
        message = _short(body)
    headers = getattr(exc, "headers", None) or {}
    retry_after = None
    raw = headers.get("Retry-After") if hasattr(headers, "get") else None
    if raw is not None:
        try:
            retry_after = max(0.0, float(raw))
        except ValueError:
            retry_after = None
    return ApiFailure(status, reason, message or str(getattr(exc, "reason", "") or ""), causes, retry_after)


def _short(text: str, limit: int = 300) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def error_for(what: str, failure: ApiFailure, *, where: str, attempts: int = 1) -> RunbookError:
    """The runbook error for a failed call, saying what to do about it."""
    said = failure.message or failure.reason or f"HTTP {failure.status}"
    tried = f" (after {attempts} attempts)" if attempts > 1 else ""
    if failure.status == 0:
        return BackendUnavailable(f"{what}: cannot reach the Kubernetes API at {where}{tried}: {said}; "
                                  "check the network and the kubeconfig's server address")
    if failure.status == 401:
        return BackendUnavailable(f"{what}: the Kubernetes API at {where} rejected the credentials (401); "
                                  "refresh the kubeconfig's credentials (or the service account token)")
    if failure.status == 403:
        return BackendUnavailable(f"{what}: forbidden: {said}; grant that verb to runbook's identity "
                                  "(see deploy/rbac.yaml)")
    if failure.status == 404:
        return NotFound(f"{what}: {said} (check the namespace and the --context)")
    if failure.status in (409, 410):
        return Conflict(f"{what}: {said}")
    if failure.status in (400, 415, 422):
        return InvalidInput(f"{what}: the API server rejected the request: {said}")
    if failure.status == 429:
        return BackendUnavailable(f"{what}: the API server is throttling requests (429){tried}; try again later")
    return BackendUnavailable(f"{what}: the API server failed with HTTP {failure.status}{tried}: {said}")


def _located(error: RunbookError, failure: ApiFailure, attempts: int) -> RunbookError:
    """The error, carrying the failure it came from and how many attempts were made.

    A caller whose write was retried can then tell "refused" from "done by a lost earlier attempt".
    """
    error.failure = failure  # type: ignore[attr-defined]
    error.attempts = attempts  # type: ignore[attr-defined]
    return error


REST_CONNECTIONS = 64  # idle connections kept to the API server: 4 incidents × a fan-out of 16


class KubeApi:
    """The official client's typed APIs over one ApiClient, and `call()` to use them safely."""

    def __init__(self, configuration: Any, settings: Settings, *, context: str = "",
                 sleep: Callable[[float], None] = time.sleep):
        from kubernetes import client

        self.configuration = configuration
        self.settings = settings
        self.context = context
        self.sleep = sleep
        # The client keeps cpu_count × 5 idle connections: a step fanning out over 16 pods (or a
        # service running several incidents) on a small machine would close the rest after each
        # request and pay a new TLS handshake for the next one.
        configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, REST_CONNECTIONS)
        self.client = client.ApiClient(configuration)
        self.core = client.CoreV1Api(self.client)
        self.apps = client.AppsV1Api(self.client)
        self.coordination = client.CoordinationV1Api(self.client)

    @property
    def host(self) -> str:
        return str(self.configuration.host)

    def describe(self) -> str:
        return f"context {self.context} at {self.host}" if self.context else self.host

    def call(self, what: str, method: Callable[..., Any], *args: Any, retry: Callable[[ApiFailure], bool] | None = None,
             max_bytes: int | None = None, **kwargs: Any) -> Any:
        """`method(*args, **kwargs)` with a timeout, retried on 429/5xx/transport errors; the JSON body.

        `retry` can veto retrying a failure (an eviction's 429 is a PDB saying no, not throttling).
        With `max_bytes` the body is returned as bytes, read up to that many.
        """
        import urllib3

        from kubernetes.client.exceptions import ApiException

        attempts, waited = 0, 0.0
        while True:
            attempts += 1
            try:
                response = method(*args, _request_timeout=(self.settings.connect_timeout, self.settings.request_timeout),
                                  _preload_content=False, **kwargs)
                try:
                    data = response.read(max_bytes) if max_bytes is not None else response.read()
                finally:
                    response.release_conn()
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
                failure = failure_of(exc)
                retriable = (failure.status in RETRIABLE or failure.status == 0) and (retry is None or retry(failure))
                if not retriable or attempts > self.settings.retries:
                    raise _located(error_for(what, failure, where=self.host, attempts=attempts), failure,
                                   attempts) from None
                # Retry-After when the server gives one; else exponential backoff with jitter.
                wait = failure.retry_after if failure.retry_after is not None else \
                    min(0.2 * 2 ** (attempts - 1), 5.0) * random.uniform(0.5, 1.0)
                if waited + wait > self.settings.max_wait:
                    error = error_for(what, failure, where=self.host, attempts=attempts)
                    why = f"the server asked to wait {wait:g}s more" if failure.retry_after is not None else \
                        "waiting to retry would take longer"
                    raise _located(type(error)(f"{error} ({why}; runbook waits at most {self.settings.max_wait:g}s "
                                               "per call)"), failure, attempts) from None
                self.sleep(wait)
                waited += wait
                continue
            if max_bytes is not None:
                return data
            try:
                return json.loads(data) if data else {}
            except ValueError:
                raise BackendUnavailable(f"{what}: the API server at {self.host} did not answer with JSON") from None

    def close(self) -> None:
        """Close every connection to the API server now.

        The client's close clears urllib3's PoolManager, and `clear()` (urllib3 2.x) only forgets its
        pools: a pool still referenced (by the response an error carries, in a traceback kept for a
        report) keeps its idle connections open until the garbage collector finds it.
        """
        pools = self.client.rest_client.pool_manager.pools
        for key in pools.keys():
            pool = pools.get(key)
            if pool is not None:
                pool.close()
        self.client.close()
