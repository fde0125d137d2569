"""`k8s.logs` and `k8s.prompt_lengths`: evidence from the pods' logs, current and previous containers.

Log lines are untrusted: they are matched with checked, bounded patterns, counted per pod and per
minute (the kubelet's timestamps), and only redacted, capped excerpts are journaled.
"""

from __future__ import annotations

import math
from typing import Literal

import pydantic

from runbook.record import redaction
from runbook.actions import base, fields
from runbook.actions.base import ActionResult, StepContext
from runbook.actions.k8s_pods import PodsParams, workload_selector
from runbook.backends.base import PodLog
from runbook.model.duration import Duration, format_duration
from runbook.parsers import log_matches, vllm_requests
from runbook.model.registry import Kind, action

MAX_EXCERPT_LINES = 20
MAX_EXCERPT_CHARS = 300  # per journaled line


def _pattern(value: str) -> str:
    return log_matches.check_pattern(value)


LogPattern = fields.Pattern  # the checked regex of the fields module, then bounded below


class LogsParams(PodsParams):
    since: Duration = pydantic.Field(300.0, gt=0, le=7 * 86400)
    pattern: LogPattern | None = None  # one pattern (kept for the playbooks written with it)
    patterns: list[LogPattern] = pydantic.Field(default_factory=list, max_length=log_matches.MAX_PATTERNS)
    container: fields.K8sName | None = None
    read: Literal["current", "previous", "both"] = "current"  # which containers' logs: the running one, the one before its last restart
    tail_lines: int | None = pydantic.Field(None, ge=1, le=100_000)
    limit_bytes: int = pydantic.Field(1_048_576, ge=1024, le=64 * 1_048_576)
    above: float | None = pydantic.Field(None, ge=0)  # matches per pod and minute: above it, `above` is true

    @pydantic.field_validator("pattern")
    @classmethod
    def _bounded(cls, value: str | None) -> str | None:
        return None if value is None else _pattern(value)

    @pydantic.field_validator("patterns")
    @classmethod
    def _all_bounded(cls, value: list[str]) -> list[str]:
        return [_pattern(v) for v in value]

    def all_patterns(self) -> list[str]:
        return ([self.pattern] if self.pattern else []) + list(self.patterns)


def _selector(ctx: StepContext, p: PodsParams, namespace: str) -> dict[str, str]:
    if p.selector is not None:
        return base.parse_selector(p.selector)
    if p.workload is None:
        raise ValueError("give `selector` or `workload`: the pods whose logs to read")
    return workload_selector(ctx, namespace, p.workload)


def read_logs(ctx: StepContext, p: LogsParams, namespace: str) -> tuple[dict[str, str], list[tuple[str, PodLog]]]:
    """The selector and each pod's logs as (label, log): `pod` for the running container, `pod (previous)`."""
    selector = _selector(ctx, p, namespace)
    wanted = set(p.names or ())
    found: list[tuple[str, PodLog]] = []
    # `both` reads the previous and the running containers' logs of one listing of the pods.
    for log in ctx.cluster.logs(namespace, selector, since_seconds=max(1, int(p.since)), tail_lines=p.tail_lines,
                                limit_bytes=p.limit_bytes, container=p.container, previous=p.read == "previous",
                                timestamps=True, with_previous=p.read == "both"):
        if wanted and log.pod not in wanted:
            continue
        found.append((log.pod, log))
    return selector, found


def _excerpt(pod: str, line: str) -> str:
    return f"{pod}: {redaction.redact_text(line[:MAX_EXCERPT_CHARS])}"


@action("k8s.logs", kind=Kind.DIAGNOSTIC, params=LogsParams)
def logs(ctx: StepContext, p: LogsParams) -> ActionResult:
    """Read the selected pods' logs since a duration ago and count the lines matching `pattern(s)`.

    `read: previous` (or `both`) reads the container before its last restart too, where an OOM
    crash left its last words. Counted per pod and per minute; with `above`, `above` says whether
    one pod logged more than that many matches in one minute (`firing`: which pods).
    Result: `count`, `by_pod`, `by_minute`, `by_pod_minute`, `peak_per_min`, `by_pattern`, `excerpt`.
    """
    namespace = ctx.namespace(p.namespace)
    selector, found = read_logs(ctx, p, namespace)
    patterns = p.all_patterns()
    counts = log_matches.count_matches(((pod, log.text) for pod, log in found), patterns, keep=MAX_EXCERPT_LINES)
    truncated = sorted({pod for pod, log in found if log.truncated})
    no_previous = sorted({pod for pod, log in found if log.absent})
    firing = sorted(pod for pod, minutes in counts.by_pod_minute.items()
                    if p.above is not None and any(n > p.above for n in minutes.values()))
    excerpt = [_excerpt(pod, line) for pod, line in counts.first]
    what = ("lines matching " + " or ".join(f"/{x}/" for x in patterns)) if patterns else "lines"
    which = {"current": "", "previous": " of the previous containers", "both": " of the current and previous containers"}[p.read]
    result = dict(count=counts.total, by_pod=counts.by_pod, by_minute=counts.by_minute,
                  by_pod_minute=counts.by_pod_minute, peak_per_min=counts.peak_per_min,
                  peak_total_per_min=counts.peak_total_per_min, by_pattern=counts.by_pattern,
                  untimed=counts.untimed, excerpt=excerpt, truncated=truncated, no_previous=no_previous,
                  pods=len({pod for pod, _ in found}))
    if p.above is not None:
        result.update(above=bool(firing), firing=firing, threshold=p.above)
    # Titled apart from the summary (which counts the same lines): the report shows each once.
    ctx.evidence("logs", f"log lines per pod and minute, {what}{which} in the last {format_duration(p.since)}",
                 selector=selector, **result)
    summary = f"{counts.total} {what}{which} in the last {format_duration(p.since)} across {result['pods']} pods"
    if counts.by_pod_minute:
        summary += f", at most {counts.peak_per_min} per pod and minute"
    if p.above is not None:
        summary += (f"; above {p.above:g}/min in {', '.join(firing)}" if firing else f"; none above {p.above:g}/min")
    if truncated:
        summary += f" (capped at {p.limit_bytes} bytes for {', '.join(truncated)})"
    return ActionResult.ok(summary, **result)


