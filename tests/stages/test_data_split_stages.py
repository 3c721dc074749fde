"""The real data and split stages, run as DVC runs them (a subprocess in the project folder)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GX = Path("gx")

PARAMS = """
data:
  kind: embedded
  classes: 30
  images_per_class: 4
  size: 16
  workers: 1
  cache: {cache}
split:
  eval:
    classes: 10
    pairs: 40
  scenarios:
    - kind: chain
      fractions: {{v1: 0.5, v2: 1.0}}
"""


def _run(stage: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "stages" / f"{stage}.py")],
        cwd=cwd,
        capture_output=True,
        text=True,
    )


@pytest.mark.slow  # ~12 s: both stages on the embedded data (the default run runs both stages on a folder source in tests/stages/test_own_images.py)
def test_data_then_split(tmp_path: Path):
    (tmp_path / "params.yaml").write_text(PARAMS.format(cache=tmp_path / "cache"))
    r = _run("data", tmp_path)
    assert r.returncode == 0, r.stderr
    assert "120 items in 30 classes" in r.stdout
    r = _run("split", tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "splits").iterdir()) == [
        "eval.json",
        "v1.json",
        "v2.json",
    ]
    v2 = json.loads((tmp_path / "splits/v2.json").read_text())
    assert len(v2["classes"]) == 20 and v2["source_fingerprint"]
    first = (tmp_path / "splits/eval.json").read_bytes()
    # The data expectations' suite, result and Data Docs (docs/data-expectations.md).
    kept = [GX / "expectations/split.json", GX / "uncommitted/validations/split.json"]
    kept += [
        GX / "uncommitted/data_docs/index.html",
        GX / "uncommitted/data_docs/expectations.html",
    ]
    outputs = {p: (tmp_path / p).read_bytes() for p in kept}
    assert json.loads(outputs[kept[1]])["success"]
    assert "data expectations met" in r.stdout
    assert _run("split", tmp_path).returncode == 0
    assert (tmp_path / "splits/eval.json").read_bytes() == first
    # a second run writes the same bytes: DVC sees no change
    assert {p: (tmp_path / p).read_bytes() for p in kept} == outputs


def test_suite_only_writes_the_suite_without_data(tmp_path: Path):
    """``--suite-only`` refreshes the committed suite: no data read, no split written."""
    (tmp_path / "params.yaml").write_text(PARAMS.format(cache=tmp_path / "cache"))
    r = subprocess.run(
        [sys.executable, str(REPO / "stages" / "split.py"), "--suite-only"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    suite = json.loads((tmp_path / GX / "expectations/split.json").read_text())
    assert suite["name"] == "split" and suite["expectations"]
    assert not (tmp_path / "splits").exists() and not (tmp_path / GX / "uncommitted").exists()


def test_bad_params_fail_with_exit_4_and_one_line(tmp_path: Path):
    (tmp_path / "params.yaml").write_text("data:\n  kind: embedded\n  clases: 3\n")
    r = _run("data", tmp_path)
    assert r.returncode == 4
    assert r.stderr.strip().splitlines() == [
        "error: params.yaml: data.clases: Extra inputs are not permitted"
    ]
    assert not (tmp_path / "data" / "source.json").exists()


def test_split_without_data_is_not_found(tmp_path: Path):
    (tmp_path / "params.yaml").write_text("{}\n")
    r = _run("split", tmp_path)
    assert r.returncode == 3
    assert "run the data stage first" in r.stderr


def test_split_stage_writes_the_validation_set(in_tmp: Path, capsys):
    """In process: split.validation writes splits/validation.json, disjoint from the rest."""
    import importlib.util

    import yaml

    from compat.data.config import EmbeddedData
    from compat.data.sources import build_source

    build_source(
        EmbeddedData(classes=30, images_per_class=4, size=16, workers=1, cache=str(in_tmp / "c")),
        in_tmp / "data",
    )
    params = yaml.safe_load(PARAMS.format(cache=in_tmp / "c"))
    params["split"]["validation"] = {"classes": 6, "pairs": 20}
    (in_tmp / "params.yaml").write_text(yaml.safe_dump(params))
    spec = importlib.util.spec_from_file_location("split_stage", REPO / "stages" / "split.py")
    stage = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stage)
    assert stage.main([]) == 0
    assert "split: validation: 24 items in 6 classes (disjoint from training and eval)" in (
        capsys.readouterr().out
    )
    splits = {p.stem: json.loads(p.read_text()) for p in (in_tmp / "splits").iterdir()}
    assert sorted(splits) == ["eval", "v1", "v2", "validation"]
    val = set(splits["validation"]["labels"])
    assert not val & set(splits["eval"]["labels"]) and not val & set(splits["v2"]["classes"])
    assert len(splits["v2"]["classes"]) == 30 - 10 - 6


def test_a_failed_expectation_stops_the_split_with_exit_4(in_tmp: Path, capsys, monkeypatch):
    """In process: a split breaking an expectation writes no manifest, exits 4 naming the
    expectation and the offending rows, and keeps the result and its Data Docs to read."""
    import importlib.util

    import yaml

    import compat.data.split as split_module
    from compat.data.config import EmbeddedData
    from compat.data.sources import build_source

    build_source(
        EmbeddedData(classes=30, images_per_class=4, size=16, workers=1, cache=str(in_tmp / "c")),
        in_tmp / "data",
    )
    (in_tmp / "params.yaml").write_text(yaml.safe_dump(yaml.safe_load(PARAMS.format(cache="c"))))
    build = split_module.build_split

    def broken(source, params):  # v1 names an image the source does not hold
        manifests, ev = build(source, params)
        manifests["v1"].items[0] = "ghost/000"
        return manifests, ev

    monkeypatch.setattr(split_module, "build_split", broken)
    spec = importlib.util.spec_from_file_location("split_stage", REPO / "stages" / "split.py")
    stage = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stage)
    assert stage.main([]) == 4
    err = capsys.readouterr().err
    assert (
        "[training sets] every item exists in the source: 1 unexpected, e.g. ['ghost/000']" in err
    )
    assert "Data Docs: gx/uncommitted/data_docs/index.html" in err
    assert not (in_tmp / "splits").exists()
    result = json.loads((in_tmp / GX / "uncommitted/validations/split.json").read_text())
    assert not result["success"]
