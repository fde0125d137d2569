"""`http.probe`: does an endpoint answer in time with the expected status?

Probes a URL, or each pod of a selector or workload on a port and path (the SOP's `/health`).
"""

from __future__ import annotations

import ipaddress
import re

import pydantic

from runbook.actions.k8s_pods import PodsParams, select_pods
from runbook.actions.base import ActionResult, StepContext
from runbook.actions.fanout import fan_out
from runbook.model.registry import Kind, action

_PATH = re.compile(r"^/[A-Za-z0-9._~/-]*$")


class ProbeParams(PodsParams):
    url: pydantic.HttpUrl | None = None
    port: int = pydantic.Field(8000, ge=1, le=65535)
    path: str = "/health"
    timeout: float = pydantic.Field(5.0, gt=0, le=300)
    expect_status: int = pydantic.Field(200, ge=100, le=599)

    @pydantic.field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not _PATH.fullmatch(value):
            raise ValueError(f"path {value!r} must start with / and hold only URL path characters")
        return value

    @pydantic.model_validator(mode="after")
    def _target(self) -> "ProbeParams":
        if (self.url is None) == (not self.has_pods()):
            raise ValueError("give either `url`, or pods (`selector`, `workload` or `names`)")
        return self


@action("http.probe", kind=Kind.DIAGNOSTIC, params=ProbeParams)
def probe(ctx: StepContext, p: ProbeParams) -> ActionResult:
    """GET a URL, or `http://<pod ip>:<port><path>` for each selected pod, with a timeout.

    Result: `healthy` and `unhealthy` (pod names, or the URL), and each answer's status and time.
    """
    targets: list[tuple[str, str]] = []
    if p.url is not None:
        targets.append((str(p.url), str(p.url)))
    else:
        for pod in select_pods(ctx, p):
            try:
                address = ipaddress.ip_address(pod.ip)
            except ValueError:
                targets.append((pod.name, ""))
                continue
            host = f"[{address}]" if address.version == 6 else str(address)
            targets.append((pod.name, f"http://{host}:{p.port}{p.path}"))
    answers: dict[str, dict] = {}
    reachable = [(name, url) for name, url in targets if url]
    for name, url in targets:
        if not url:
            answers[name] = {"url": None, "ok": False, "error": "the pod has no IP address"}
    results = fan_out(reachable, lambda target: ctx.http.get(target[1], timeout=p.timeout), pool_size=ctx.pool_size,
                      deadline=max(ctx.timeout, p.timeout + 5), describe=lambda target: target[1])
    for done in results:
        name, url = done.target
        if done.result is None:
            answers[name] = {"url": url, "ok": False, "error": str(done.error)}
            continue
        response = done.result
        answers[name] = {"url": url, "ok": response.status == p.expect_status, "status": response.status,
                         "seconds": round(response.elapsed_seconds, 3)}
    answers = {name: answers[name] for name, _ in targets}  # the targets' order, whatever finished first
    healthy = [n for n, a in answers.items() if a["ok"]]
    unhealthy = [n for n, a in answers.items() if not a["ok"]]
    ctx.evidence("probe", f"GET {p.path if p.url is None else p.url} (timeout {p.timeout:g}s)", answers=answers)
    return ActionResult.ok(f"{len(healthy)} answered {p.expect_status} in time, {len(unhealthy)} did not"
                           + (f": {', '.join(unhealthy)}" if unhealthy else ""),
                           healthy=healthy, unhealthy=unhealthy, answers=answers)
