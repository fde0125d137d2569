"""The SOP's launch-flag checks (section 5) over one vLLM container: each finding with its reason and value.
Inputs come from the manifest and the options; nothing here reads a file or the cluster except a config.json."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from runbook.advise import tables
from runbook.advise.capacity import SOP_UTILIZATION, capacity
from runbook.advise.launch import Launch, read_launch
from runbook.advise.manifest import WorkloadSpec, gpu_count, required_node_labels
from runbook.errors import InvalidInput

SOP_MAX_NUM_SEQS = 128
SOP_BLOCK_SIZE = 32
SOP_CHUNKED_PREFILL_OVER = 2048
VLLM_DEFAULT_UTILIZATION = "0.9"
VLLM_DEFAULT_BLOCK_SIZE = "16"
VLLM_DEFAULT_MAX_NUM_SEQS = "256"
# 4-bit weight formats; fp8 is one byte. Others: the weights' size is not known here.
_QUANTIZED_BYTES = {"awq": Fraction(1, 2), "awq_marlin": Fraction(1, 2), "gptq": Fraction(1, 2),
                    "gptq_marlin": Fraction(1, 2), "bitsandbytes": Fraction(1, 2), "fp8": Fraction(1)}
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?|\.[0-9]+")

REASONS = {
    "max-model-len": "the GPU memory \"safe water line\" (SOP §5): one sequence this long must fit in the KV cache "
                     "left after the weights at --gpu-memory-utilization 0.82, and the SOP deploys 90% of that "
                     "(8192 gave two memory alerts in week 2; 7372 none in 3 months)",
    "max-model-len-unset": "without --max-model-len vLLM sizes for the model's whole context, max_position_embeddings; "
                           "--max-model-len is the GPU memory \"safe water line\" (SOP §5)",
    "max-position-embeddings": "above the model's max_position_embeddings CUDA graph capture usually fails, and the "
                               "model was never trained on positions that far (SOP §5)",
    "max-model-len-too-large": "the KV cache cannot hold one sequence this long even at the configured "
                               "--gpu-memory-utilization: vLLM refuses to start, or OOMs under load (SOP §5)",
    "gpu-memory-utilization": "0.82 (SOP §5): vLLM's default 0.9 leaves no room for fragmentation, and 0.85 still "
                              "failed on some models; it works only together with --max-model-len",
    "max-num-seqs": "min(128, 2 x average concurrency) (SOP §5): too large a batch lets one long prompt stall every "
                    "short one (their P99 went 2.1 s -> 0.85 s)",
    "max-num-batched-tokens": "1.5 x P95 prompt length x --max-num-seqs (SOP §5): too large a batch lets one long "
                              "prompt stall every short one (requests over 1.5 s went 12% -> 1.3%)",
    "enforce-eager": "for debugging only (SOP §5): left on in production it costs 35-40% throughput and blocks "
                     "chunked prefill",
    "block-size": "16 made KV cache usage oscillate 0.92-0.98 with latency spikes; 32 settled at 0.87 (SOP §5)",
    "chunked-prefill": "chunked prefill raises the prefill memory peak; the SOP enables it only for prompts over "
                       "2048 tokens (SOP §5)",
    "max-seq-len": "--max-seq-len is deprecated: use --max-model-len (SOP §5)",
    "tensor-parallel-size": "tensor parallelism splits the weights and KV cache across that many GPUs in the pod: "
                            "the pod must be given them",
}


@dataclasses.dataclass(frozen=True)
class Options:
    gpu: tables.Gpu | None = None  # --gpu / --gpu-memory-gib: wins over what the manifest says
    model: str | None = None  # --model: the model when the command line's is not readable
    model_config: str | None = None  # --model-config config.json
    avg_concurrency: int | None = None
    p95_prompt_tokens: int | None = None


@dataclasses.dataclass(frozen=True)
class Finding:
    check: str
    flag: str
    current: str | None  # as written; None: not set
    suggested: str | None  # None: remove the flag
    severity: str  # "error" (will not start or will OOM) | "warning"
    reason: str
    where: str  # "args[6]" or "not set"
    arithmetic: tuple[str, ...] = ()
    location: str = ""  # file:line:col of the value (of the container's args when not set); "" when live

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"arithmetic": list(self.arithmetic)}


@dataclasses.dataclass(frozen=True)
class Advice:
    workload: str  # deployment/vllm-gemma-deployment
    namespace: str
    where: str
    container: str
    form: str
    model: str | None
    model_source: str
    gpu: str | None
    gpu_source: str
    findings: tuple[Finding, ...]
    unchecked: tuple[str, ...]  # checks left out, each with what would make them possible

    def to_json(self) -> dict[str, Any]:
        return {"workload": self.workload, "namespace": self.namespace, "where": self.where,
                "container": self.container, "form": self.form, "model": self.model, "model_source": self.model_source,
                "gpu": self.gpu, "gpu_source": self.gpu_source,
                "findings": [f.to_json() for f in self.findings], "unchecked": list(self.unchecked)}


def advise_workload(spec: WorkloadSpec, options: Options) -> list[Advice]:
    """One Advice per vLLM container of the workload; [] when it runs none."""
    out = []
    for index, container in enumerate(spec.pod_spec.get("containers") or []):
        if not isinstance(container, Mapping):
            continue
        launch = read_launch(container)
        if launch is not None:
            out.append(_advise(spec, container, launch, options, index))
    return out


def _number(launch: Launch, flag: str, unchecked: list[str], *, integer: bool = True) -> int | Fraction | None:
    raw = launch.value(flag)
    if raw is None:
        return None
    text = raw.strip()
    if integer and text.isdigit():
        return int(text)
    if not integer and _DECIMAL.fullmatch(text):
        return Fraction(text)
    where = launch.flags[flag].where
    unchecked.append(f"{flag} {raw!r} ({where}) is not a number written in place (computed elsewhere?): not checked")
    return None


def _model(launch: Launch, options: Options, where: str) -> tables.ModelShape:
    if options.model_config:
        return tables.model_from_config(options.model_config)
    name = options.model or launch.model
    if name is None:
        raise InvalidInput(f"{where}: {launch.model_where}; give the model with --model NAME or its config.json "
                           "with --model-config PATH")
    if "$" in name:
        raise InvalidInput(f"{where}: the model is {name!r} ({launch.model_where}), which runbook cannot read; give "
                           "the model with --model NAME or its config.json with --model-config PATH")
    shape = tables.bundled_model(name)
    if shape is None:
        raise InvalidInput(f"{where}: model {name!r} ({launch.model_where}) is not in runbook's table "
                           f"({', '.join(tables.model_ids())}); give its config.json with --model-config PATH")
    return shape


def _gpu(spec: WorkloadSpec, container: Mapping[str, Any], options: Options, where: str) -> tables.Gpu:
    if options.gpu is not None:
        return options.gpu
    # A MIG slice is all the container gets, whatever GPU the node's label names.
    resources = container.get("resources") or {}
    for part in ("limits", "requests"):
        slice_ = tables.gpu_from_mig(resources.get(part) or {}, f"resources.{part}")
        if slice_ is not None:
            return slice_
    found = tables.gpu_from_labels(required_node_labels(spec.pod_spec), "nodeSelector")
    if found is None:
        raise InvalidInput(f"{where}: cannot tell which GPU {spec.ref} runs on (no "
                           f"{' or '.join(tables.GPU_LABELS)} in its nodeSelector or required node affinity); give "
                           f"--gpu NAME ({', '.join(tables.gpu_names())}) or --gpu-memory-gib N")
    return found


_WORD = re.compile(r"(command|args)\[([0-9]+)\]")


def _location(spec: WorkloadSpec, container: Mapping[str, Any], index: int, where: str) -> str:
    """Where a finding points in the manifest: the word holding the flag, else where flags are written."""
    word = _WORD.match(where)
    if word is not None:
        return spec.location("containers", index, word[1], int(word[2]))
    return spec.location("containers", index, "args" if "args" in container else "command")


def _advise(spec: WorkloadSpec, container: Mapping[str, Any], launch: Launch, options: Options,
            index: int) -> Advice:
    where = f"{spec.where} containers[{index}]"
    findings: list[Finding] = []
    unchecked: list[str] = []
    said = f"{where} {spec.ref} container {launch.container}"
    model = _model(launch, options, said)
    gpu = _gpu(spec, container, options, said)

    def flag_where(flag: str) -> str:
        return launch.flags[flag].where if flag in launch.flags else "not set"

    def add(check: str, flag: str, suggested: str | None, *, severity: str = "warning", reason: str | None = None,
            arithmetic: tuple[str, ...] | list[str] = ()) -> None:
        findings.append(Finding(check, flag, launch.value(flag), suggested, severity, reason or REASONS[check],
                                flag_where(flag), tuple(arithmetic),
                                _location(spec, container, index, flag_where(flag))))

    # --max-seq-len: deprecated, and its value is the model length to check.
    length_flag = "--max-model-len"
    if "--max-seq-len" in launch.flags:
        add("max-seq-len", "--max-seq-len", f"--max-model-len={launch.value('--max-seq-len')}")
        if "--max-model-len" not in launch.flags:
            length_flag = "--max-seq-len"
    max_model_len = _number(launch, length_flag, unchecked)
    tp = _number(launch, "--tensor-parallel-size", unchecked) or 1
    utilization = _number(launch, "--gpu-memory-utilization", unchecked, integer=False)

    # Tensor parallelism needs its GPUs in the pod.
    gpus = gpu_count(container)
    if tp > 1 and gpus is not None and gpus < tp:
        add("tensor-parallel-size", "--tensor-parallel-size", str(gpus), severity="error",
            reason=f"{REASONS['tensor-parallel-size']}; the container asks for {gpus} nvidia.com/gpu: lower the flag "
                   f"to {gpus}, or give the container {tp} nvidia.com/gpu")

    # --gpu-memory-utilization 0.82.
    if utilization is None and "--gpu-memory-utilization" not in launch.flags:
        add("gpu-memory-utilization", "--gpu-memory-utilization", "0.82",
            reason=f"{REASONS['gpu-memory-utilization']}; not set, vLLM uses {VLLM_DEFAULT_UTILIZATION}")
    elif utilization is not None and utilization > SOP_UTILIZATION:
        add("gpu-memory-utilization", "--gpu-memory-utilization", "0.82")

    # --max-model-len against the GPU and the model.
    weight_bytes = _weight_bytes(launch, model, unchecked)
    kv_bytes = _kv_bytes(launch, model, unchecked)
    if (_number(launch, "--pipeline-parallel-size", unchecked) or 1) > 1:
        unchecked.append("--max-model-len: pipeline parallelism splits the layers across GPUs, which runbook does "
                         "not size yet: not checked against the GPU")
        weight_bytes = None
    if weight_bytes is not None and kv_bytes is not None:
        room = capacity(model, gpu, weight_bytes=weight_bytes, kv_dtype_bytes=kv_bytes, tp=tp)
        steps = room.steps(model, tp, weight_bytes, kv_bytes)
        if model.sliding_window:
            steps.append(f"{model.name} attends to a {model.sliding_window}-token window in most layers: counting "
                         "every layer at full length is the upper bound of its KV cache")
        # What vLLM itself will have, at the configured utilization (else its default 0.9): past this
        # ceiling one sequence of that length does not fit, and vLLM refuses to start.
        vllm_ceiling = capacity(model, gpu, weight_bytes=weight_bytes, kv_dtype_bytes=kv_bytes, tp=tp,
                                utilization=utilization if utilization is not None
                                else Fraction(VLLM_DEFAULT_UTILIZATION)).ceiling
        unset = max_model_len is None and length_flag not in launch.flags
        if room.safe <= 0:
            add("max-model-len", length_flag, None, severity="error", arithmetic=steps,
                reason=f"{model.name}'s weights leave no KV cache room on one {gpu.name} at 0.82: use more GPUs "
                       "(--tensor-parallel-size) or a larger GPU")
        elif unset and model.max_position_embeddings > room.safe:
            # Unset, vLLM sizes for the model's whole context; where that fits the SOP's line, nothing to say.
            add("max-model-len-unset", "--max-model-len", str(room.safe), arithmetic=steps,
                severity="error" if model.max_position_embeddings > vllm_ceiling else "warning")
        elif max_model_len is not None and model.max_position_embeddings >= max_model_len > room.safe:
            too_large = max_model_len > vllm_ceiling
            add("max-model-len-too-large" if too_large else "max-model-len", length_flag, str(room.safe),
                severity="error" if too_large else "warning", arithmetic=steps)
        if max_model_len is not None and max_model_len > model.max_position_embeddings:
            suggested = room.safe if room.safe > 0 else model.max_position_embeddings
            add("max-position-embeddings", length_flag, str(suggested), severity="error", arithmetic=steps,
                reason=f"{REASONS['max-position-embeddings']}: {model.name}'s is {model.max_position_embeddings}")
    elif max_model_len is not None and max_model_len > model.max_position_embeddings:
        add("max-position-embeddings", length_flag, str(model.max_position_embeddings), severity="error",
            reason=f"{REASONS['max-position-embeddings']}: {model.name}'s is {model.max_position_embeddings}")

    _batch_checks(launch, options, add, unchecked)
    unchecked.extend(_unread_flags(launch, container))
    return Advice(spec.ref, spec.namespace, where, launch.container, launch.form, model.name, model.source,
                  gpu.name, gpu.source, tuple(findings), tuple(unchecked))


def _batch_checks(launch: Launch, options: Options, add: Any, unchecked: list[str]) -> None:
    # --max-num-seqs = min(128, 2 x average concurrency).
    seqs_limit = SOP_MAX_NUM_SEQS if options.avg_concurrency is None else min(SOP_MAX_NUM_SEQS,
                                                                              2 * options.avg_concurrency)
    max_num_seqs = _number(launch, "--max-num-seqs", unchecked)
    formula = (f"min(128, 2 x {options.avg_concurrency}) = {seqs_limit}" if options.avg_concurrency is not None
               else "at most 128 (give --avg-concurrency for 2 x the average)")
    if max_num_seqs is None and "--max-num-seqs" not in launch.flags:
        add("max-num-seqs", "--max-num-seqs", str(seqs_limit), arithmetic=[formula],
            reason=f"{REASONS['max-num-seqs']}; not set, vLLM uses {VLLM_DEFAULT_MAX_NUM_SEQS} (more on some GPUs)")
        max_num_seqs = seqs_limit
    elif max_num_seqs is not None and max_num_seqs > seqs_limit:
        add("max-num-seqs", "--max-num-seqs", str(seqs_limit), arithmetic=[formula])
        max_num_seqs = seqs_limit

    # --max-num-batched-tokens = 1.5 x P95 prompt length x --max-num-seqs.
    batched = _number(launch, "--max-num-batched-tokens", unchecked)
    if options.p95_prompt_tokens is None:
        unchecked.append("--max-num-batched-tokens: give --p95-prompt-tokens N (the P95 prompt length) to size it "
                         "as 1.5 x P95 x --max-num-seqs")
    elif max_num_seqs is not None:
        wanted = math.ceil(Fraction(3, 2) * options.p95_prompt_tokens * max_num_seqs)
        formula = f"1.5 x {options.p95_prompt_tokens} x {max_num_seqs} = {wanted}"
        if batched is None and "--max-num-batched-tokens" not in launch.flags:
            add("max-num-batched-tokens", "--max-num-batched-tokens", str(wanted), arithmetic=[formula])
        elif batched is not None and batched > wanted:
            add("max-num-batched-tokens", "--max-num-batched-tokens", str(wanted), arithmetic=[formula])

    # --enforce-eager left on.
    if launch.on("--enforce-eager"):
        add("enforce-eager", "--enforce-eager", None, severity="error")

    # --block-size 32.
    block = _number(launch, "--block-size", unchecked)
    if block is None and "--block-size" not in launch.flags:
        add("block-size", "--block-size", str(SOP_BLOCK_SIZE),
            reason=f"{REASONS['block-size']}; not set, vLLM uses {VLLM_DEFAULT_BLOCK_SIZE} on CUDA")
    elif block is not None and block < SOP_BLOCK_SIZE:
        add("block-size", "--block-size", str(SOP_BLOCK_SIZE))

    # Chunked prefill only for prompts over 2048 tokens.
    enabled = launch.on("--enable-chunked-prefill")
    disabled = launch.on("--no-enable-chunked-prefill") or (
        "--enable-chunked-prefill" in launch.flags and not enabled)
    p95 = options.p95_prompt_tokens
    if p95 is None:
        if enabled or disabled:
            unchecked.append("chunked prefill: give --p95-prompt-tokens N to check it against the SOP's 2048 tokens")
    elif enabled and p95 <= SOP_CHUNKED_PREFILL_OVER:
        add("chunked-prefill", "--enable-chunked-prefill", None,
            reason=f"{REASONS['chunked-prefill']}; P95 prompt is {p95} tokens")
    elif disabled and p95 > SOP_CHUNKED_PREFILL_OVER:
        flag = "--no-enable-chunked-prefill" if "--no-enable-chunked-prefill" in launch.flags else \
            "--enable-chunked-prefill"
        add("chunked-prefill", flag, "--enable-chunked-prefill",
            reason=f"{REASONS['chunked-prefill']}; P95 prompt is {p95} tokens, over 2048: enable it")


_CHECKED = ("--max-model-len", "--max-seq-len", "--gpu-memory-utilization", "--max-num-seqs",
            "--max-num-batched-tokens", "--enforce-eager", "--block-size", "--enable-chunked-prefill",
            "--tensor-parallel-size")
# Any of them in a text, in either spelling vLLM's parser takes (`--max_model_len` is `--max-model-len`).
_CHECKED_MENTION = re.compile("(?:" + "|".join("--" + flag[2:].replace("-", "[-_]") for flag in _CHECKED)
                              + r")(?![\w-])")


def _unread_flags(launch: Launch, container: Mapping[str, Any]) -> list[str]:
    """Flags vLLM may get from where this reading does not look: said, so a clean result is not overclaimed."""
    notes = []
    if "--config" in launch.flags:
        notes.append(f"--config {launch.value('--config')} ({launch.flags['--config'].where}): flags in that file "
                     "are not read; only the command line is checked")
    for entry in container.get("env") or []:
        value = entry.get("value") if isinstance(entry, Mapping) else None
        if isinstance(value, str) and _CHECKED_MENTION.search(value):
            notes.append(f"env {entry.get('name')} holds launch flags (as KServe's VLLM_ADDITIONAL_ARGS does), "
                         "which are not read; only the command line is checked")
    return notes


def _weight_bytes(launch: Launch, model: tables.ModelShape, unchecked: list[str]) -> Fraction | None:
    quantization = launch.value("--quantization")
    if quantization:
        found = _QUANTIZED_BYTES.get(quantization.lower())
        if found is None:
            unchecked.append(f"--max-model-len: weights quantized with {quantization!r}, whose size runbook does not "
                             "know: not checked against the GPU")
        return found
    dtype = (launch.value("--dtype") or "auto").lower()
    name = model.dtype if dtype == "auto" else dtype
    found_bytes = tables.dtype_bytes(name)
    if found_bytes is None:
        unchecked.append(f"--max-model-len: weights dtype {name!r} unknown: not checked against the GPU")
        return None
    return Fraction(found_bytes)


def _kv_bytes(launch: Launch, model: tables.ModelShape, unchecked: list[str]) -> int | None:
    kv = (launch.value("--kv-cache-dtype") or "auto").lower()
    if kv.startswith("fp8"):
        return 1
    if kv != "auto":
        return tables.dtype_bytes(kv)
    dtype = (launch.value("--dtype") or "auto").lower()
    return tables.dtype_bytes(model.dtype if dtype == "auto" else dtype)
