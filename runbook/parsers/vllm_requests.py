"""Prompt lengths from vLLM's own log lines: request logs and its context-length refusals.

vLLM's request logger writes `Received request ID: prompt: ..., params: ..., prompt_token_ids: [...]`
(the ids cut at `--max-log-len`: a count is then a lower bound); its OpenAI server refuses a prompt
too long with "This model's maximum context length is N tokens. However, you requested M tokens"
(newer versions: "... and your request has M input tokens").
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

MAX_LINE_CHARS = 1_048_576  # a request line carries the whole prompt and its ids: read up to 1 MiB of it
_RECEIVED = re.compile(r"Received request ([A-Za-z0-9_.:-]{1,200}): ")
_IDS = "prompt_token_ids: ["
_LIMIT = re.compile(r"maximum context length is (\d{1,9}) tokens")
_REQUESTED = re.compile(r"(?:you requested|your request has|resulted in) (\d{1,9}) (?:input )?tokens")


@dataclasses.dataclass(frozen=True)
class PromptSeen:
    pod: str
    request: str | None  # the request id, when the line names one
    prompt_tokens: int
    rejected: bool  # vLLM refused it: longer than the context
    limit: int | None = None  # the context length the refusal named
    lower_bound: bool = False  # the ids were cut in the log: at least this many


def prompts_in(lines: Iterable[tuple[str, str]]) -> list[PromptSeen]:
    """Every prompt length found in (pod, line) pairs; lines of other kinds are passed over."""
    out = []
    for pod, line in lines:
        line = line[:MAX_LINE_CHARS]
        received = _RECEIVED.search(line)
        start = line.rfind(_IDS)
        if received and start > received.end():
            body = line[start + len(_IDS):]
            end = body.find("]")
            ids = body[:end] if end >= 0 else body
            if ids.replace(",", "").replace(" ", "").isdigit():
                out.append(PromptSeen(pod, received.group(1), ids.count(",") + 1, False,
                                      lower_bound=end < 0 or body[end + 1:end + 4] == "..."))
            continue
        limit = _LIMIT.search(line)
        if limit:
            requested = _REQUESTED.search(line)
            if requested:
                out.append(PromptSeen(pod, None, int(requested.group(1)), True, limit=int(limit.group(1))))
    return out
