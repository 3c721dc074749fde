"""Every generated block of every document (README.md, docs/*.md, experiments/*/README.md) is
what scripts/readme_numbers.py generates from the committed metrics: a number edited by hand,
or metrics committed without regenerating the documents, fails here."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location(
        "readme_numbers", ROOT / "scripts" / "readme_numbers.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["readme_numbers"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    """Every generator's output, computed once for the module (one runs dvc, one the CLI)."""
    numbers = _script()
    return {name: make() for name, make in numbers.GENERATORS.items()}


def _cached(numbers, generated, monkeypatch):
    monkeypatch.setattr(numbers, "GENERATORS", {k: (lambda v=v: v) for k, v in generated.items()})


def test_the_documents_agree_with_the_committed_metrics(generated, monkeypatch):
    numbers = _script()
    _cached(numbers, generated, monkeypatch)
    assert numbers.main(["--check"]) == 0


def test_the_documents_are_the_readme_docs_and_experiments():
    numbers = _script()
    names = {p.relative_to(ROOT).as_posix() for p in numbers.documents()}
    assert {"README.md", "docs/results.md", "docs/reference.md", "experiments/hard/README.md"} <= names  # fmt: skip


def test_every_block_has_a_generator_and_every_generator_a_block():
    numbers = _script()
    used = set()
    for path in numbers.documents():
        text = path.read_text(encoding="utf-8")
        used |= {m.group(2) for m in numbers.BLOCK.finditer(text)}
        used |= {m.group(2) for m in numbers.INLINE.finditer(text)}
    assert used == set(numbers.GENERATORS)


def test_a_hand_edited_number_is_caught(tmp_path, monkeypatch, generated):
    numbers = _script()
    _cached(numbers, generated, monkeypatch)
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = json.loads((ROOT / "metrics" / "compat.json").read_text())["matrix"]["identification"]
    v1 = f"{100 * m['top1']['v1']['v1']:.1f}"
    assert f"| v1 | {v1} / " in text
    edited = text.replace(f"| v1 | {v1} / ", "| v1 | 99.9 / ", 1)
    _, changed = numbers.render(edited, dict(generated))
    assert changed == ["default-chain"]
    readme = tmp_path / "README.md"
    readme.write_text(edited, encoding="utf-8")
    monkeypatch.setattr(numbers, "documents", lambda: [readme])
    assert numbers.main(["--check"]) == 1
    assert numbers.main([]) == 0 and readme.read_text(encoding="utf-8") == text


def test_a_hand_edited_inline_value_is_caught():
    numbers = _script()
    text = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    value = numbers.sequence_source()
    marked = f"<!-- value: sequence-source -->{value}<!-- /value -->"
    assert marked in text
    _, changed = numbers.render(text.replace(marked, marked.replace(value, "1,050 x 300")))
    assert changed == ["sequence-source"]


def test_the_recorded_session_is_checked_against_the_metrics():
    """docs/first-session.txt (scripts/first_session.py) goes into the README only while every
    number of its verdicts equals metrics/compat.json's."""
    numbers = _script()
    text = (ROOT / "docs" / "first-session.txt").read_text(encoding="utf-8")
    assert numbers._session_checks(text) == []
    m = json.loads((ROOT / "metrics" / "compat.json").read_text())["matrix"]["identification"]
    shown = f"{m['top1']['v2']['v1']:.4f}"
    assert f"| {shown} |" in text
    wrong = numbers._session_checks(text.replace(f"| {shown} |", "| 0.9999 |"))
    assert wrong and "new" in wrong[0]


def test_each_paragon_is_named_by_its_kind_from_the_params(tmp_path, monkeypatch):
    """The default chain's paragons are the papers' (from scratch), experiments/paragons' the
    fine-tuned ones; the sentences read the kind from each pipeline's params, and a pipeline
    mixing the two is an error rather than a sentence that is half wrong."""
    numbers = _script()
    assert numbers._paragon_kind({"v2": "v2-scratch", "v3": "v3-scratch"}) == "papers'"
    assert (
        numbers._paragon_kind(
            {"v2": "v2-paragon", "v3": "v3-paragon"}, "experiments/paragons/params.yaml"
        )
        == "fine-tuned"
    )
    (tmp_path / "params.yaml").write_text(
        "train:\n  a: {method: independent, split: v2, parent: v1, init: parent}\n"
        "  b: {method: independent, split: v3}\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(numbers, "ROOT", tmp_path)
    with pytest.raises(SystemExit, match="mixes fine-tuned and from-scratch"):
        numbers._paragon_kind({"v2": "a", "v3": "b"})


def test_a_paragon_missing_from_train_is_an_error_not_a_kind():
    numbers = _script()
    with pytest.raises(SystemExit, match=r"evaluate.paragon: \['v3-scratchh'\] not in train"):
        numbers._paragon_kind({"v3": "v3-scratchh"})
    with pytest.raises(SystemExit, match="none not in train"):
        numbers._paragon_kind({})
