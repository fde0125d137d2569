"""No setting is accepted and then ignored: retired config sections are refused, saying where the setting
lives, and a command takes only the flags it reads (issue 14)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from runbook.config import SECTIONS, load_config
from runbook.errors import InvalidInput

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("section, where", [("safety", "guard:"), ("playbooks", "--playbooks")])
def test_a_retired_section_is_refused_with_where_its_setting_lives(tmp_path, section, where):
    file = tmp_path / "runbook.yaml"
    file.write_text(f"{section}:\n  anything: 1\n")
    with pytest.raises(InvalidInput) as info:
        load_config(file)
    message = str(info.value)
    assert f"unknown config section `{section}`" in message and where in message and f"{file}:1:1" in message


def test_every_section_accepted_is_read_somewhere():
    source = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "runbook").rglob("*.py"))
    unread = [name for name in SECTIONS
              if f'section_model("{name}"' not in source and f'.section("{name}"' not in source]
    assert not unread, f"config sections accepted but read by nothing: {unread}"


@pytest.mark.parametrize("flag", [["--kubeconfig", "kc"], ["--context", "prod"], ["--in-cluster"]])
def test_signals_takes_no_cluster_flags_it_would_ignore(flag):
    from runbook.cli import main

    result = CliRunner().invoke(main, ["signals", *flag])
    assert result.exit_code == 2 and "No such option" in result.output, result.output
