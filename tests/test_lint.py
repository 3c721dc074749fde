"""The pre-commit hooks' checks run with the test suite, so CI (which runs the README's test
command) fails on a lint or format problem as a commit hook would: ``ruff check`` and ``ruff
format --check`` over the repository, with pyproject.toml's settings."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> str:
    path = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(path).exists():
        pytest.fail("ruff is not installed: pip install -e '.[dev]'")
    return path


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff_is_clean(command):
    r = subprocess.run(
        [_ruff(), *command, "--no-cache", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == 0, f"ruff {' '.join(command)}:\n{r.stdout}{r.stderr}"


def test_the_hooks_run_ruff_check_and_format():
    """What this test runs is what the hooks run: a hook dropped from .pre-commit-config.yaml
    would leave commits unchecked while CI still passed."""
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    entries = {hook["entry"].split()[0:2][1] for repo in config["repos"] for hook in repo["hooks"]
               if hook["entry"].startswith("ruff ")}  # fmt: skip
    assert entries == {"check", "format"}
