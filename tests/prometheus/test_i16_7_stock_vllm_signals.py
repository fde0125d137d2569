"""Issue 16, item 7 (its metric part): what a stock vLLM shop has, read by the signals. Each signal is
rendered from the catalog into a recording rule and `promtool test rules` checks what it reads from
vLLM V1's own series (engine errors apart from aborts, prefill without queueing, prompt length, the
KV blocks of cache_config_info, a scrape target down) and from Istio's (503s and timeouts by profile).
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from runbook.signals.catalog import build_catalog
from tests.prometheus.conftest import need_binary

POD = 'namespace="llm",pod="vllm-server-0",model_name="m",engine="0"'


def _record(profile: str, signal: str, by: tuple[str, ...], wrap: str = "{}") -> dict:
    expr = build_catalog(profile=profile).render(signal, {"namespace": "llm"}, by)
    return {"record": f"check:{profile}:{signal}", "expr": wrap.format(expr)}


def _histogram(metric: str, bounds: tuple[str, ...], in_bucket: str, per_step: int) -> list[dict]:
    """Every observation in the bucket `in_bucket` (none below it), `per_step` a scrape."""
    out, reached = [], False
    for le in bounds:
        reached = reached or le == in_bucket
        out.append({"series": f'{metric}_bucket{{{POD},le="{le}"}}', "values": f"0+{per_step if reached else 0}x40"})
    return out


CASES = [
    # failed requests by reason: engine errors and aborts apart, finished ones left out
    ("vllm", "failed_requests_per_min", ("reason",), "{}",
     [{"series": f'vllm:request_success_total{{{POD},finished_reason="error"}}', "values": "0+1x40"},
      {"series": f'vllm:request_success_total{{{POD},finished_reason="abort"}}', "values": "0+2x40"},
      {"series": f'vllm:request_success_total{{{POD},finished_reason="stop"}}', "values": "0+25x40"}],
     [({"reason": "error"}, 4), ({"reason": "abort"}, 8)]),
    # prefill time without the queue: every request's prefill between 0.5 s and 1 s
    ("vllm", "prefill_time_p99_seconds", (), "round({}, 0.1)",
     _histogram("vllm:request_prefill_time_seconds", ("0.25", "0.5", "1", "2.5", "+Inf"), "1", 10),
     [({}, 1)]),
    ("vllm", "queue_time_p99_seconds", (), "round({}, 0.1)",
     _histogram("vllm:request_queue_time_seconds", ("0.25", "0.5", "1", "2.5", "+Inf"), "2.5", 10),
     [({}, 2.5)]),
    # p99 prompt length: every prompt between 2048 and 4096 tokens
    ("vllm", "prompt_tokens_p99", (), "round({})",
     _histogram("vllm:request_prompt_tokens", ("1024", "2048", "4096", "8192", "+Inf"), "4096", 10),
     [({}, 4076)]),
    # the KV blocks each server has, as labels of cache_config_info
    ("vllm", "kv_gpu_blocks", ("pod", "num_gpu_blocks", "block_size"), "{}",
     [{"series": f'vllm:cache_config_info{{{POD},block_size="16",num_gpu_blocks="2214",gpu_memory_utilization="0.9"}}',
       "values": "1x40"}],
     [({"pod": "vllm-server-0", "num_gpu_blocks": "2214", "block_size": "16"}, 1)]),
    # a vLLM scrape target down; another job's is not vLLM's
    ("vllm", "replicas_down", (), "{}",
     [{"series": 'up{namespace="llm",pod="vllm-server-0",job="vllm"}', "values": "0x40"},
      {"series": 'up{namespace="llm",pod="vllm-server-1",job="vllm"}', "values": "1x40"},
      {"series": 'up{namespace="llm",job="node-exporter"}', "values": "0x40"}],
     [({}, 1)]),
    # timeouts: the gateway's 504s
    ("vllm", "timeout_failures_per_min", (), "{}",
     [{"series": 'nginx_ingress_controller_requests{namespace="llm",ingress="vllm",status="504"}', "values": "0+3x40"},
      {"series": 'nginx_ingress_controller_requests{namespace="llm",ingress="vllm",status="200"}', "values": "0+90x40"}],
     [({}, 12)]),
    # Istio: 503s and 504s of the vLLM service as its proxies report them (reporter="destination")
    ("istio", "http_503_per_min", (), "{}",
     [{"series": 'istio_requests_total{namespace="llm",pod="vllm-server-0",reporter="destination",response_code="503"}',
       "values": "0+2x40"},
      {"series": 'istio_requests_total{namespace="llm",pod="vllm-server-0",reporter="source",response_code="503"}',
       "values": "0+5x40"},
      {"series": 'istio_requests_total{namespace="llm",pod="vllm-server-0",reporter="destination",response_code="200"}',
       "values": "0+50x40"}],
     [({}, 8)]),
    ("istio", "timeout_failures_per_min", (), "{}",
     [{"series": 'istio_requests_total{namespace="llm",pod="vllm-server-0",reporter="destination",response_code="200"}',
       "values": "0+50x40"}],
     [({}, 0)]),
]


@pytest.mark.parametrize(("profile", "signal", "by", "wrap", "series", "expected"), CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_the_signal_reads_what_vllm_exports(tmp_path, profile, signal, by, wrap, series, expected):
    rule = _record(profile, signal, by, wrap)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [{"name": "signals", "rules": [rule]}]}))
    test = {"rule_files": ["rules.yaml"], "evaluation_interval": "15s",
            "tests": [{"interval": "15s", "input_series": series,
                       "promql_expr_test": [{"expr": rule["record"], "eval_time": "8m",
                                             "exp_samples": [{"labels": _labels(rule["record"], labels), "value": value}
                                                             for labels, value in expected]}]}]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    result = subprocess.run([need_binary("promtool"), "test", "rules", str(tmp_path / "test.yaml")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, rule["expr"] + "\n" + result.stdout + result.stderr


def _labels(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{inner}}}" if inner else name


def test_failed_requests_say_abort_is_not_only_failures():
    help_text = build_catalog().get("failed_requests_per_min").help
    assert 'finished_reason="error"' in help_text and "client disconnects" in help_text
