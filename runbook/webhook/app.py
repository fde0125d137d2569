"""The HTTP surface, routes only: webhooks in, health, metrics, proposals and approvals.

Every answer is a JSON body (a rejection says why) counted by source and status. A PagerDuty
signature is checked on the raw bytes before any parsing; an Alertmanager credential before the
body is even read; a body that can never be accepted (too deep, not Unicode, absurd times) is 400.
"""

from __future__ import annotations

import contextlib
import gc
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from runbook.errors import Busy, ClaimedElsewhere, CoordinationUnavailable, JournalError, Malformed, Rejected
from runbook.webhook import alertmanager, pagerduty
from runbook.webhook.inbound import Delivery
from runbook.webhook.service import Service

log = logging.getLogger("runbook.webhook")
ENABLE = {"pagerduty": "set RUNBOOK_PAGERDUTY_SECRET or pass --pagerduty-secret-file",
          "alertmanager": "set RUNBOOK_ALERTMANAGER_TOKEN or pass --alertmanager-token-file"}
RETRY_AFTER = "30"
RETRY_SOON = "5"  # another replica holds the claim: it commits or gives it up within seconds


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message, "status": status}, status_code=status, headers=headers)


async def _read_body(request: Request, cap: int) -> bytes:
    """The body, refusing more than `cap` bytes whether or not Content-Length says so."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json":
        raise Rejected(415, "unsupported_media", f"Content-Type must be application/json, not {media[:60]!r}")
    length = request.headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise Rejected(400, "malformed", "Content-Length is not a number")
        if int(length) > cap:
            raise Rejected(413, "too_large", f"the body is {int(length)} bytes; the limit is {cap}")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > cap:
                raise Rejected(413, "too_large", f"the body is over the limit of {cap} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        raise Rejected(400, "malformed", "the client went away before the body was complete") from None
    if not size:
        raise Rejected(400, "malformed", "the body is empty")
    return b"".join(chunks)


def create_app(service: Service) -> Starlette:
    metrics = service.metrics
    cap = service.config.max_body_bytes

    async def receive(request: Request, source: str,
                      decode: Callable[[Request], Awaitable[Callable[[], Delivery]]]) -> Response:
        """Every answer, whatever went wrong, is JSON and counted by source and status."""
        started = time.perf_counter()
        try:
            with service.gate.answering():
                response = await answer(request, source, decode)
        except Exception:  # a bug, not the sender's fault: a JSON 500 (retried), logged with its traceback
            log.exception("unexpected failure answering a %s delivery", source)
            metrics.deliveries.labels(source, "error").inc()
            response = _error(500, "the delivery could not be processed (an internal error, logged); retry later")
        metrics.responses.labels(source, str(response.status_code)).inc()
        metrics.ack_seconds.labels(source).observe(time.perf_counter() - started)
        return response

    async def answer(request: Request, source: str,
                     decode: Callable[[Request], Awaitable[Callable[[], Delivery]]]) -> Response:
        try:
            parse = await decode(request)
            # Parsing a body up to max_body_bytes takes a while: off the event loop, like the ack itself,
            # and in the same hand-off to a thread (each costs the loop a wake-up and the GIL a switch).
            ack = await run_in_threadpool(lambda: service.accept(parse()))
        except Rejected as exc:
            metrics.deliveries.labels(source, exc.verdict).inc()
            return _error(exc.status, exc.message, exc.headers)
        except Malformed as exc:
            metrics.deliveries.labels(source, "malformed").inc()
            return _error(400, str(exc)[:500])
        except ClaimedElsewhere as exc:  # before Busy, which it is a kind of
            metrics.deliveries.labels(source, "in_flight").inc()
            return _error(503, f"another replica is taking this delivery ({exc}); retry shortly",
                          {"Retry-After": RETRY_SOON})
        except Busy:
            metrics.deliveries.labels(source, "busy").inc()
            return _error(503, "the run queue is full; retry later", {"Retry-After": RETRY_AFTER})
        except CoordinationUnavailable as exc:
            log.error("cannot claim a %s delivery in the shared state: %s", source, exc)
            metrics.deliveries.labels(source, "unavailable").inc()
            return _error(503, "the shared dedupe state cannot be reached right now; retry later",
                          {"Retry-After": RETRY_AFTER})
        except JournalError as exc:
            log.error("cannot record a %s delivery: %s", source, exc)
            metrics.deliveries.labels(source, "unavailable").inc()
            return _error(503, "the journal cannot be written right now; retry later", {"Retry-After": RETRY_AFTER})
        duplicates = sum(1 for a in ack.body.get("alerts", []) if a["verdict"] == "duplicate")
        if ack.body.get("duplicate") and not ack.body.get("alerts"):
            duplicates = 1
        if duplicates:
            metrics.duplicates.labels(source).inc(duplicates)
        verdict = "duplicate" if ack.body.get("duplicate") else ("ignored" if "ignored" in ack.body else "accepted")
        metrics.deliveries.labels(source, verdict).inc()
        return JSONResponse(ack.body, status_code=ack.status)

    async def decode_pagerduty(request: Request) -> Callable[[], Delivery]:
        """The delivery's parser, once its signature is checked on the raw bytes."""
        if not service.secrets.pagerduty:
            raise Rejected(404, "disabled", f"PagerDuty webhooks are not enabled: {ENABLE['pagerduty']}")
        body = await _read_body(request, cap)
        problem = pagerduty.verify(body, request.headers.get(pagerduty.SIGNATURE_HEADER), service.secrets.pagerduty)
        if problem is not None:
            raise Rejected(401, "unauthorized", f"signature check failed: {problem}")
        webhook_id, now = request.headers.get(pagerduty.WEBHOOK_ID_HEADER), service.clock.now()
        return lambda: pagerduty.parse(body, webhook_id=webhook_id, now=now)

    async def decode_alertmanager(request: Request) -> Callable[[], Delivery]:
        """The delivery's parser, once its credential is checked and its body read."""
        if not service.secrets.alertmanager:
            raise Rejected(404, "disabled", f"Alertmanager webhooks are not enabled: {ENABLE['alertmanager']}")
        problem = alertmanager.authenticate(request.headers.get("authorization"), service.secrets.alertmanager)
        if problem is not None:
            raise Rejected(401, "unauthorized", problem, {"WWW-Authenticate": 'Bearer realm="runbook"'})
        body = await _read_body(request, cap)
        now = service.clock.now()
        return lambda: alertmanager.parse(body, now=now)

    async def pagerduty_route(request: Request) -> Response:
        return await receive(request, "pagerduty", decode_pagerduty)

    async def alertmanager_route(request: Request) -> Response:
        return await receive(request, "alertmanager", decode_alertmanager)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        problems = await run_in_threadpool(service.problems)
        warnings = await run_in_threadpool(service.warnings)
        extra = {"warnings": warnings} if warnings else {}
        if problems:
            return JSONResponse({"status": "not ready", "problems": problems, **extra}, status_code=503)
        return JSONResponse({"status": "ready", **extra})

    async def metrics_route(request: Request) -> Response:
        return Response(metrics.render(), media_type=metrics.content_type)

    def operator(request: Request) -> tuple[str | None, Response | None]:
        """The operator a bearer token names (or None: the caller names one), or a 401."""
        if not service.secrets.operators:
            return None, _error(404, "approvals are not enabled: set RUNBOOK_OPERATOR_TOKEN or pass --operator-token-file")
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        found = None
        for entry in service.secrets.operators:
            if hmac.compare_digest(entry.token.encode(), token.strip().encode()) and scheme.lower() == "bearer":
                found = entry
        if found is None:
            return None, _error(401, "a valid operator token is required (Authorization: Bearer ...)",
                                {"WWW-Authenticate": 'Bearer realm="runbook"'})
        return found.name, None

    async def list_proposals(request: Request) -> Response:
        _, denied = operator(request)
        if denied:
            return denied
        states = tuple(s for s in request.query_params.getlist("state") if s)
        return JSONResponse({"proposals": await run_in_threadpool(service.proposals, *states)})

    async def show_proposal(request: Request) -> Response:
        _, denied = operator(request)
        if denied:
            return denied
        found = await run_in_threadpool(service.proposal, request.path_params["incident"], request.path_params["step"])
        if found is None:
            return _error(404, "no such proposal")
        return JSONResponse(found)

    async def approve(request: Request) -> Response:
        name, denied = operator(request)
        if denied:
            return denied
        if name is None:
            try:
                doc = json.loads(await _read_body(request, 4096))
            except Rejected as exc:
                return _error(exc.status, exc.message)
            except ValueError:
                return _error(400, "the body must be JSON: {\"operator\": NAME}")
            name = doc.get("operator") if isinstance(doc, dict) else None
            if not isinstance(name, str) or not name:
                return _error(400, "name the approving operator: {\"operator\": NAME}")
        try:
            answer = await run_in_threadpool(service.approve, request.path_params["incident"],
                                             request.path_params["step"], name)
        except JournalError as exc:
            log.error("cannot record an approval: %s", exc)
            return _error(503, "the journal cannot be written right now; retry later", {"Retry-After": RETRY_AFTER})
        return JSONResponse(answer.body, status_code=answer.status)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await run_in_threadpool(service.start)
        # What start-up made (the modules, the playbooks, the world's clients) lives as long as the
        # server: frozen out of the collector, a full collection walks only what serving made since,
        # so its pause (tens of ms otherwise, every thread stopped) stays off the acks' tail.
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            await run_in_threadpool(service.stop)

    routes = [
        Route("/webhooks/pagerduty", pagerduty_route, methods=["POST"]),
        Route("/webhooks/alertmanager", alertmanager_route, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_route, methods=["GET"]),
        Route("/proposals", list_proposals, methods=["GET"]),
        Route("/proposals/{incident}/{step}", show_proposal, methods=["GET"]),
        Route("/proposals/{incident}/{step}/approve", approve, methods=["POST"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
