"""How the report words a journal value: plain text, never a Python repr.

`inline` turns the dicts and lists of an event into `replicas 3` and `[vllm-server-0, vllm-server-1]`.
"""

from __future__ import annotations

from typing import Any


def inline(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {inline(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "[" + ", ".join(inline(v) for v in value) + "]"
    return str(value)
