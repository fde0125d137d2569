"""Fixtures for the parser tests: the real captures in ../shared/reference, through tests.conftest
(skipped when absent, a failure under RUNBOOK_REQUIRE_REFERENCE=1)."""

from __future__ import annotations

import re

import pytest

from tests.conftest import reference_text

H200_CAPTURE = "nvidia-smi/nvgpuexp-capture-linux-x86_64__nvidia-h200__590.48.01.txt"


def read_reference(relative: str) -> str:
    return reference_text(relative)


def capture_section(title: str) -> str:
    """The body of one `# <title>` section of the nvidia_gpu_exporter H200 capture."""
    text = read_reference(H200_CAPTURE)
    banner = "#" * 80
    pattern = re.compile(rf"{banner}\n# {re.escape(title)}\n# \$ [^\n]*\n{banner}\n(.*?)(?=\n{banner}\n|\Z)", re.S)
    match = pattern.search(text)
    assert match, f"section {title!r} not found in the capture"
    return match.group(1)


@pytest.fixture
def reference():
    return read_reference


@pytest.fixture
def section():
    return capture_section
