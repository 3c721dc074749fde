"""What the split's data expectations keep (docs/data-expectations.md): the suite committed in
each pipeline equal to the one the code generates from its params, the validation result and its
Data Docs written deterministically and readable offline, and a failure that names the
expectation and the offending rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from compat.data.expectations import (
    DOCS_FILE,
    RESULT_FILE,
    SUITE_FILE,
    DataValidationError,
    validate_split,
    write_validation,
)
from compat.data.scenarios import Chain, Incremental, TwoVersion
from compat.data.split import EvalSplit, SplitParams, build_split, build_validation
from compat.params import PARAMS_SECTIONS, read_section

REPO = Path(__file__).resolve().parents[2]


def _pipelines() -> list[Path]:
    """Every pipeline folder whose split stage keeps the suite (the root's, each experiment's)."""
    folders = [REPO, *sorted(p.parent for p in (REPO / "experiments").glob("*/dvc.yaml"))]
    out = []
    for folder in folders:
        split = yaml.safe_load((folder / "dvc.yaml").read_text())["stages"].get("split")
        if split is not None:
            assert {SUITE_FILE: {"cache": False}} in split["outs"], folder
            assert "gx/uncommitted" in split["outs"], folder
            out.append(folder)
    return out


@pytest.mark.parametrize("folder", _pipelines(), ids=lambda p: p.name)
def test_the_committed_suite_is_the_one_the_code_generates(folder: Path):
    from compat.data.suite import build_suite, suite_text

    params = read_section(
        folder / "params.yaml",
        "split",
        SplitParams,
        default=SplitParams(),
        sections=PARAMS_SECTIONS,
    )
    committed = (folder / SUITE_FILE).read_text(encoding="utf-8")
    assert committed == suite_text(build_suite(params)), (
        f"{folder / SUITE_FILE} is stale: run `python {REPO}/stages/split.py --suite-only` there"
    )
    # Ignored by git, like GX's own uncommitted/ folder: DVC keeps the results.
    assert "/uncommitted" in (folder / "gx" / ".gitignore").read_text().split()


def test_a_committed_suite_loads_back_whole():
    """The suite JSON names compat's own expectation types: they load (registered on import)."""
    from compat.data.suite import load_suite, suite_text

    text = (REPO / SUITE_FILE).read_text(encoding="utf-8")
    suite = load_suite(text)
    assert len(suite.expectations) == len(json.loads(text)["expectations"])  # none dropped
    assert suite_text(suite) == text


PARAMS = SplitParams(
    eval=EvalSplit(classes=12, pairs=60, open_set_fraction=0.25),
    validation=EvalSplit(classes=6, pairs=40),
    scenarios=[
        TwoVersion(kind="open-data", old="od-old", new="od-new"),
        Chain(kind="chain", fractions={"v1": 0.5, "v2": 1.0}),
        Incremental(kind="incremental", initial=3, per_task=2, tasks=2, memory=1),
    ],
)


def _split(source):
    manifests, ev = build_split(source, PARAMS)
    return manifests, ev, build_validation(source, PARAMS)


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_results_and_data_docs_are_written_and_deterministic(tiny_source, tmp_path: Path):
    for run in ("a", "b"):  # two validations of equal splits
        write_validation(validate_split(tiny_source, PARAMS, *_split(tiny_source)), tmp_path / run)
    a, b = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert sorted(a) == sorted(
        [SUITE_FILE, RESULT_FILE, DOCS_FILE, str(Path(DOCS_FILE).with_name("expectations.html"))]
    )
    assert a == b  # byte for byte: no run id, time or random element id
    result = json.loads(a[RESULT_FILE])
    assert result["success"] and result["statistics"]["unsuccessful_expectations"] == 0
    assert result["meta"] == {
        "great_expectations_version": result["meta"]["great_expectations_version"]
    }
    assert json.loads(a[SUITE_FILE])["name"] == "split"


def test_data_docs_load_nothing_from_elsewhere(tiny_source, tmp_path: Path):
    write_validation(validate_split(tiny_source, PARAMS, *_split(tiny_source)), tmp_path)
    docs = tmp_path / DOCS_FILE
    for page in (docs, docs.with_name("expectations.html")):
        html = page.read_text(encoding="utf-8")
        assert "http://" not in html and "https://" not in html and "<script" not in html
        assert "[od-new] no item shared with od-old (open-data)" in html  # the suite's words
    assert 'href="expectations.html"' in docs.read_text(encoding="utf-8")  # result -> suite


def test_a_failure_names_the_expectation_and_the_rows(tiny_source, tmp_path: Path):
    manifests, ev, va = _split(tiny_source)
    manifests["v1"].items[0] = "ghost/000"  # an item the source does not hold
    v2 = manifests["v2"]
    v2.labels[0] = "nowhere"  # a label v2 does not declare
    od = manifests["od-old"]
    od.items.clear(), od.labels.clear()  # a set without items (its classes still declared)
    with pytest.raises(DataValidationError) as info:
        validate_split(tiny_source, PARAMS, manifests, ev, va)
    message = str(info.value)
    assert info.value.exit_code == 4
    assert (
        "[training sets] every item exists in the source: 1 unexpected, e.g. ['ghost/000']"
        in message
    )
    assert (
        "[training sets] labels are classes their set declares: 1 unexpected, e.g. [['v2', 'nowhere']]"
        in message
    )
    assert "[training sets] every set has items: 1 missing, e.g. ['od-old']" in message
    assert "[training classes] every declared class has an item in its set" in message
    # The run is kept: the stage writes its result and Data Docs for a person to read.
    write_validation(info.value.validation, tmp_path)
    result = json.loads((tmp_path / RESULT_FILE).read_text())
    assert not result["success"]
    assert "every item exists in the source" in (tmp_path / DOCS_FILE).read_text(encoding="utf-8")


def test_great_expectations_stays_out_of_every_other_import(heavy_imports):
    """``import great_expectations`` costs about 3 s: only validating a split pays it."""
    modules = (
        "compat.data.split",
        "compat.data.expectations",
        "compat.data.rows",
        "compat.data.scenarios",
        "compat.params",
        "compat.stage",
        "compat.cli.main",
    )
    assert heavy_imports(*modules, heavy=("great_expectations",)) == []
