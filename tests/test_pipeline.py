"""dvc.yaml and params.yaml name the same versions (DESIGN.md: one name four times)."""

from pathlib import Path

import yaml

from compat.params import load_params

REPO = Path(__file__).resolve().parents[1]


def test_every_trained_version_has_its_stage_with_the_right_deps():
    params = load_params(REPO / "params.yaml")
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    train_stages = {
        name.removeprefix("train-"): s for name, s in stages.items() if name.startswith("train-")
    }
    assert set(train_stages) == set(params.train)
    for version, cfg in params.train.items():
        stage = train_stages[version]
        assert stage["cmd"].split()[:3] == ["python", "stages/train.py", version]
        assert stage["params"] == [f"train.{version}"]
        files = ("weights.safetensors", "card.json", "train_metrics.json")
        assert stage["outs"] == [f"models/{version}/{f}" for f in files]
        deps = set(stage["deps"])
        assert f"splits/{cfg.split or version}.json" in deps
        parents = {d for d in deps if d.startswith("models/")}
        expected = {f"models/{cfg.parent}/{f}" for f in files[:2]} if cfg.parent else set()
        assert parents == expected


def test_evaluate_stage_depends_on_every_evaluated_version():
    params = load_params(REPO / "params.yaml")
    stage = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["evaluate"]
    evaluated = set(params.evaluate.chain) | set(params.evaluate.paragon.values())
    weights = {d.split("/")[1] for d in stage["deps"] if d.endswith("/weights.safetensors")}
    assert weights == evaluated
    for folder in params.evaluate.forward.values():
        assert folder in stage["deps"]
    assert stage["params"] == ["evaluate"]


def test_no_stage_writes_to_the_registry():
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    for name, stage in stages.items():
        stage = stage.get("do", stage)  # foreach stages keep their body under "do"
        assert "compat register" not in stage["cmd"] and "compat promote" not in stage["cmd"], name
        outs = [o if isinstance(o, str) else next(iter(o)) for o in stage.get("outs", [])]
        assert not any(o.startswith("registry") for o in outs), name
