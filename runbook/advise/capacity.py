"""How long a sequence the GPU can hold: the SOP's --max-model-len "safe water line", GQA-aware.
Integer arithmetic a person can redo by hand; `safe_max_model_len` is what a flag floor could use."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

from runbook.advise.tables import Gpu, ModelShape

SOP_UTILIZATION = Fraction(82, 100)  # SOP §5: --gpu-memory-utilization 0.82
SOP_MARGIN = Fraction(9, 10)  # SOP §5: "take 90% of that"


@dataclasses.dataclass(frozen=True)
class Capacity:
    gpu_bytes: int  # one GPU's memory
    utilization: Fraction
    weight_bytes_per_gpu: int
    kv_bytes_per_token_per_gpu: int
    ceiling: int  # tokens of KV cache left after the weights: one sequence longer than this cannot fit
    safe: int  # the SOP's 90% of the ceiling, never above max_position_embeddings

    def steps(self, model: ModelShape, tp: int, weight_bytes: Fraction, kv_dtype_bytes: int) -> list[str]:
        """The arithmetic, line by line, for the finding and the person checking it."""
        kv_heads = math.ceil(model.kv_heads / tp)
        budget = math.floor(self.gpu_bytes * self.utilization)
        return [
            f"GPU memory {self.gpu_bytes} B x {float(self.utilization):g} = {budget} B",
            f"weights {model.params} params x {float(weight_bytes):g} B / TP {tp} = {self.weight_bytes_per_gpu} B per GPU",
            f"KV per token = 2 x {model.layers} layers x {kv_heads} KV heads per GPU x {model.head_dim} head dim x "
            f"{kv_dtype_bytes} B = {self.kv_bytes_per_token_per_gpu} B",
            f"({budget} - {self.weight_bytes_per_gpu}) / {self.kv_bytes_per_token_per_gpu} = {self.ceiling} tokens",
            f"90% of {self.ceiling} = {math.floor(self.ceiling * SOP_MARGIN)}"
            + (f", capped at max_position_embeddings {model.max_position_embeddings}"
               if self.safe == model.max_position_embeddings else ""),
        ]


def capacity(model: ModelShape, gpu: Gpu, *, weight_bytes: Fraction, kv_dtype_bytes: int, tp: int = 1,
             utilization: Fraction = SOP_UTILIZATION) -> Capacity:
    """KV cache room on one GPU of `tp`: memory x utilization, less this GPU's share of the weights.

    KV heads are split across tensor-parallel ranks (replicated when there are fewer heads than ranks).
    """
    if tp < 1:
        raise ValueError("tensor parallel size must be at least 1")
    weights = math.ceil(model.params * weight_bytes / tp)
    per_token = 2 * model.layers * math.ceil(model.kv_heads / tp) * model.head_dim * kv_dtype_bytes
    budget = math.floor(gpu.memory_bytes * utilization)
    ceiling = max(0, (budget - weights) // per_token)
    safe = min(math.floor(ceiling * SOP_MARGIN), model.max_position_embeddings)
    return Capacity(gpu.memory_bytes, utilization, weights, per_token, ceiling, safe)


def safe_max_model_len(model: ModelShape, gpu: Gpu, *, tp: int = 1, weight_bytes: Fraction = Fraction(2),
                       kv_dtype_bytes: int = 2) -> int:
    """The SOP's --max-model-len for this model on this GPU (bf16/fp16 weights and KV unless told)."""
    return capacity(model, gpu, weight_bytes=weight_bytes, kv_dtype_bytes=kv_dtype_bytes, tp=tp).safe


def safe_max_model_len_for(model: str, gpu: str, *, tp: int = 1) -> int | None:
    """The same by name (a bundled model, a GPU of the table); None when either is not known.

    For a caller such as `k8s.set_arg`'s --max-model-len floor, which has the names and no tables.
    """
    from runbook.advise.tables import bundled_model, gpu_by_name
    from runbook.errors import InvalidInput

    shape = bundled_model(model)
    try:
        found = gpu_by_name(gpu)
    except InvalidInput:
        return None
    return None if shape is None else safe_max_model_len(shape, found, tp=tp)