class PromptLengthsParams(LogsParams):
    max_model_len: int = pydantic.Field(gt=0, le=10_000_000)  # the running --max-model-len (k8s.workload reads it)
    ceiling: int = pydantic.Field(gt=0, le=10_000_000)  # what the GPU can hold: a raise never goes past it
    near: float = pydantic.Field(0.9, gt=0, le=1)  # a prompt of at least this share of the limit is close to it
    headroom: float = pydantic.Field(1.1, ge=1, le=4)  # the proposal leaves this much room over the longest prompt
    round_to: int = pydantic.Field(1024, ge=1, le=65536)


@action("k8s.prompt_lengths", kind=Kind.DIAGNOSTIC, params=PromptLengthsParams)
def prompt_lengths(ctx: StepContext, p: PromptLengthsParams) -> ActionResult:
    """Prompt lengths from vLLM's request logs and its "maximum context length" refusals, against
    `--max-model-len`; proposes a raise (the longest prompt × `headroom`, rounded up) never above `ceiling`.

    Result: `prompts`, `longest`, `near_limit`, `rejected`, `per_pod`, `proposed` (None: nothing to raise)
    and `capped`. Only lengths are journaled, never a prompt's text.
    """
    namespace = ctx.namespace(p.namespace)
    selector, found = read_logs(ctx, p, namespace)
    lines = ((pod, line.text) for pod, log in found
             for line in log_matches.split_lines(log.text, vllm_requests.MAX_LINE_CHARS))
    seen = vllm_requests.prompts_in(lines)
    near_at = math.ceil(p.near * p.max_model_len)
    near = [s for s in seen if not s.rejected and s.prompt_tokens >= near_at]
    rejected = [s for s in seen if s.rejected]
    longest = max((s.prompt_tokens for s in seen), default=0)
    by_pod: dict[str, dict[str, int]] = {}
    for s in seen:
        row = by_pod.setdefault(s.pod, {"prompts": 0, "near_limit": 0, "rejected": 0, "longest": 0})
        row["prompts"] += 1
        row["near_limit"] += int(s in near)
        row["rejected"] += int(s.rejected)
        row["longest"] = max(row["longest"], s.prompt_tokens)
    proposed, capped = None, False
    if near or rejected:
        wanted = math.ceil(longest * p.headroom / p.round_to) * p.round_to
        proposed = min(wanted, p.ceiling)
        capped = wanted > p.ceiling
        if proposed <= p.max_model_len:
            proposed = None  # the GPU holds no more than what runs now: nothing to propose
    limits = sorted({s.limit for s in rejected if s.limit is not None})
    # Lengths only: the prompts' text is the users' data and stays out of the journal.
    excerpt = [f"{s.pod}: " + (f"refused, {s.prompt_tokens} tokens requested (context {s.limit})" if s.rejected
                               else f"request {s.request}: {s.prompt_tokens} prompt tokens") for s in (near + rejected)[:MAX_EXCERPT_LINES]]
    result = dict(count=len(near) + len(rejected), excerpt=excerpt, max_model_len=p.max_model_len, ceiling=p.ceiling, prompts=len(seen), longest=longest,
                  near_limit=len(near), near_at=near_at, rejected=len(rejected), limits_named=limits,
                  lower_bounds=sum(1 for s in seen if s.lower_bound), per_pod=dict(sorted(by_pod.items())),
                  by_pod={pod: row["near_limit"] + row["rejected"] for pod, row in sorted(by_pod.items())},
                  proposed=proposed, capped=capped, pods=len({pod for pod, _ in found}))
    ctx.evidence("logs", f"prompt lengths against --max-model-len={p.max_model_len} in the last "
                 f"{format_duration(p.since)}", selector=selector, **result)
    summary = (f"{len(seen)} prompts in the logs, the longest {longest} tokens; {len(near)} at ≥{p.near:.0%} of "
               f"--max-model-len={p.max_model_len}, {len(rejected)} refused as too long")
    if proposed is not None:
        summary += f"; proposed --max-model-len={proposed}" + (f" (the ceiling the GPU holds, {p.ceiling})" if capped else "")
    elif near or rejected:
        summary += f"; no raise: the GPU holds at most {p.ceiling}"
    return ActionResult.ok(summary, **result)
