"""`vllm.kv_memory`: vLLM's KV blocks and memory budget per pod against what nvidia-smi says it uses.

Pure: it reads two earlier steps' results (cache_config_info by pod, nvidia-smi in the pods) and names
the pods holding memory outside vLLM's KV pool (restart them) or says the water line is too high.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pydantic

from runbook.actions import base
from runbook.actions.base import ActionResult, StepContext
from runbook.model.registry import ActionParams, Kind, action

MAX_BLOCKS = 100_000_000  # far above any GPU's KV blocks: a label past it is not a block count
MAX_BLOCK_SIZE = 4096
MAX_MIB = 10_000_000  # 10 TB of one GPU's memory: past it, not a reading
MAX_PODS = 1024


class KvMemoryParams(ActionParams):
    # The result of `prom.query` of kv_gpu_blocks by pod, num_gpu_blocks, block_size, gpu_memory_utilization.
    blocks: dict[str, Any]
    # The result of `k8s.exec` of `nvidia-smi -q -d MEMORY` with parse: nvidia-smi-memory, in every pod.
    memory: dict[str, Any]
    # Used memory past the budget by more than this share of the GPU's total: held outside the KV pool.
    tolerance: float = pydantic.Field(0.03, gt=0, le=0.5)
    # KV tokens below this share of the pod with the most: it started while memory was held.
    short_blocks_below: float = pydantic.Field(0.9, gt=0, le=1)


class _Unreadable(ValueError):
    pass


def _number(raw: Any, what: str, *, low: float, high: float, whole: bool = False) -> float:
    """A label or reading as a bounded number (labels are text from a metrics endpoint)."""
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)) or (isinstance(raw, str) and len(raw) > 32):
        raise _Unreadable(f"{what} {str(raw)[:40]!r} is not a number")
    try:
        value = float(raw)
    except ValueError:
        raise _Unreadable(f"{what} {raw!r} is not a number") from None
    if not math.isfinite(value) or not low <= value <= high or (whole and value != int(value)):
        kind = "a whole number" if whole else "a number"
        raise _Unreadable(f"{what} {raw!r} is not {kind} in [{low:g}, {high:g}]")
    return value


def _pod_name(raw: Any) -> str | None:
    try:
        return base.check_name(raw, "pod")
    except ValueError:
        return None


def _read_blocks(blocks: Mapping[str, Any], unknown: dict[str, str],
                 ignored: list[str]) -> tuple[dict[str, dict], str | None]:
    """pod → {num_gpu_blocks, block_size, gpu_memory_utilization, kv_tokens}; and why none could be read."""
    samples = blocks.get("samples")
    if not isinstance(samples, list):
        return {}, "vllm:cache_config_info was not read (the KV blocks step has no samples)"
    if not samples:
        return {}, "no vllm:cache_config_info series: this vLLM does not export its cache config, or it is not scraped"
    found: dict[str, dict] = {}
    seen: dict[str, int] = {}
    for sample in samples[:MAX_PODS * 4]:
        labels = sample.get("labels") if isinstance(sample, Mapping) else None
        if not isinstance(labels, Mapping):
            continue
        pod = _pod_name(labels.get("pod"))
        if pod is None:  # a series of no pod we can name: never a name put in a later step
            ignored.append("a vllm:cache_config_info series")
            continue
        seen[pod] = seen.get(pod, 0) + 1
        try:
            count = _number(labels.get("num_gpu_blocks"), "num_gpu_blocks", low=1, high=MAX_BLOCKS, whole=True)
            size = _number(labels.get("block_size"), "block_size", low=1, high=MAX_BLOCK_SIZE, whole=True)
            share = _number(labels.get("gpu_memory_utilization"), "gpu_memory_utilization", low=0.01, high=1)
        except _Unreadable as exc:
            unknown[pod] = f"its vllm:cache_config_info cannot be read: {exc}"
            continue
        found[pod] = {"num_gpu_blocks": int(count), "block_size": int(size), "gpu_memory_utilization": share,
                      "kv_tokens": int(count) * int(size)}
    for pod, times in seen.items():
        if times > 1:  # two cache configs for one pod: which one runs is not known
            found.pop(pod, None)
            unknown[pod] = f"{times} vllm:cache_config_info series (several engines or configs): not compared"
    return found, None


def _read_memory(memory: Mapping[str, Any], unknown: dict[str, str],
                 ignored: list[str]) -> tuple[dict[str, list[dict]], str | None]:
    """pod → its GPUs [{total_mib, used_mib}]; and why none could be read."""
    answers, errors = memory.get("answers"), memory.get("errors")
    if not isinstance(answers, Mapping) and not isinstance(errors, Mapping):
        return {}, "nvidia-smi was not run in the pods (the GPU memory step has no answers)"
    for pod, why in (errors or {}).items() if isinstance(errors, Mapping) else ():
        name = _pod_name(pod)
        if name is not None:
            unknown[name] = f"no answer from nvidia-smi: {str(why)[:200]}"
        else:
            ignored.append("a pod with no answer from nvidia-smi")
    found: dict[str, list[dict]] = {}
    for pod, answer in list((answers or {}).items())[:MAX_PODS] if isinstance(answers, Mapping) else ():
        name = _pod_name(pod)
        if name is None:
            ignored.append("an nvidia-smi answer")
            continue
        if name in unknown:
            continue
        parsed = answer.get("parsed") if isinstance(answer, Mapping) else None
        gpus = parsed.get("gpus") if isinstance(parsed, Mapping) else None
        if not isinstance(gpus, list) or not gpus:
            unknown[name] = "nvidia-smi showed no GPU"
            continue
        try:
            found[name] = [{"total_mib": _number(g.get("total_mib"), "total memory", low=1, high=MAX_MIB),
                            "used_mib": _number(g.get("used_mib"), "used memory", low=0, high=MAX_MIB)}
                           for g in gpus[:64] if isinstance(g, Mapping)]
        except _Unreadable as exc:
            unknown[name] = f"nvidia-smi's memory cannot be read: {exc}"
            continue
        if not found[name]:
            found.pop(name)
            unknown[name] = "nvidia-smi showed no GPU"
    return found, None


def _compare(config: dict, gpus: list[dict], tolerance: float) -> dict:
    """One pod: vLLM's budget (its share × each GPU's total) against the memory used; the worst GPU counts."""
    worst: dict | None = None
    for gpu in gpus:
        budget = config["gpu_memory_utilization"] * gpu["total_mib"]
        excess = gpu["used_mib"] - budget
        row = {"total_mib": round(gpu["total_mib"]), "used_mib": round(gpu["used_mib"]), "budget_mib": round(budget),
               "excess_mib": round(excess), "excess_share": excess / gpu["total_mib"]}
        if worst is None or row["excess_share"] > worst["excess_share"]:
            worst = row
    assert worst is not None
    return {**config, **worst, "over_budget": worst["excess_share"] > tolerance}


def _mib(value: float) -> str:
    return f"{value:,.0f} MiB".replace(",", " ")


def _why(pod: str, row: dict, largest: int) -> str:
    parts = []
    if row.get("over_budget"):
        parts.append(f"uses {_mib(row['used_mib'])}, {_mib(row['excess_mib'])} ({row['excess_share']:.0%} of the GPU) "
                     f"over vLLM's budget of {_mib(row['budget_mib'])} ({row['gpu_memory_utilization']:g} × "
                     f"{_mib(row['total_mib'])})")
    if row.get("short_blocks"):
        parts.append(f"has {row['kv_tokens']} KV tokens ({row['num_gpu_blocks']} blocks × {row['block_size']}), "
                     f"{row['kv_tokens'] / largest:.0%} of its largest sibling's {largest}")
    return f"{pod} " + " and ".join(parts)


@action("vllm.kv_memory", kind=Kind.DIAGNOSTIC, params=KvMemoryParams)
def kv_memory(ctx: StepContext, p: KvMemoryParams) -> ActionResult:
    """Per pod: KV tokens (num_gpu_blocks × block_size), vLLM's budget (gpu_memory_utilization × the
    GPU's total) and the memory nvidia-smi says is used; the excess is memory outside the KV pool.

    Result: `restart` (worst first: pods over budget by more than `tolerance` of the GPU, or with far
    fewer KV blocks than their siblings), `water_line` (every pod over budget: lower --max-model-len
    instead), `unknown` (pod → why it was not compared: never read as healthy) and `pods`.
    """
    unknown: dict[str, str] = {}
    ignored: list[str] = []  # what names no pod (a label that is not a pod's name): said, never acted on
    configs, blocks_missing = _read_blocks(p.blocks, unknown, ignored)
    gpus, memory_missing = _read_memory(p.memory, unknown, ignored)
    for pod in sorted(set(gpus) - set(configs)):
        if pod not in unknown:
            unknown[pod] = "no vllm:cache_config_info for it: its budget is not known"
    for pod in sorted(set(configs) - set(gpus)):
        if pod not in unknown:
            unknown[pod] = "nvidia-smi did not run in it"
    rows = {pod: _compare(configs[pod], gpus[pod], p.tolerance) for pod in sorted(set(configs) & set(gpus))
            if pod not in unknown}
    # Blocks are compared among every pod whose cache config was read, nvidia-smi's answer or not.
    largest = max((c["kv_tokens"] for c in configs.values()), default=0)
    for pod, row in rows.items():
        row["short_blocks"] = len(configs) > 1 and row["kv_tokens"] < p.short_blocks_below * largest
    over = [pod for pod, row in rows.items() if row["over_budget"]]
    short = [pod for pod, row in rows.items() if row["short_blocks"]]
    water_line = bool(rows) and not unknown and not ignored and len(over) == len(rows)
    ranked = sorted({*over, *short}, key=lambda pod: (-max(rows[pod]["excess_share"], 0.0),
                                                      rows[pod]["kv_tokens"], pod))
    restart = [] if water_line else ranked
    shown = {pod: _why(pod, row, largest) + (": restart" if pod in restart else "") if pod in ranked else
             f"{pod} uses {_mib(row['used_mib'])} of vLLM's budget of {_mib(row['budget_mib'])}, "
             f"{row['kv_tokens']} KV tokens: within" for pod, row in rows.items()}
    ctx.evidence("text", "KV blocks and vLLM's memory budget against nvidia-smi, per pod", pods=shown,
                 not_compared=unknown, tolerance=p.tolerance, **({"left_out": ignored} if ignored else {}),
                 **({"missing": [m for m in (blocks_missing, memory_missing) if m]}
                    if blocks_missing or memory_missing else {}))

    if water_line:
        each = ", ".join(f"{pod} +{_mib(rows[pod]['excess_mib'])}" for pod in over)
        summary = (f"every pod is over vLLM's budget ({each}): the memory water line itself is too high; "
                   "lower --max-model-len 5%")
    elif restart:
        summary = ("; ".join(_why(pod, rows[pod], largest) for pod in restart)
                   + ": memory held outside vLLM's KV pool (fragmentation, a leak), a restart clears it; restart "
                   + ", ".join(restart) + (" one at a time, worst first" if len(restart) > 1 else ""))
        within = [pod for pod in rows if pod not in ranked]
        if within:
            summary += f"; within budget: {', '.join(within)}"
    elif rows:
        summary = (f"{', '.join(rows)}: within vLLM's budget (tolerance {p.tolerance:.0%} of the GPU), KV blocks alike; "
                   "not memory held outside the KV pool")
    else:
        summary = "nothing compared"
    missing = [m for m in (blocks_missing, memory_missing) if m]
    if missing:
        summary += "; " + "; ".join(missing)
    if unknown:
        summary += "; not compared: " + "; ".join(f"{pod} ({why})" for pod, why in sorted(unknown.items()))
    if ignored:
        summary += f"; left out {len(ignored)} reading(s) whose pod label is not a pod name ({ignored[0]}, …)"
    return ActionResult.ok(summary, pods=rows, restart=restart, over_budget=over, short_blocks=short,
                           water_line=water_line, unknown=unknown, compared=len(rows), left_out=len(ignored))
