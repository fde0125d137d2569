"""Issue 15: the HTML report as a reader sees it — a drill's report screenshot in headless Chromium
(Debian `chromium`) at 1280 px: a real page with text, tables and the charts drawn inline."""

from __future__ import annotations

import shutil
import struct
import subprocess

import pytest

from runbook.drill.run import run_drill
from runbook.engine.operator import AssumeYes
from runbook.reporting import charts
from runbook.reporting.rca import write_report
from tests.conftest import missing_integration

WIDTH, HEIGHT = 1280, 3000
SECONDS = 120  # a headless start and one page load; far more than either needs


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    missing_integration("chromium is not installed (Debian package `chromium`), so the HTML report's "
                        "screenshot cannot be taken")


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    return struct.unpack(">II", data[16:24])


def test_17_the_html_report_screenshot_in_headless_chromium(tmp_path):
    browser = chromium()
    drill = run_drill("oom-surge", state=tmp_path / "state", operator=AssumeYes("alice"))
    report = write_report(drill.journal, tmp_path / "report" / "rca.html", fmt="html")
    shot = tmp_path / "rca.png"
    argv = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={WIDTH},{HEIGHT}", f"--screenshot={shot}",
            report.resolve().as_uri()]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=SECONDS, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail(f"chromium took over {SECONDS}s to screenshot {report}", pytrace=False)
    assert shot.is_file(), f"chromium wrote no screenshot (exit {done.returncode}): {done.stderr[-2000:]}"
    data = shot.read_bytes()
    assert png_size(data) == (WIDTH, HEIGHT)
    assert len(data) > 100_000, f"{len(data)} bytes: a near-empty page"

    from matplotlib import image

    pixels = image.imread(str(shot))[:, :, :3]
    ink = (pixels < 0.6).all(axis=2)  # dark: text, table rules, chart lines
    assert ink.mean() > 0.01, "the page is blank"
    assert ink[:300].mean() > 0.005, "no title or header table at the top of the page"
    gold = [int(charts.THRESHOLD_COLOR[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    assert (abs(pixels - gold) < 0.05).all(axis=2).sum() > 50, "no chart with its alert threshold on the page"
