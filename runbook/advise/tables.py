"""The bundled GPU and model tables (gpus.yaml, models.yaml) and a model's shape from its config.json.
What `advise` needs to size the KV cache: GPU memory, layers, KV heads, head dim, weights, context limit."""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
import json
import math
import os
import re
from collections.abc import Mapping
from typing import Any

from runbook.errors import InvalidInput

MIB = 2**20
GIB = 2**30
DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "fp8": 1, "float8": 1}


@dataclasses.dataclass(frozen=True)
class Gpu:
    name: str
    memory_bytes: int
    source: str  # how it was known: "--gpu A100-80", "nodeSelector cloud.google.com/gke-accelerator=…"


@dataclasses.dataclass(frozen=True)
class ModelShape:
    name: str
    layers: int
    kv_heads: int
    head_dim: int
    max_position_embeddings: int
    params: int  # parameter count
    dtype: str  # the weights' dtype as config.json names it
    source: str  # "bundled table" or the config.json path
    sliding_window: int | None = None

    def kv_bytes_per_token(self, kv_dtype_bytes: int) -> int:
        """GQA-aware: K and V for every layer, only the KV heads (not the article's hidden size)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * kv_dtype_bytes


def _bundled(name: str) -> Any:
    from runbook.files.yamlsource import load_yaml

    text = (importlib.resources.files("runbook.advise") / name).read_text(encoding="utf-8")
    loaded = load_yaml(text, file=f"runbook/advise/{name}", kind="table")
    if loaded.problems:  # a broken bundled file is a broken install, said plainly
        raise InvalidInput("; ".join(p.format(code=False) for p in loaded.problems))
    return loaded.data


@functools.cache
def gpu_table() -> tuple[dict[str, Any], ...]:
    return tuple(_bundled("gpus.yaml")["gpus"])


@functools.cache
def model_table() -> tuple[dict[str, Any], ...]:
    return tuple(_bundled("models.yaml")["models"])


def gpu_names() -> list[str]:
    return [g["name"] for g in gpu_table()]


def gpu_by_name(name: str) -> Gpu:
    """`--gpu A100-80` (any case; a node label's spelling such as nvidia-a100-80gb works too)."""
    wanted = name.strip().lower()
    for entry in gpu_table():
        if wanted == entry["name"].lower() or wanted in (label.lower() for label in entry["labels"]):
            return Gpu(entry["name"], entry["memory_mib"] * MIB, f"--gpu {name}")
    raise InvalidInput(f"--gpu {name}: not a GPU runbook knows; use one of {', '.join(gpu_names())}, "
                       "or give its memory with --gpu-memory-gib")


# The node labels that name a node's GPU model: GKE's, then NVIDIA GPU feature discovery's.
GPU_LABELS = ("cloud.google.com/gke-accelerator", "nvidia.com/gpu.product")


def gpu_from_labels(labels: Mapping[str, str], where: str) -> Gpu | None:
    """The GPU a nodeSelector (or a required node affinity) pins the pods to, or None."""
    for key in GPU_LABELS:
        value = labels.get(key)
        if not isinstance(value, str):
            continue
        for entry in gpu_table():
            if value.lower() in (label.lower() for label in entry["labels"]):
                return Gpu(entry["name"], entry["memory_mib"] * MIB, f"{where} {key}={value}")
        raise InvalidInput(f"{where} {key}={value}: not a GPU runbook knows ({', '.join(gpu_names())}); "
                           "give --gpu NAME or --gpu-memory-gib N")
    return None


_MIG_RESOURCE = re.compile(r"nvidia\.com/mig-([0-9]+)g\.([0-9]+)gb")


def gpu_from_mig(resources: Mapping[str, Any], where: str) -> Gpu | None:
    """A MIG slice the container asks for (`nvidia.com/mig-3g.40gb`): its nominal GB, a little under the real size."""
    for key in resources:
        found = _MIG_RESOURCE.fullmatch(str(key))
        if found:
            return Gpu(f"MIG {found[1]}g.{found[2]}gb", int(found[2]) * 10**9, f"{where} {key}")
    return None


def gpu_by_memory(gib: float) -> Gpu:
    if not math.isfinite(gib) or gib <= 0:
        raise InvalidInput(f"--gpu-memory-gib {gib}: give the memory of one GPU in GiB, greater than 0")
    return Gpu(f"{gib:g} GiB GPU", int(gib * GIB), f"--gpu-memory-gib {gib:g}")


def _shape(entry: Mapping[str, Any], source: str) -> ModelShape:
    return ModelShape(name=entry["id"], layers=int(entry["layers"]), kv_heads=int(entry["kv_heads"]),
                      head_dim=int(entry["head_dim"]), max_position_embeddings=int(entry["max_position_embeddings"]),
                      params=round(float(entry["params_billion"]) * 1e9), dtype=str(entry["dtype"]), source=source,
                      sliding_window=entry.get("sliding_window"))


def bundled_model(model: str) -> ModelShape | None:
    """A model by its Hugging Face id, or a local path ending in the id's last part (any case)."""
    wanted = model.rstrip("/").lower()
    tail = wanted.rsplit("/", 1)[-1]
    for entry in model_table():
        names = [entry["id"], *(entry.get("aliases") or [])]
        if any(wanted == n.lower() or tail == n.lower().rsplit("/", 1)[-1] for n in names):
            return _shape(entry, "bundled table")
    return None


def model_ids() -> list[str]:
    return [entry["id"] for entry in model_table()]


def model_from_config(path: str | os.PathLike[str]) -> ModelShape:
    """A Hugging Face config.json (a multimodal model's text_config is the language model's shape)."""
    label = os.fspath(path)
    try:
        with open(path, "rb") as file:
            raw = file.read(4 * MIB + 1)
    except OSError as exc:
        raise InvalidInput(f"--model-config {label}: cannot read it: {exc.strerror or exc}") from None
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise InvalidInput(f"--model-config {label}: not JSON ({exc}); give the model's config.json") from None
    if not isinstance(doc, dict):
        raise InvalidInput(f"--model-config {label}: not a config.json object")
    text = doc.get("text_config") if isinstance(doc.get("text_config"), dict) else doc
    merged = {**doc, **text}

    def number(*keys: str, default: int | None = None) -> int:
        for key in keys:
            value = merged.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        if default is not None:
            return default
        raise InvalidInput(f"--model-config {label}: no positive integer {' or '.join(keys)}; "
                           "is this the model's config.json?")

    layers = number("num_hidden_layers", "n_layer", "num_layers")
    heads = number("num_attention_heads", "n_head")
    hidden = number("hidden_size", "n_embd")
    kv_heads = number("num_key_value_heads", default=heads)  # absent: multi-head attention, one KV head per head
    head_dim = number("head_dim", default=hidden // heads)
    max_positions = number("max_position_embeddings", "n_positions")
    dtype = str(merged.get("torch_dtype") or merged.get("dtype") or "bfloat16")
    params = _estimated_params(merged, layers, heads, kv_heads, head_dim, hidden)
    window = merged.get("sliding_window") if isinstance(merged.get("sliding_window"), int) else None
    name = str(doc.get("_name_or_path") or label)
    return ModelShape(name, layers, kv_heads, head_dim, max_positions, params, dtype, label, window)


def _estimated_params(cfg: Mapping[str, Any], layers: int, heads: int, kv_heads: int, head_dim: int,
                      hidden: int) -> int:
    """A dense decoder's parameters from its shape: attention, gated MLP and embeddings (norms are noise)."""
    intermediate = cfg.get("intermediate_size") or 4 * hidden
    vocab = cfg.get("vocab_size") or 0
    if not isinstance(intermediate, int) or not isinstance(vocab, int):
        raise InvalidInput("config.json: intermediate_size and vocab_size must be integers")
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2  # q, o; k, v
    mlp = 3 * hidden * intermediate  # gate, up, down
    embeddings = vocab * hidden * (1 if cfg.get("tie_word_embeddings", False) else 2)
    return layers * (attention + mlp) + embeddings


def dtype_bytes(name: str) -> int | None:
    return DTYPE_BYTES.get(name.lower().removeprefix("torch."))
