"""Scenario data for the real-Prometheus tests: the four SOP incidents as scraped vLLM series.

Each incident lives on its own day around a fixed instant (`at`), with realistic label sets
(vLLM V1 names; the waiting-queue cluster runs vLLM 0.8.5, so it exports the older
`vllm:gpu_cache_usage_perc`), counters integrated from per-minute rates, histograms shaped so
their p99 is the value given, kube-state-metrics, ingress-nginx and DCGM exporter series. The
same time the day before is quiet everywhere. Values follow the drill scenarios' shapes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import zlib
from collections.abc import Iterable

STEP = 15  # the scrape interval, seconds
BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0)
PROMPT_BUCKETS = (128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0)  # vllm:request_prompt_tokens
DAY = 86400
MODEL = "meta-llama/Meta-Llama-3-8B-Instruct"
Points = list[tuple[float, float | None]]  # (seconds relative to `at`, value from then on; None: absent)


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str  # the playbook that must come out on top
    at: dt.datetime
    firing: frozenset[str]  # every playbook expected to fire at `at`
    pods: tuple[tuple[str, str, str], ...]  # (pod, node, gpu index)
    series: tuple["Line", ...]
    namespace: str = "llm"

    @property
    def quiet_at(self) -> dt.datetime:
        return self.at - dt.timedelta(days=1)


@dataclasses.dataclass(frozen=True)
class Line:
    """One scraped series: `gauge`, `counter` (points are a rate per `per` seconds) or `hist`."""

    name: str
    labels: dict[str, str]
    kind: str
    points: Points
    per: float = 60.0
    start: float = 0.0  # a counter's value when it first appears
    requests_per_sec: float = 2.0  # for `hist`: observations per second
    buckets: tuple[float, ...] = BUCKETS  # for `hist`: the upper bounds of its buckets
    history: bool = False  # also scraped creep_window (6h) before each window: latency-creep's P99 then


def _value(points: Points, r: float) -> float | None:
    value = None
    for at, v in points:
        if at <= r:
            value = v
        else:
            break
    return value


def _utc(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=dt.timezone.utc)


def _vllm(pod: str, namespace: str = "llm") -> dict[str, str]:
    return {"namespace": namespace, "pod": pod, "container": "vllm", "job": "vllm", "model_name": MODEL,
            "engine": "0", "instance": f"{pod}.vllm-server.{namespace}:8000"}


def _pod_lines(pod: str, *, waiting: Points, running: Points, kv: Points, tokens: Points, ttft: Points,
               decode: Points, aborted: Points, kv_name: str = "vllm:kv_cache_usage_perc",
               namespace: str = "llm") -> list[Line]:
    labels = _vllm(pod, namespace)
    return [
        Line("vllm:num_requests_waiting", labels, "gauge", waiting),
        Line("vllm:num_requests_running", labels, "gauge", running),
        Line(kv_name, labels, "gauge", kv),
        Line("vllm:generation_tokens_total", labels, "counter", tokens, per=1.0, start=4.2e7),
        Line("vllm:time_to_first_token_seconds", labels, "hist", ttft),
        Line("vllm:request_decode_time_seconds", labels, "hist", decode),
        # prompts of about 900 tokens (p99), far from any --max-model-len: prompt-truncation is quiet
        Line("vllm:request_prompt_tokens", labels, "hist", [(p[0], None if p[1] is None else 900.0) for p in tokens],
             buckets=PROMPT_BUCKETS),
        Line("vllm:request_success_total", {**labels, "finished_reason": "stop"}, "counter",
             [(p[0], None if p[1] is None else 60.0) for p in tokens], start=81_000),
        Line("vllm:request_success_total", {**labels, "finished_reason": "abort"}, "counter", aborted, start=40),
    ]


def _kube(namespace: str, pods: Iterable[str], ready: Points, restarts: dict[str, Points] | None = None,
          terminated: dict[str, str] | None = None) -> list[Line]:
    out = [Line("kube_statefulset_status_replicas_ready",
                {"namespace": namespace, "statefulset": "vllm-server", "job": "kube-state-metrics"}, "gauge", ready)]
    for pod in pods:
        labels = {"namespace": namespace, "pod": pod, "container": "vllm", "job": "kube-state-metrics"}
        out.append(Line("kube_pod_container_status_restarts_total", labels, "gauge",
                        (restarts or {}).get(pod, [(-2 * DAY, 0)])))
        if terminated and pod in terminated:
            out.append(Line("kube_pod_container_status_last_terminated_reason",
                            {**labels, "reason": terminated[pod]}, "gauge", [(-2 * DAY, 1)]))
    return out


def _log_pipeline(namespace: str, pods: Iterable[str]) -> list[Line]:
    """The log pipeline's counter of vLLM error lines (promtail): the connection resets it counts all
    the time (the SOP's > 10/min line) show it is there, so no CUDA OOM line counted means none logged."""
    return [Line("vllm_log_errors_total", {"namespace": namespace, "pod": pod, "container": "vllm",
                                           "error": "connection_reset", "job": "promtail"}, "counter",
                 [(-2 * DAY, 0.5)], start=310) for pod in pods]


def _instrumentator(pod: str, ok_per_min: float, errors: Points, namespace: str = "llm") -> list[Line]:
    """vLLM's own HTTP metrics (prometheus-fastapi-instrumentator groups statuses: 2xx, 5xx)."""
    labels = {**_vllm(pod, namespace), "handler": "/v1/chat/completions", "method": "POST"}
    labels.pop("model_name"), labels.pop("engine")
    return [Line("http_requests_total", {**labels, "status": "2xx"}, "counter", [(-2 * DAY, ok_per_min)], start=9.1e5),
            Line("http_requests_total", {**labels, "status": "5xx"}, "counter", errors, start=3)]


def _gateway(namespace: str, ok_per_min: float, errors: Points) -> list[Line]:
    labels = {"namespace": namespace, "ingress": "vllm", "service": "vllm-server", "method": "POST",
              "controller_pod": "ingress-nginx-controller-7d9f8b-x2k4p", "job": "ingress-nginx"}
    return [Line("nginx_ingress_controller_requests", {**labels, "status": "200"}, "counter",
                 [(-2 * DAY, ok_per_min)], start=3.1e6),
            Line("nginx_ingress_controller_requests", {**labels, "status": "503"}, "counter", errors, start=12)]


def _gpu(node: str, gpu: str, used_ratio: Points, util: Points, total_mib: float = 23028) -> list[Line]:
    labels = {"Hostname": node, "gpu": gpu, "UUID": f"GPU-{zlib.crc32(f'{node}/{gpu}'.encode()):08x}-a10",
              "device": f"nvidia{gpu}", "modelName": "NVIDIA A10", "job": "dcgm-exporter"}
    used = [(r, None if v is None else round(v * total_mib)) for r, v in used_ratio]
    free = [(r, None if v is None else total_mib - round(v * total_mib)) for r, v in used_ratio]
    return [Line("DCGM_FI_DEV_FB_USED", labels, "gauge", used),  # type: ignore[arg-type]
            Line("DCGM_FI_DEV_FB_FREE", labels, "gauge", free),  # type: ignore[arg-type]
            Line("DCGM_FI_DEV_GPU_UTIL", labels, "gauge", util)]


def _oom_surge() -> Scenario:
    pods = (("vllm-server-0", "gpu-node-0", "0"), ("vllm-server-1", "gpu-node-1", "0"), ("vllm-server-2", "gpu-node-3", "0"))
    lines: list[Line] = []
    shapes = {
        "vllm-server-0": dict(waiting=[(-2 * DAY, 2), (-600, 5), (-300, 9), (0, 14)], oom=[(-420, 1), (-300, 3), (-180, 5), (-60, 7), (0, 8)],
                              kv=[(-2 * DAY, 0.71), (-3600, 0.74), (-600, 0.86), (-300, 0.95), (0, 0.97)]),
        "vllm-server-1": dict(waiting=[(-2 * DAY, 1), (-600, 4), (-300, 8), (0, 11)], oom=[(-360, 1), (-300, 2), (-180, 4), (-60, 6), (0, 7)],
                              kv=[(-2 * DAY, 0.69), (-3600, 0.73), (-600, 0.84), (-300, 0.94), (0, 0.96)]),
        "vllm-server-2": dict(waiting=[(-2 * DAY, 2), (-600, 6), (-300, 11), (0, 16)], oom=[(-300, 2), (-180, 3), (-60, 5), (0, 6)],
                              kv=[(-2 * DAY, 0.72), (-3600, 0.75), (-600, 0.87), (-300, 0.96), (0, 0.98)]),
    }
    for pod, node, gpu in pods:
        s = shapes[pod]
        lines += _pod_lines(pod, waiting=s["waiting"], running=[(-2 * DAY, 38), (-600, 55), (-300, 64)], kv=s["kv"],
                            tokens=[(-2 * DAY, 2150), (-600, 1980), (-300, 1610), (0, 1480)],
                            ttft=[(-2 * DAY, 0.42), (-600, 0.9), (-300, 2.1), (0, 2.9)],
                            decode=[(-2 * DAY, 3.1), (-300, 4.2), (0, 4.6)],
                            aborted=[(-2 * DAY, 0.1), (-300, 0.2)])
        # CUDA OOM error lines counted by the log pipeline; the counter appears with the first one.
        lines.append(Line("vllm_log_errors_total", {"namespace": "llm", "pod": pod, "container": "vllm",
                                                    "error": "cuda_oom", "job": "promtail"}, "counter", s["oom"], start=0))
        lines += _gpu(node, gpu, [(-2 * DAY, 0.972)], [(-2 * DAY, 98)])
    # vllm-server-2's engine died once with the OOM (exit 1, "Error"), three minutes before.
    lines += _kube("llm", [p for p, _, _ in pods], [(-2 * DAY, 3)], restarts={"vllm-server-2": [(-2 * DAY, 0), (-180, 1)]},
                   terminated={"vllm-server-2": "Error"})
    lines += _gateway("llm", 620, [(-2 * DAY, None)])
    lines += _log_pipeline("llm", [p for p, _, _ in pods])
    lines += _gpu("gpu-node-2", "0", [(-2 * DAY, 0.00004)], [(-2 * DAY, 0)])
    # The same incident as the article's exporter names it, in a second team's namespace.
    for pod, _, _ in pods[:2]:
        labels = {"namespace": "team-a", "pod": pod, "job": "vllm-custom"}
        lines += [Line("vllm_request_waiting_queue_length", labels, "gauge", [(-2 * DAY, 3), (-300, 12)]),
                  Line("vllm_num_running_requests", labels, "gauge", [(-2 * DAY, 30), (-300, 60)]),
                  Line("vllm_kv_cache_usage_ratio", labels, "gauge", [(-2 * DAY, 0.7), (-300, 0.95)]),
                  Line("vllm_request_failed_total", {**labels, "reason": "oom"}, "counter", [(-2 * DAY, 0), (-400, 4)]),
                  Line("vllm_request_failed_total", {**labels, "reason": "timeout"}, "counter", [(-2 * DAY, 0.5), (-300, 2)])]
    return Scenario("oom-surge", _utc(2026, 3, 14, 3, 12, 7), frozenset({"oom-surge"}), pods, tuple(lines))


def _waiting_queue() -> Scenario:
    pods = (("vllm-server-0", "gpu-node-0", "0"), ("vllm-server-1", "gpu-node-1", "0"),
            ("vllm-server-2", "gpu-node-2", "0"), ("vllm-server-3", "gpu-node-3", "0"))
    waiting = {
        "vllm-server-0": [(-2 * DAY, 3), (-600, 5), (-360, 12), (-240, 18), (-120, 23), (0, 26)],
        "vllm-server-1": [(-2 * DAY, 3), (-600, 4), (-360, 11), (-240, 17), (-120, 24), (0, 27)],
        "vllm-server-2": [(-2 * DAY, 2), (-600, 5), (-372, 9), (-360, None)],  # hung: no more scrapes
        "vllm-server-3": [(-2 * DAY, 3), (-600, 5), (-360, 12), (-240, 19), (-120, 24), (0, 27)],
    }
    lines: list[Line] = []
    for pod, node, gpu in pods:
        hung = pod == "vllm-server-2"
        gone = [(-360, None)] if hung else []
        lines += _pod_lines(pod, waiting=waiting[pod], running=[(-2 * DAY, 70), (-600, 95), (-300, 128)] + gone,
                            kv=[(-2 * DAY, 0.62), (-300, 0.64 if hung else 0.91)] + gone,
                            tokens=[(-2 * DAY, 1720), (-300, 1874)] + gone,
                            ttft=[(-2 * DAY, 0.38), (-600, 0.52), (-360, 1.9), (-240, 3.4), (-120, 4.6), (0, 5.2)] + gone,
                            decode=[(-2 * DAY, 2.9), (-300, 3.1)] + gone, aborted=[(-2 * DAY, 0.2)] + gone,
                            kv_name="vllm:gpu_cache_usage_perc")  # vLLM 0.8.5: the older name only
        lines += _gpu(node, gpu, [(-2 * DAY, 0.84)], [(-2 * DAY, 91)])
    lines += _kube("llm", [p for p, _, _ in pods], [(-2 * DAY, 4), (-340, 3)])
    lines += _gateway("llm", 900, [(-2 * DAY, 0), (-290, 4), (-120, 7)])
    lines += _log_pipeline("llm", [p for p, _, _ in pods])
    return Scenario("waiting-queue", _utc(2026, 3, 17, 9, 40), frozenset({"waiting-queue", "zombie-process"}),
                    pods, tuple(lines))


def _zombie_process() -> Scenario:
    pods = (("vllm-server-0", "gpu-node-0", "0"), ("vllm-server-1", "gpu-node-1", "0"), ("vllm-server-2", "gpu-node-2", "0"))
    lines: list[Line] = []
    for pod, node, gpu in pods:
        hung = pod == "vllm-server-1"
        gone = [(-400, None)] if hung else []
        lines += _pod_lines(pod, waiting=[(-2 * DAY, 1), (-300, 3 if not hung else 1)] + gone,
                            running=[(-2 * DAY, 33), (-300, 41)] + gone, kv=[(-2 * DAY, 0.58), (-300, 0.64)] + gone,
                            tokens=[(-2 * DAY, 1400)] + gone, ttft=[(-2 * DAY, 0.3)] + gone,
                            decode=[(-2 * DAY, 2.8)] + gone, aborted=[(-2 * DAY, 0.1)] + gone)
        lines += _gpu(node, gpu, [(-2 * DAY, 0.84)], [(-2 * DAY, 64)] + ([(-410, 0)] if hung else []))
    lines += _kube("llm", [p for p, _, _ in pods], [(-2 * DAY, 3)])
    lines += _gateway("llm", 700, [(-2 * DAY, 0), (-405, 8), (-300, 14), (-120, 16), (0, 17)])
    lines += _log_pipeline("llm", [p for p, _, _ in pods])
    return Scenario("zombie-process", _utc(2026, 3, 20, 14, 5), frozenset({"zombie-process"}), pods, tuple(lines))


def _lingering_cuda_context() -> Scenario:
    pods = (("vllm-server-0", "gpu-node-2", "0"), ("vllm-server-1", "gpu-node-3", "0"))
    lines: list[Line] = []
    for pod, node, gpu in pods:
        lines += _pod_lines(pod, waiting=[(-2 * DAY, 2)], running=[(-2 * DAY, 44)], kv=[(-2 * DAY, 0.7)],
                            tokens=[(-2 * DAY, 1800)], ttft=[(-2 * DAY, 0.35)], decode=[(-2 * DAY, 2.9)],
                            aborted=[(-2 * DAY, 0.1)])
        lines += _gpu(node, gpu, [(-2 * DAY, 0.84)], [(-2 * DAY, 85)])
    # GPU 1 of gpu-node-3: a worker exited 3 hours ago without releasing its CUDA context. GPU 1 of
    # gpu-node-2 is a busy one, its memory as full (vLLM at --gpu-memory-utilization 0.98).
    lines += _gpu("gpu-node-2", "1", [(-2 * DAY, 0.002), (-3 * 3600, 0.981)], [(-2 * DAY, 0), (-3 * 3600, 93)])
    lines += _gpu("gpu-node-3", "1", [(-2 * DAY, 0.002), (-3 * 3600, 0.979)], [(-2 * DAY, 0)])
    lines += _kube("llm", [p for p, _, _ in pods], [(-2 * DAY, 2)])
    lines += _gateway("llm", 500, [(-2 * DAY, None)])
    lines += _log_pipeline("llm", [p for p, _, _ in pods])
    return Scenario("lingering-cuda-context", _utc(2026, 3, 23, 20, 30), frozenset({"lingering-cuda-context"}),
                    pods, tuple(lines))


def _stock_vllm() -> Scenario:
    """A plain vLLM deployment: vLLM's own metrics and nothing else — no DCGM exporter, no ingress-nginx,
    no kube-state-metrics, no log pipeline. Quiet until 8 minutes before `at`, when vllm-server-1 starts
    answering 12 errors (5xx) a minute: only vLLM's own HTTP metrics can tell."""
    pods = (("vllm-server-0", "", ""), ("vllm-server-1", "", ""))
    lines: list[Line] = []
    for pod, _, _ in pods:
        lines += _pod_lines(pod, waiting=[(-2 * DAY, 2)], running=[(-2 * DAY, 30)], kv=[(-2 * DAY, 0.6)],
                            tokens=[(-2 * DAY, 1500)], ttft=[(-2 * DAY, 0.3)], decode=[(-2 * DAY, 2.7)],
                            aborted=[(-2 * DAY, 0.1)])
        errors = [(-2 * DAY, None), (-480, 12)] if pod == "vllm-server-1" else [(-2 * DAY, None)]
        lines += _instrumentator(pod, 300, errors)
    return Scenario("stock-vllm", _utc(2026, 3, 26, 11, 0), frozenset({"zombie-process"}), pods, tuple(lines))


def stock_cluster(at: dt.datetime, namespace: str = "llm") -> Scenario:
    """A quiet stock vLLM V1 StatefulSet of three pods as a GPU cluster exports it: vLLM's own metrics,
    kube-state-metrics and the DCGM exporter, and no log pipeline (no OOM counter anywhere), at `at`
    (the wall clock's now, for triage beside a real cluster's logs)."""
    pods = tuple((f"vllm-server-{i}", f"gpu-node-{i}", "0") for i in range(3))
    lines: list[Line] = []
    for pod, node, gpu in pods:
        lines += _pod_lines(pod, waiting=[(-2 * DAY, 2)], running=[(-2 * DAY, 30)], kv=[(-2 * DAY, 0.6)],
                            tokens=[(-2 * DAY, 1500)], ttft=[(-2 * DAY, 0.3)], decode=[(-2 * DAY, 2.7)],
                            aborted=[(-2 * DAY, 0.1)], namespace=namespace)
        lines += _instrumentator(pod, 300, [(-2 * DAY, 0)], namespace=namespace)
        lines += _gpu(node, gpu, [(-2 * DAY, 0.84)], [(-2 * DAY, 71)])
    lines += _kube(namespace, [p for p, _, _ in pods], [(-2 * DAY, 3)])
    stock = Scenario("stock-cluster", at.replace(microsecond=0), frozenset(), pods, tuple(lines), namespace)
    return _with_latency_history(stock)


def _with_latency_history(scenario: Scenario) -> Scenario:
    """vLLM's end-to-end latency histogram (one pod's, a steady p99 of 2 s), scraped six hours before each
    window too: latency-creep's P99 now against the P99 then reads 1, quiet, in every incident."""
    pod = scenario.pods[0][0]
    line = Line("vllm:e2e_request_latency_seconds", _vllm(pod, scenario.namespace), "hist", [(-2 * DAY, 2.0)],
                buckets=(1.0, 2.5, 5.0, 20.0), history=True)
    return dataclasses.replace(scenario, series=(*scenario.series, line))


SCENARIOS: dict[str, Scenario] = {s.name: _with_latency_history(s) for s in (_oom_surge(), _waiting_queue(),
                                                                           _zombie_process(), _lingering_cuda_context())}
# Not an SOP incident (no playbook comes out on top for its own name): what a plain vLLM exports.
STOCK_VLLM = _with_latency_history(_stock_vllm())
# Enough history for triage's one-hour look-back and the 5-minute latency windows an hour ago,
# and for the same time yesterday.
WINDOWS = ((-65 * 60, 2 * 60), (-DAY - 70 * 60, -DAY + 60))
CREEP = 6 * 3600  # the vllm profile's creep_window: e2e_latency_p99_vs_earlier reads the P99 this long before
# A `history` line's windows, in time order (its histogram only grows): each one also creep_window earlier,
# 5 minutes longer for the rate() window there.
HISTORY_WINDOWS = tuple(sorted([*WINDOWS, *((lo - CREEP - 5 * 60, hi - CREEP) for lo, hi in WINDOWS)]))


def _grid(history: bool = False) -> Iterable[float]:
    for lo, hi in HISTORY_WINDOWS if history else WINDOWS:
        yield from range(lo, hi + 1, STEP)


def _histogram(target: float, count: float, buckets: tuple[float, ...] = BUCKETS) -> tuple[list[float], float]:
    """Cumulative bucket counts (with +Inf) for `count` observations whose p99 is `target`."""
    BUCKETS = buckets  # noqa: N806 - the same arithmetic over this histogram's own bounds
    upper = next((b for b in BUCKETS if target <= b), BUCKETS[-1])
    lower = max([0.0] + [b for b in BUCKETS if b < upper])
    x = (target - lower) / (upper - lower)
    below = max(0.0, (0.99 - x) / (1 - x)) if x < 0.99 else 0.0  # share put in the bucket under
    cumulative = []
    for b in BUCKETS:
        if b < lower:
            cumulative.append(0.0)
        elif b == lower:
            cumulative.append(count * below)
        else:
            cumulative.append(count)
    return cumulative + [count], count * target


def _samples(line: Line, at: float) -> Iterable[tuple[str, dict[str, str], float, float]]:
    """(name, labels, value, timestamp) for every scrape of `line` in the windows."""
    total = line.start
    hist: list[float] | None = None
    hist_sum = 0.0
    for r in _grid(line.history):
        value = _value(line.points, r)
        if value is None:
            continue
        t = at + r
        if line.kind == "gauge":
            yield line.name, line.labels, float(value), t
        elif line.kind == "counter":
            total += value * STEP / line.per
            yield line.name, line.labels, total, t
        else:
            buckets, total_sum = _histogram(value, line.requests_per_sec * STEP, line.buckets)
            hist = buckets if hist is None else [a + b for a, b in zip(hist, buckets)]
            hist_sum += total_sum
            for le, c in zip([*map(repr, line.buckets), "+Inf"], hist):
                yield f"{line.name}_bucket", {**line.labels, "le": le}, c, t
            yield f"{line.name}_count", line.labels, hist[-1], t
            yield f"{line.name}_sum", line.labels, hist_sum, t


def _format_labels(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


def openmetrics(scenarios: Iterable[Scenario] = (*SCENARIOS.values(), STOCK_VLLM)) -> str:
    """All scenarios as one OpenMetrics document for `promtool tsdb create-blocks-from openmetrics`."""
    families: dict[str, list[str]] = {}
    for scenario in scenarios:
        at = scenario.at.timestamp()
        for line in scenario.series:
            for name, labels, value, t in _samples(line, at):
                families.setdefault(name, []).append(f"{name}{{{_format_labels(labels)}}} {value:.12g} {t:.0f}")
    out: list[str] = []
    for name in sorted(families):  # a family's samples must stay together
        out.extend(families[name])
    out.append("# EOF")
    return "\n".join(out) + "\n"
