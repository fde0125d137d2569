"""Issue 13, finding 5a: every YAML file runbook reads goes through one safe loader, so a billion
laughs, a huge file or a duplicate key is refused by name, in any file, before anything uses it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from runbook.backends.kubernetes.connect import connect
from runbook.config import EMPTY, load_config
from runbook.sim.scenario import load_scenario, parse_scenario
from runbook.errors import InvalidInput
from runbook.files import yamlsource
from runbook.loading.validation import load_playbook_file
from runbook.actions import load_builtin

SCENARIO = """\
name: tiny
playbook: oom-surge
expect: resolved
description: a tiny world
start: 2026-03-14T03:12:07Z
alert: {name: Test}
"""

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: only, context: {cluster: c, user: u}}]
"""


def laughs(indent: str = "  ") -> str:
    """Nine levels of nine aliases: a few hundred bytes that expand to 387 million values."""
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 10)]
    return "".join(f"{indent}{line}\n" for line in lines)


def refused_by_the_alias_limit(message: str, file: Path) -> None:
    assert str(file) in message, message
    assert f"more than {yamlsource.MAX_NODES:,} values" in message and "aliases" in message, message


def test_f5_a_billion_laughs_under_a_scenario_s_params_is_refused(tmp_path):
    file = tmp_path / "laughs.yaml"
    file.write_text(SCENARIO + "params:\n" + laughs())
    assert file.stat().st_size < 1024
    with pytest.raises(InvalidInput) as info:
        load_scenario(file)
    refused_by_the_alias_limit(str(info.value), file)


def test_f5_a_billion_laughs_in_a_kubeconfig_is_refused(tmp_path):
    file = tmp_path / "kubeconfig"
    file.write_text(KUBECONFIG + "preferences:\n" + laughs())
    with pytest.raises(InvalidInput) as info:
        connect(EMPTY, kubeconfig=str(file)).close()
    refused_by_the_alias_limit(str(info.value), file)
    assert "kubeconfig" in str(info.value)


def test_f5_a_billion_laughs_in_a_config_file_is_refused(tmp_path):
    file = tmp_path / "runbook.yaml"
    file.write_text("webhook:\n" + laughs())
    with pytest.raises(InvalidInput) as info:
        load_config(file)
    refused_by_the_alias_limit(str(info.value), file)


def test_f5_a_kubeconfig_with_a_key_written_twice_is_refused(tmp_path):
    # kubectl and the Python client would each pick one of the two; runbook must not guess.
    file = tmp_path / "kubeconfig"
    file.write_text(KUBECONFIG + "contexts: [{name: other, context: {cluster: c, user: u}}]\n")
    with pytest.raises(InvalidInput) as info:
        connect(EMPTY, kubeconfig=str(file)).close()
    assert str(file) in str(info.value) and "key `contexts` appears twice" in str(info.value)


def oversized(file: Path, prefix: str) -> Path:
    # Comments: the parser would take its time, but the file must be refused before parsing.
    filler = ("# " + "x" * 1021 + "\n").encode()
    with file.open("wb") as out:
        out.write(prefix.encode())
        for _ in range(yamlsource.MAX_BYTES // len(filler) + 1):
            out.write(filler)
    return file


def test_f5_a_file_over_the_size_limit_is_refused_by_name(tmp_path):
    limit = f"{yamlsource.MAX_BYTES // 2**20} MiB"
    scenario = oversized(tmp_path / "big.yaml", SCENARIO)
    with pytest.raises(InvalidInput, match=limit) as info:
        load_scenario(scenario)
    assert str(scenario) in str(info.value)
    config = oversized(tmp_path / "runbook.yaml", "webhook: {}\n")
    with pytest.raises(InvalidInput, match=limit):
        load_config(config)
    kubeconfig = oversized(tmp_path / "kubeconfig", KUBECONFIG)
    with pytest.raises(InvalidInput, match=limit):
        connect(EMPTY, kubeconfig=str(kubeconfig))
    result = load_playbook_file(oversized(tmp_path / "pb.yaml", "name: pb\n"), load_builtin())
    assert result.playbook is None and any(limit in p.message for p in result.problems)


def test_f5_the_scenario_keeps_yaml_1_2_booleans_and_refuses_duplicates():
    text = SCENARIO.replace("alert: {name: Test}\n", "") + textwrap.dedent("""\
        alert: {name: Test, labels: {enabled: yes, mode: off}}
        signals: [{name: s, series: [{points: [[0, 1]]}]}]
        reactions:
          - on: {node_pid_killed: {node: n, pid: 4}}
            effects: [{signal: s, value: 0}]
        nodes: [{name: n}]
        """)
    scenario = parse_scenario(text, "tiny.yaml")
    assert scenario.alert.labels == {"enabled": "yes", "mode": "off"}
    assert scenario.reactions[0].on.kind == "node_pid_killed"  # `on:` stays a key, not True
    with pytest.raises(InvalidInput, match=r"tiny\.yaml:7:1 .*\n.*key `name` appears twice"):
        parse_scenario(SCENARIO + "name: again\n", "tiny.yaml")
