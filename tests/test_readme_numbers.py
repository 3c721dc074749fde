"""The README's result tables and notes are what scripts/readme_numbers.py generates from the
committed metrics: a number edited by hand, or metrics committed without regenerating the
README, fails here."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location(
        "readme_numbers", ROOT / "scripts" / "readme_numbers.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["readme_numbers"] = module
    spec.loader.exec_module(module)
    return module


def test_the_readme_agrees_with_the_committed_metrics():
    numbers = _script()
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    _, changed = numbers.render(text)
    assert changed == [], f"run python scripts/readme_numbers.py: {changed} differ"
    assert numbers.main(["--check"]) == 0


def test_every_block_has_a_generator_and_every_generator_a_block():
    numbers = _script()
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    names = [m.group(2) for m in numbers.BLOCK.finditer(text)]
    assert sorted(names) == sorted(numbers.GENERATORS)


def test_a_hand_edited_number_is_caught(tmp_path, monkeypatch):
    numbers = _script()
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = json.loads((ROOT / "metrics" / "compat.json").read_text())["matrix"]["identification"]
    v1 = f"{100 * m['top1']['v1']['v1']:.1f}"
    assert f"| v1 | {v1} / " in text
    edited = text.replace(f"| v1 | {v1} / ", "| v1 | 99.9 / ", 1)
    _, changed = numbers.render(edited)
    assert changed == ["default-chain"]
    readme = tmp_path / "README.md"
    readme.write_text(edited, encoding="utf-8")
    monkeypatch.setattr(numbers, "README", readme)
    assert numbers.main(["--check"]) == 1
    assert numbers.main([]) == 0 and readme.read_text(encoding="utf-8") == text
