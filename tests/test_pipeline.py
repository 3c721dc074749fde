"""dvc.yaml and params.yaml name the same versions (docs/design.md: one name four times).

Checked for the default pipeline at the root and for experiments/bict (the lambda sweep), whose
stages run the same scripts from its own folder.
"""

from pathlib import Path

import pytest
import yaml

from compat.params import load_params

REPO = Path(__file__).resolve().parents[1]
PIPELINES = {"root": (REPO, ""), "bict": (REPO / "experiments" / "bict", "../../")}
pipelines = pytest.mark.parametrize("pipeline", list(PIPELINES))


@pipelines
def test_every_trained_version_has_its_stage_with_the_right_deps(pipeline):
    folder, up = PIPELINES[pipeline]
    params = load_params(folder / "params.yaml")
    stages = yaml.safe_load((folder / "dvc.yaml").read_text())["stages"]
    train_stages = {
        name.removeprefix("train-"): s for name, s in stages.items() if name.startswith("train-")
    }
    assert set(train_stages) == set(params.train)
    for version, cfg in params.train.items():
        stage = train_stages[version]
        assert stage["cmd"].split()[:3] == ["python", f"{up}stages/train.py", version]
        assert stage["params"] == [f"train.{version}"]
        files = ("weights.safetensors", "card.json", "train_metrics.json")
        assert stage["outs"] == [f"models/{version}/{f}" for f in files]
        deps = set(stage["deps"])
        assert f"splits/{cfg.split or version}.json" in deps
        parents = {d for d in deps if d.startswith("models/")}
        expected = {f"models/{cfg.parent}/{f}" for f in files[:2]} if cfg.parent else set()
        assert parents == expected


@pipelines
def test_evaluate_stage_depends_on_every_evaluated_version(pipeline):
    folder, _ = PIPELINES[pipeline]
    params = load_params(folder / "params.yaml")
    stage = yaml.safe_load((folder / "dvc.yaml").read_text())["stages"]["evaluate"]
    evaluated = set(params.evaluate.chain) | set(params.evaluate.paragon.values())
    weights = {d.split("/")[1] for d in stage["deps"] if d.endswith("/weights.safetensors")}
    assert weights == evaluated
    for folder in params.evaluate.forward.values():
        assert folder in stage["deps"]
    assert stage["params"] == ["evaluate"]


@pipelines
def test_no_stage_writes_to_the_registry(pipeline):
    folder, _ = PIPELINES[pipeline]
    stages = yaml.safe_load((folder / "dvc.yaml").read_text())["stages"]
    for name, stage in stages.items():
        stage = stage.get("do", stage)  # foreach stages keep their body under "do"
        assert "compat register" not in stage["cmd"] and "compat promote" not in stage["cmd"], name
        outs = [o if isinstance(o, str) else next(iter(o)) for o in stage.get("outs", [])]
        assert not any(o.startswith("registry") for o in outs), name


def _load_summarize():
    import importlib.util

    path = REPO / "experiments" / "bict" / "summarize.py"
    spec = importlib.util.spec_from_file_location("bict_summarize", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bict_summary_reads_each_finished_experiment_once_sorted_by_lambda():
    summarize = _load_summarize()

    def rev(name, lam, backward=None):
        metrics = {}
        if backward is not None:
            cell = {k: 0.5 for k in ("old", "backward", "forward", "self")} | {"backward": backward}
            metrics = {summarize.METRICS: {"data": {"v2": {"identification": {"top1": cell, "mAP": cell}}}}}  # fmt: skip
        params = {summarize.PARAMS: {"data": {"train": {"v2": {"method_params": {"lam": lam}}}}}}
        return {"rev": "0" * 40, "name": name, "data": {"metrics": metrics, "params": params}}

    show = [
        {"rev": "workspace", "data": {}, "experiments": None},
        {**rev("main", 1.0, 0.30), "experiments": [
            {"revs": [rev("b", 3.0, 0.25)]},
            {"revs": [rev("a", 0.0, 0.01)]},
            {"revs": [rev("queued", 0.3)]},  # no metrics yet: skipped
        ]},
    ]  # fmt: skip
    rows = summarize.rows_from(show)
    assert [r["lam"] for r in rows] == [0.0, 1.0, 3.0]
    assert [r["backward_top1"] for r in rows] == pytest.approx([1.0, 30.0, 25.0])
    assert rows[1]["name"] == "main" and rows[1]["forward_mAP"] == pytest.approx(50.0)


EXPERIMENTS = sorted(p.parent for p in REPO.glob("experiments/*/dvc.yaml"))


@pytest.mark.parametrize(
    "folder", [REPO, *EXPERIMENTS], ids=lambda p: str(p.relative_to(REPO)) or "root"
)
def test_each_dvc_project_lists_only_its_own_stages(folder: Path):
    """The root project is the root pipeline only, and each experiment folder is a DVC project of
    its own: otherwise the root's `dvc dag` / `dvc status` / `dvc exp show` list every
    experiment's stages (hundreds of lines), and `dvc repro` at the root could reach them."""
    from dvc.repo import Repo

    with Repo(str(folder)) as repo:
        assert Path(repo.root_dir) == folder
        stages = list(repo.index.stages)
    assert stages, f"{folder}: no stages"
    assert {Path(s.path) for s in stages} == {folder / "dvc.yaml"}
    names = {s.name for s in stages}
    declared = yaml.safe_load((folder / "dvc.yaml").read_text())["stages"]
    # foreach stages appear once per item (name@key)
    assert {n.partition("@")[0] for n in names} == set(declared)


@pytest.mark.parametrize("folder", EXPERIMENTS, ids=lambda p: p.name)
def test_experiment_projects_send_no_analytics_and_ignore_their_outputs(folder: Path):
    import configparser

    config = configparser.ConfigParser()
    config.read(folder / ".dvc" / "config")
    assert config.get("core", "analytics") == "false"  # as the root's .dvc/config
    # the root .gitignore anchors /data/, /splits/, ... at the root: each project ignores its own
    ignored = (folder / ".gitignore").read_text().split()
    for out in ("data", "splits", "models", "cache"):
        assert f"/{out}" in ignored or f"/{out}/" in ignored, (folder.name, out)
