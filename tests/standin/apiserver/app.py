"""The HTTP and WebSocket face of the test API server, as a Starlette app.

Requests are authenticated by bearer token, authorised by RBAC, optionally hit by an injected
fault (latency, 409/429/5xx with Retry-After, a lost response), then served from the store.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import threading
import traceback
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.standin.apiserver import patches, resources, tables
from tests.standin.apiserver.controllers import PODS, Controllers, is_ready
from tests.standin.apiserver.errors import ApiError
from tests.standin.apiserver.kubelet import ExecAnswer, Kubelet
from tests.standin.apiserver.rbac import Policy
from tests.standin.apiserver.resources import BY_KIND, BY_PATH, Resource
from tests.standin.apiserver.store import Store

CHANNEL_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
_CORE = re.compile(r"^/api/(?P<version>v1)(?:/namespaces/(?P<ns>[^/]+))?/(?P<res>[^/]+)"
                   r"(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$")
_GROUP = re.compile(r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)(?:/namespaces/(?P<ns>[^/]+))?/(?P<res>[^/]+)"
                    r"(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$")
_PDBS = BY_KIND["PodDisruptionBudget"]


@dataclasses.dataclass
class Fault:
    """What the server does to the next `times` requests whose method and path match."""

    method: str | None = None  # None: any method
    path: str = ""  # a regex searched in the request path
    status: int | None = 500  # None: answer normally (latency or `before` only)
    retry_after: int | None = None
    times: int = 1
    after: bool = False  # carry the request out, then answer with the fault: a lost response
    delay: float = 0.0  # seconds before answering
    before: Callable[[], None] | None = None  # runs first: someone else's write racing this request
    hits: int = dataclasses.field(default=0, init=False)

    def matches(self, method: str, path: str) -> bool:
        return self.hits < self.times and (self.method is None or self.method == method) and bool(re.search(self.path, path))

    def error(self) -> ApiError:
        reasons = {409: "Conflict", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
                   504: "Timeout"}
        messages = {429: "Too many requests, please try again later.", 409: "injected conflict"}
        return ApiError(self.status or 500, reasons.get(self.status or 500, "InternalError"),
                        messages.get(self.status or 500, f"injected failure {self.status}"),
                        retry_after=self.retry_after)


@dataclasses.dataclass(frozen=True)
class Seen:
    """One request as the audit log keeps it."""

    user: str
    method: str
    path: str
    verb: str
    group: str
    resource: str  # "pods", "pods/exec", …
    namespace: str | None
    name: str | None
    code: int
    dry_run: bool = False
    content_type: str = ""


@dataclasses.dataclass(frozen=True)
class Target:
    res: Resource
    namespace: str | None
    name: str | None
    sub: str | None

    @property
    def resource(self) -> str:
        return f"{self.res.plural}/{self.sub}" if self.sub else self.res.plural


def _parse(path: str) -> Target | None:
    match = _CORE.match(path) or _GROUP.match(path)
    if not match:
        return None
    parts = match.groupdict()
    res = BY_PATH.get((parts.get("group") or "", parts["version"], parts["res"]))
    if res is None or (parts["ns"] and not res.namespaced):
        return None
    return Target(res, unquote(parts["ns"]) if parts["ns"] else None,
                  unquote(parts["name"]) if parts["name"] else None, parts["sub"])


def _verb(method: str, target: Target, query: Any) -> str:
    if method == "GET":
        if target.name is None:
            return "watch" if query.get("watch") in ("true", "1") else "list"
        return "get"
    if method == "DELETE" and target.name is None:
        return "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, method.lower())


def _selector_text(obj: dict) -> str:
    labels = (obj.get("spec", {}).get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _log_options(name: str, query: Any) -> dict[str, Any]:
    """PodLogOptions from the query, validated as the API server does (422 Invalid naming the field)."""
    def number(key: str, least: int) -> int | None:
        raw = query.get(key)
        if not raw:
            return None
        try:
            value = int(raw)
        except ValueError:
            raise ApiError.bad_request(f"strconv.ParseInt: parsing {raw!r}: invalid syntax") from None
        if value < least:
            what = "must be greater than 0" if least == 1 else "must be greater than or equal to 0"
            raise ApiError.invalid("PodLogOptions", name, f"{key}: Invalid value: {value}: {what}")
        return value

    options: dict[str, Any] = {"since_seconds": number("sinceSeconds", 1), "tail_lines": number("tailLines", 0),
                               "limit_bytes": number("limitBytes", 1), "timestamps": query.get("timestamps") == "true"}
    if query.get("previous") == "true":
        options["previous"] = True  # only when asked: a kubelet that keeps no previous logs needs no such option
    return options


def _scale(obj: dict) -> dict:
    meta = obj["metadata"]
    return {"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in meta},
            "spec": {"replicas": obj["spec"].get("replicas", 1)},
            "status": {"replicas": obj.get("status", {}).get("replicas", 0), "selector": _selector_text(obj)}}


def _validate(res: Resource, obj: dict) -> None:
    name = obj.get("metadata", {}).get("name", "")
    if res.kind in ("StatefulSet", "Deployment", "DaemonSet"):
        spec = obj.get("spec") or {}
        replicas = spec.get("replicas", 1)
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise ApiError.invalid(res.group_resource, name, f"spec.replicas: Invalid value: {replicas!r}: must be "
                                                             "greater than or equal to 0")
        selector = (spec.get("selector") or {}).get("matchLabels") or {}
        labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        if any(labels.get(k) != v for k, v in selector.items()):
            raise ApiError.invalid(res.group_resource, name, "spec.template.metadata.labels: Invalid value: "
                                                             "`selector` does not match template `labels`")
        containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
        for i, c in enumerate(containers):
            for field in ("command", "args"):
                value = c.get(field)
                if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                    raise ApiError.invalid(res.group_resource, name, f"spec.template.spec.containers[{i}].{field}: "
                                                                     f"Invalid value: must be a list of strings")
        if not containers:
            raise ApiError.invalid(res.group_resource, name, "spec.template.spec.containers: Required value")
    if res.kind == "ConfigMap":
        _validate_config_map(res, name, obj)
    if res.kind == "Lease":
        duration = (obj.get("spec") or {}).get("leaseDurationSeconds")
        if duration is not None and (not isinstance(duration, int) or duration <= 0):
            raise ApiError.invalid(res.group_resource, name, "spec.leaseDurationSeconds: must be greater than 0")


_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
CONFIG_MAP_MAX_BYTES = 1024 * 1024


def _validate_config_map(res: Resource, name: str, obj: dict) -> None:
    """As the API server validates a ConfigMap: string values, config keys, 1 MiB of data in all."""
    data = obj.get("data") or {}
    if not isinstance(data, dict):
        raise ApiError.invalid(res.group_resource, name, "data: Invalid value: must be a map of strings")
    size = 0
    for key, value in data.items():
        if not _CONFIG_KEY.match(key) or len(key) > 253:
            raise ApiError.invalid(res.group_resource, name, f"data[{key}]: Invalid value: {key!r}: a valid config "
                                   "key must consist of alphanumeric characters, '-', '_' or '.' (regex used for "
                                   "validation is '[-._a-zA-Z0-9]+')")
        if not isinstance(value, str):
            raise ApiError.invalid(res.group_resource, name, f"data[{key}]: Invalid value: must be a string")
        size += len(key) + len(value.encode("utf-8"))
    if size > CONFIG_MAP_MAX_BYTES:
        raise ApiError.invalid(res.group_resource, name, f"data: Too long: must have at most {CONFIG_MAP_MAX_BYTES} "
                                                         "bytes")


class ApiServerApp:
    """State (store, kubelet, faults, audit) and the ASGI app serving it."""

    def __init__(self, *, tokens: dict[str, str], policies: dict[str, Policy | None]):
        self.tokens = tokens  # bearer token -> user
        self.policies = policies  # user -> Policy, or None for an unrestricted user
        self.host = ""
        self._lock = threading.Lock()
        self.reset()
        self.app = Starlette(routes=[
            WebSocketRoute("/api/v1/namespaces/{namespace}/pods/{name}/exec", self.exec_socket),
            Route("/{path:path}", self.http, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
        ])

    def reset(self) -> None:
        """Forget every object, script, fault and request: a fresh, empty cluster."""
        self.store = Store()
        self.kubelet = Kubelet()
        self.unready: set[tuple[str, str]] = set()  # (namespace, pod) that start not ready
        self.controllers = Controllers(self.store, starts_ready=lambda ns, name: (ns, name) not in self.unready)
        self.faults: list[Fault] = []
        self.seen: list[Seen] = []
        self.authorized: set[tuple[str, str, str, str]] = set()  # (user, group, resource, verb) granted
        self.crashes: list[str] = []  # tracebacks of this server's own bugs

    # -- plumbing ---------------------------------------------------------------------------

    def _user(self, headers: Any) -> str | None:
        value = headers.get("authorization", "")
        scheme, _, token = value.partition(" ")
        return self.tokens.get(token.strip()) if scheme.lower() == "bearer" else None

    def _authorize(self, user: str, verb: str, target: Target) -> None:
        policy = self.policies.get(user)
        if policy is not None and not policy.allows(verb, target.res.group, target.resource, target.namespace,
                                                    target.name):
            raise ApiError.forbidden(user, verb, target.resource, target.res.group, target.namespace, target.name)
        with self._lock:
            self.authorized.add((user, target.res.group, target.resource, verb))

    def _fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.matches(method, path):
                    fault.hits += 1
                    return fault
        return None

    def _record(self, log: list[Seen], seen: Seen) -> None:
        with self._lock:
            log.append(seen)

    @staticmethod
    def _error(exc: ApiError) -> Response:
        return JSONResponse(exc.status(), status_code=exc.code, headers=exc.headers())

    # -- HTTP -------------------------------------------------------------------------------

    async def http(self, request: Request) -> Response:
        method, path = request.method, request.url.path
        # Taken now: a slow request that outlives a reset must not land in the next test's logs.
        log, crashes = self.seen, self.crashes
        user = self._user(request.headers)
        if user is None:
            return self._error(ApiError(401, "Unauthorized", "Unauthorized"))
        target = _parse(path)
        verb = _verb(method, target, request.query_params) if target else method.lower()
        dry_run = "All" in request.query_params.getlist("dryRun")
        content_type = request.headers.get("content-type", "")
        code = 500
        try:
            fault = self._fault(method, path)
            if fault is not None:
                if fault.delay:
                    await asyncio.sleep(fault.delay)
                if fault.before is not None:
                    fault.before()
                if fault.status is not None and not fault.after:
                    raise fault.error()
            if target is not None:
                self._authorize(user, verb, target)
            raw = await request.body()
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                raise ApiError.bad_request("the request body is not valid JSON") from None
            if target is None:
                code, payload, kind = self._nonresource(path)
            else:
                code, payload, kind = self._resource(method, target, request.query_params, body, content_type,
                                                     request.headers.get("accept", ""), dry_run)
            if fault is not None and fault.status is not None and fault.after:
                raise fault.error()
        except ApiError as exc:
            code = exc.code
            return self._error(exc)
        except ClientDisconnect:
            code = 499  # the client gave up (its timeout) before the answer: nobody to answer
            return Response(status_code=code)
        except Exception:  # noqa: BLE001 - a bug in this server: answer 500 and keep it for the test to see
            crashes.append(traceback.format_exc())
            return self._error(ApiError(500, "InternalError", "the test API server crashed; see its crashes"))
        finally:
            self._record(log, Seen(user, method, path, verb, target.res.group if target else "",
                              target.resource if target else path, target.namespace if target else None,
                              target.name if target else None, code, dry_run, content_type))
        if kind == "text":
            return Response(payload, status_code=code, media_type="text/plain")
        return JSONResponse(payload, status_code=code)

    def _nonresource(self, path: str) -> tuple[int, Any, str]:
        path = path.rstrip("/")
        if path == "/version":
            return 200, resources.VERSION, "json"
        if path == "/api":
            return 200, resources.api_versions(self.host), "json"
        if path == "/apis":
            return 200, resources.api_group_list(), "json"
        if path in ("/healthz", "/readyz", "/livez"):
            return 200, "ok", "text"
        parts = path.strip("/").split("/")
        found = None
        if parts[0] == "api" and len(parts) == 2:
            found = resources.resource_list("", parts[1])
        elif parts[0] == "apis" and len(parts) == 2:
            found = resources.api_group(parts[1])
        elif parts[0] == "apis" and len(parts) == 3:
            found = resources.resource_list(parts[1], parts[2])
        if found is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return 200, found, "json"

    def _resource(self, method: str, t: Target, query: Any, body: Any, content_type: str, accept: str,
                  dry_run: bool) -> tuple[int, Any, str]:
        store, res = self.store, t.res
        if t.res.namespaced and t.namespace is None and t.name is not None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if t.sub is not None:
            return self._subresource(method, t, query, body, content_type, dry_run)
        as_table = "as=Table" in accept
        if t.name is None:
            if method == "GET":
                if query.get("watch") in ("true", "1"):
                    raise ApiError(405, "MethodNotAllowed", "watch is not supported by the test API server")
                limit = int(query["limit"]) if query.get("limit") else None
                items, revision, token = store.list(res, t.namespace, labels=query.get("labelSelector"),
                                                    fields=query.get("fieldSelector"), limit=limit,
                                                    continue_=query.get("continue"))
                if as_table:
                    return 200, tables.table(res.kind, items, revision, query.get("includeObject", "Metadata")), "json"
                meta = {"resourceVersion": revision} | ({"continue": token} if token else {})
                return 200, {"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta,
                             "items": items}, "json"
            if method == "POST":
                if not isinstance(body, dict):
                    raise ApiError.bad_request("the body of a create must be an object")
                _validate(res, body)
                return 201, store.create(res, t.namespace, body, dry_run=dry_run), "json"
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on a collection here")
        if method == "GET":
            obj = store.get(res, t.namespace, t.name)
            if as_table:
                return 200, tables.table(res.kind, [obj], obj["metadata"]["resourceVersion"],
                                         query.get("includeObject", "Metadata")), "json"
            return 200, obj, "json"
        if method == "PUT":
            if not isinstance(body, dict):
                raise ApiError.bad_request("the body of an update must be an object")
            _validate(res, body)
            return 200, store.update(res, t.namespace, t.name, body, dry_run=dry_run), "json"
        if method == "PATCH":
            with store.lock:
                current = store.get(res, t.namespace, t.name)
                patched = patches.apply_patch(content_type, current, body)
                _validate(res, patched)
                return 200, store.update(res, t.namespace, t.name, patched, dry_run=dry_run), "json"
        if method == "DELETE":
            options = body if isinstance(body, dict) else {}
            dry_run = dry_run or "All" in (options.get("dryRun") or [])
            gone = store.delete(res, t.namespace, t.name, preconditions=options.get("preconditions"), dry_run=dry_run)
            if res.kind == "Pod":
                if not dry_run:
                    self.kubelet.forget(t.namespace or "", t.name)
                return 200, gone, "json"
            return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                         "details": {"name": t.name, "group": res.group, "kind": res.plural,
                                     "uid": gone["metadata"]["uid"]}}, "json"
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported")

    def _subresource(self, method: str, t: Target, query: Any, body: Any, content_type: str,
                     dry_run: bool) -> tuple[int, Any, str]:
        store, res = self.store, t.res
        if t.sub not in res.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if t.sub == "status" and method == "GET":
            return 200, store.get(res, t.namespace, t.name), "json"
        if t.sub == "log" and method == "GET":
            pod = store.get(res, t.namespace, t.name)
            return 200, self.kubelet.read_log(pod, query.get("container"), **_log_options(t.name or "", query)), "text"
        if t.sub == "eviction" and method == "POST":
            return self._evict(t, body if isinstance(body, dict) else {}, dry_run)
        if t.sub == "exec":
            raise ApiError.bad_request("Upgrade request required")
        if t.sub == "scale" and method in ("GET", "PUT", "PATCH"):
            with store.lock:
                current = store.get(res, t.namespace, t.name)
                if method == "GET":
                    return 200, _scale(current), "json"
                wanted = body if method == "PUT" else patches.apply_patch(content_type, _scale(current), body)
                if not isinstance(wanted, dict):
                    raise ApiError.bad_request("the body of a scale update must be an object")
                sent = (wanted.get("metadata") or {}).get("resourceVersion")
                if sent and sent != current["metadata"]["resourceVersion"]:
                    raise ApiError.conflict(res.group_resource, t.name or "", "the object has been modified; please "
                                            "apply your changes to the latest version and try again")
                replicas = (wanted.get("spec") or {}).get("replicas", 0)
                current["spec"]["replicas"] = replicas
                _validate(res, current)
                current["metadata"].pop("resourceVersion", None)
                return 200, _scale(store.update(res, t.namespace, t.name or "", current, dry_run=dry_run)), "json"
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {t.resource}")

    def _evict(self, t: Target, body: dict, dry_run: bool) -> tuple[int, Any, str]:
        store = self.store
        options = body.get("deleteOptions") or {}
        dry_run = dry_run or "All" in (options.get("dryRun") or [])
        with store.lock:
            pod = store.get(PODS, t.namespace, t.name or "")
            labels = pod["metadata"].get("labels") or {}
            for pdb in store.list(_PDBS, t.namespace)[0]:
                spec = pdb.get("spec") or {}
                selector = (spec.get("selector") or {}).get("matchLabels") or {}
                if not selector or any(labels.get(k) != v for k, v in selector.items()):
                    continue
                covered = [p for p in store.list(PODS, t.namespace)[0]
                           if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())]
                healthy = sum(1 for p in covered if is_ready(p))
                if "minAvailable" in spec:
                    allowed, needs = healthy - int(spec["minAvailable"]), int(spec["minAvailable"])
                else:
                    allowed = int(spec.get("maxUnavailable", 0)) - (len(covered) - healthy)
                    needs = len(covered) - int(spec.get("maxUnavailable", 0))
                if is_ready(pod) and allowed < 1:
                    raise ApiError(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption "
                                                           "budget.",
                                   details={"causes": [{"reason": "DisruptionBudget", "message":
                                            f"The disruption budget {pdb['metadata']['name']} needs {needs} healthy "
                                            f"pods and has {healthy} currently"}]})
            store.delete(PODS, t.namespace, t.name or "", preconditions=options.get("preconditions"), dry_run=dry_run)
        if not dry_run:
            self.kubelet.forget(t.namespace or "", t.name or "")
        return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, "json"

    # -- exec over WebSocket ----------------------------------------------------------------

    async def exec_socket(self, ws: WebSocket) -> None:
        namespace, name = ws.path_params["namespace"], ws.path_params["name"]
        query = ws.query_params
        argv = tuple(query.getlist("command"))
        user = self._user(ws.headers)
        log, crashes = self.seen, self.crashes
        target = Target(PODS, namespace, name, "exec")
        code = 101
        try:
            if user is None:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            fault = self._fault("GET", ws.url.path)
            if fault is not None:
                if fault.delay:
                    await asyncio.sleep(fault.delay)
                if fault.status is not None:
                    raise fault.error()
            # WebSocket upgrades are GETs; Kubernetes 1.35 also checks `create`, so both are needed.
            self._authorize(user, "get", target)
            self._authorize(user, "create", target)
            pod = self.store.get(PODS, namespace, name)
            containers = [c["name"] for c in pod["spec"].get("containers", [])]
            container = query.get("container") or (containers[0] if len(containers) == 1 else None)
            if container is None:
                raise ApiError.bad_request(f"a container name must be specified for pod {name}, choose one of: "
                                           f"[{' '.join(containers)}]")
            if container not in containers:
                raise ApiError.bad_request(f"container {container} is not valid for pod {name}")
            if not argv:
                raise ApiError.bad_request("you must specify at least 1 command")
            phase = pod.get("status", {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                raise ApiError.bad_request(f"cannot exec into a container in a completed pod; current phase is {phase}")
            if phase == "Pending":  # scheduled or not, no container of it runs yet: the kubelet has none to attach to
                raise ApiError.bad_request(f'unable to upgrade connection: container not found ("{container}")')
            offered = ws.scope.get("subprotocols") or []
            protocol = next((p for p in offered if p in CHANNEL_PROTOCOLS), None)
            if protocol is None:
                raise ApiError.bad_request(f"unable to upgrade connection: none of the offered subprotocols {offered} "
                                           f"is supported ({', '.join(CHANNEL_PROTOCOLS)})")
        except ApiError as exc:
            code = exc.code
            await ws.send_denial_response(self._error(exc))
            return
        finally:
            self._record(log, Seen(user or "", "GET", ws.url.path, "create", "", "pods/exec", namespace, name, code))
        await ws.accept(subprotocol=protocol)
        try:
            await self._run(ws, self.kubelet.answer(pod, container, argv))
        except Exception:  # noqa: BLE001 - a bug in this server (or a test's exec handler)
            crashes.append(traceback.format_exc())
            await ws.close(code=1011)

    async def _run(self, ws: WebSocket, answer: ExecAnswer) -> None:
        gone = asyncio.Event()

        async def read() -> None:  # stdin, resize and v5 CLOSE frames are accepted and ignored
            try:
                while True:
                    message = await ws.receive()
                    if message["type"] == "websocket.disconnect":
                        break
            except (WebSocketDisconnect, RuntimeError):
                pass
            gone.set()

        reader = asyncio.create_task(read())
        try:
            if answer.error is None:
                for channel, text in ((1, answer.stdout), (2, answer.stderr)):
                    data = text.encode()
                    size = answer.chunk or max(len(data), 1)
                    for start in range(0, len(data), size):
                        await ws.send_bytes(bytes([channel]) + data[start:start + size])
            if answer.drop:
                await ws.close(code=1011)
                return
            if answer.hang or answer.delay:
                try:
                    await asyncio.wait_for(gone.wait(), timeout=60.0 if answer.hang else answer.delay)
                    return  # the client left first
                except asyncio.TimeoutError:
                    if answer.hang:
                        await ws.close(code=1011)
                        return
            await ws.send_bytes(b"\x03" + json.dumps(self._exit_status(answer)).encode())
            await ws.close(code=1000)
        except (WebSocketDisconnect, RuntimeError):
            pass  # the client went away mid-answer, as clients do
        finally:
            reader.cancel()

    @staticmethod
    def _exit_status(answer: ExecAnswer) -> dict:
        if answer.error is not None:
            return {"metadata": {}, "status": "Failure", "message": f"Internal error occurred: {answer.error}",
                    "reason": "InternalError", "details": {"causes": [{"message": answer.error}]}, "code": 500}
        if answer.exit_code == 0:
            return {"metadata": {}, "status": "Success"}
        return {"metadata": {}, "status": "Failure",
                "message": f"command terminated with non-zero exit code: error executing command [{answer.exit_code}]",
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": str(answer.exit_code)}]}}
