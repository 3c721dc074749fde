"""The real data and split stages, run as DVC runs them (a subprocess in the project folder)."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

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
    assert _run("split", tmp_path).returncode == 0
    assert (tmp_path / "splits/eval.json").read_bytes() == first


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
