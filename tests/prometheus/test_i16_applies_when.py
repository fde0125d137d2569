"""A playbook for a world that is not here (no canary version serving, no Docker Compose host
scraped) is "not applicable here" in triage — listed, not counted, never quiet — while a playbook
whose world is here but whose signal has no source is still "no source here" (exit 12)."""

from __future__ import annotations

import datetime as dt
import json

from click.testing import CliRunner

from runbook.cli import main
from tests.prometheus.data import STOCK_VLLM

QUIET = STOCK_VLLM.at - dt.timedelta(minutes=30)

CANARY = """\
name: canary-check
title: the canary's OOM failures
severity: P1
detect:
  signal: oom_failures_per_min
  above: 3
  labels: {{namespace: llm, version: "{{{{ params.canary }}}}"}}
  applies_when:
    signal: running_requests
    labels: {{namespace: llm{extra}}}
    because: no canary version is serving here
params: {{canary: v2}}
steps:
  - id: note
    uses: flow.note
    with: {{message: hi}}
"""


def triage(url: str, *paths: str) -> tuple[int, dict, str]:
    runner = CliRunner()
    doc = runner.invoke(main, ["triage", *paths, "--prometheus-url", url, "-o", "json", "--at", QUIET.isoformat()],
                        catch_exceptions=False)
    text = runner.invoke(main, ["triage", *paths, "--prometheus-url", url, "--at", QUIET.isoformat()],
                         catch_exceptions=False)
    assert doc.exit_code == text.exit_code
    return doc.exit_code, json.loads(doc.stdout), text.stdout


def test_no_canary_serving_is_not_applicable_and_not_counted(prometheus, tmp_path):
    book = tmp_path / "canary-check.yaml"
    book.write_text(CANARY.format(extra=', version: "{{ params.canary }}"'))
    code, doc, text = triage(prometheus.url, str(book))
    assert code == 0
    assert doc["no_source"] == [] and doc["quiet"] == []
    (absent,) = doc["not_applicable"]
    assert absent["playbook"] == "canary-check" and absent["state"] == "not_applicable"
    assert absent["reason"] == ("no canary version is serving here (no series of vllm:num_requests_running with "
                                "namespace=llm, version=v2)")
    assert text.splitlines()[0] == "All clear: nothing fires (0 playbooks evaluated, 1 not applicable here)"
    assert "not applicable here canary-check: no canary version is serving here" in text


def test_where_its_world_is_here_a_missing_source_still_says_so(prometheus, tmp_path):
    book = tmp_path / "canary-check.yaml"
    book.write_text(CANARY.format(extra=""))  # vLLM serves in llm: the playbook applies, its log counter is missing
    code, doc, _ = triage(prometheus.url, str(book))
    assert code == 12
    assert doc["not_applicable"] == []
    assert [f["playbook"] for f in doc["no_source"]] == ["canary-check"]
    assert "vllm_log_errors_total" in doc["no_source"][0]["missing_sources"]


def test_the_applies_when_signal_is_checked_against_the_catalog(tmp_path):
    book = tmp_path / "canary-check.yaml"
    book.write_text(CANARY.format(extra="").replace("signal: running_requests", "signal: runing_requests"))
    result = CliRunner().invoke(main, ["validate", str(book)], catch_exceptions=False)
    assert result.exit_code == 3
    assert "detect.applies_when.signal" in result.stderr and "running_requests" in result.stderr
