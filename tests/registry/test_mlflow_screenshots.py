"""scripts/screenshots.py refuses clearly (exit 3, how to install chromium) when it has no browser."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_missing_chromium_is_a_one_line_error(tmp_path):
    r = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "screenshots.py"), "--chromium", "no-such-browser",
         "--registry", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 3
    assert r.stderr.strip().splitlines() == [
        "screenshots: no-such-browser not found: install Debian's chromium "
        "(apt-get install chromium) or pass --chromium PATH"
    ]
    assert not list(tmp_path.iterdir())  # nothing started, nothing written


def test_no_registry_is_exit_3(tmp_path):
    r = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "screenshots.py"), "--chromium", sys.executable,
         "--registry", str(tmp_path / "none"), "--out", str(tmp_path / "img")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 3 and "no registry here" in r.stderr
    assert not (tmp_path / "img").exists()
