"""dvc.yaml and params.yaml name the same versions (docs/design.md: one name four times).

Checked for the default pipeline at the root, experiments/adapters, experiments/glyphs and
experiments/paragons; experiments/bict (the lambda sweep: one train,
upgrade and evaluate stage per point, foreach) is checked the same way by tests/test_bict.py.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from compat.params import load_params

REPO = Path(__file__).resolve().parents[1]
PIPELINES = {
    "root": (REPO, ""),
    "adapters": (REPO / "experiments" / "adapters", "../../"),
    "glyphs": (REPO / "experiments" / "glyphs", "../../"),
    "paragons": (REPO / "experiments" / "paragons", "../../"),
}
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
def test_adapt_stage_and_evaluate_name_the_maps_of_the_adapt_section(pipeline):
    """One ``adapt`` stage fits every map of params.yaml ``adapt``: its outs are the maps'
    folders, its deps every version a map joins; ``evaluate-adapters`` depends on every map of
    ``evaluate.adapters`` and every version its cells read (the maps' and BCT's, for the
    recovery)."""
    folder, up = PIPELINES[pipeline]
    params = load_params(folder / "params.yaml")
    stages = yaml.safe_load((folder / "dvc.yaml").read_text())["stages"]
    if not params.adapt:
        assert "adapt" not in stages
        return
    stage = stages["adapt"]
    assert stage["cmd"].split()[:2] == ["python", f"{up}stages/adapt.py"]
    assert stage["params"] == ["adapt"]
    maps = [o for o in stage["outs"] if isinstance(o, str)]
    assert maps == [f"maps/{name}" for name in params.adapt]
    joined = {v for cfg in params.adapt.values() for v in (cfg.new, cfg.old)}
    models = {d for d in stage["deps"] if d.startswith("models/")}
    assert models == {
        f"models/{v}/{f}" for v in joined for f in ("card.json", "weights.safetensors")
    }
    assert {"metrics/adapters.json": {"cache": False}} in stage["outs"]
    assert "metrics" not in stage
    if not params.evaluate.adapters:
        assert "evaluate-adapters" not in stages
        return
    adapted = stages["evaluate-adapters"]
    assert adapted["cmd"].split()[:2] == ["python", f"{up}stages/evaluate_adapters.py"]
    assert adapted["params"] == ["evaluate"]
    assert adapted["outs"] == [{"metrics/adapted.json": {"cache": False}}]
    for name, path in params.evaluate.adapters.items():
        assert path == f"maps/{name}" and name in params.adapt
        assert path in adapted["deps"]
    weights = {d.split("/")[1] for d in adapted["deps"] if d.endswith("/weights.safetensors")}
    bct_of = {**{p: v for v, p in params.evaluate.paragon.items()}, **params.evaluate.counterpart}
    needed = set()
    for name in params.evaluate.adapters:
        cfg = params.adapt[name]
        needed |= {cfg.new, cfg.old} | ({bct_of[cfg.new]} if cfg.new in bct_of else set())
    assert weights == needed
    # A gallery map of evaluate.forward on a version an adapter serves: the served pair's curve.
    served = {params.adapt[name].new for name in params.evaluate.adapters}
    for version, path in params.evaluate.forward.items():
        assert (path in adapted["deps"]) == (version in served), (version, path)


@pipelines
def test_no_stage_writes_to_the_registry(pipeline):
    folder, _ = PIPELINES[pipeline]
    stages = yaml.safe_load((folder / "dvc.yaml").read_text())["stages"]
    for name, stage in stages.items():
        stage = stage.get("do", stage)  # foreach stages keep their body under "do"
        assert "compat register" not in stage["cmd"] and "compat promote" not in stage["cmd"], name
        outs = [o if isinstance(o, str) else next(iter(o)) for o in stage.get("outs", [])]
        assert not any(o.startswith("registry") for o in outs), name


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


# -- dvc plots and dvc exp show on the committed outputs (issue 15.5) --------------------------


def _dvc() -> str:
    found = Path(sys.executable).with_name("dvc")
    return str(found) if found.is_file() else (shutil.which("dvc") or "dvc")


def _top_level_plots() -> dict[str, dict]:
    """dvc.yaml's top-level ``plots``: id -> its definition ({} for a bare path)."""
    out = {}
    for entry in yaml.safe_load((REPO / "dvc.yaml").read_text())["plots"]:
        if isinstance(entry, str):
            out[entry] = {}
        else:
            ((name, definition),) = entry.items()
            out[name] = definition or {}
    return out


@pytest.fixture
def committed(tmp_path: Path) -> Path:
    """A scratch copy of the pipeline files and the committed outputs (dvc may write into
    .dvc/tmp), as a git repository with one commit (dvc exp show needs a baseline)."""
    for name in (
        "dvc.yaml",
        "params.yaml",
        ".dvcignore",
        ".dvc/config",
        "plots",
        "metrics",
        "vendor",
    ):
        src, dst = REPO / name, tmp_path / name
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dst)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "outputs"]):
        subprocess.run(cmd, cwd=tmp_path, check=True, env=env, capture_output=True)
    return tmp_path


def test_plots_are_declared_for_every_heatmap_backfill_curve_and_trained_version():
    params = load_params(REPO / "params.yaml")
    plots = _top_level_plots()
    for protocol in params.evaluate.protocols:
        assert f"plots/heatmap_{protocol}.png" in plots
        for new in params.evaluate.forward:
            assert f"plots/backfill/{new}_{protocol}.json" in plots
    assert {f"plots/backfill_{new}.png" for new in params.evaluate.forward} <= set(plots)
    assert set(plots["training loss"]["y"]) == {
        f"models/{v}/train_metrics.json" for v in params.train
    }


def test_every_declared_plot_renders(committed: Path):
    """``dvc plots show --json`` on the committed outputs reports no error and data for
    every declared plot. Training curves are stage outputs (not committed): the copy gets a
    train_metrics.json per version from the training loop's own writer."""
    from compat.train.progress import write_metrics

    plots = _top_level_plots()
    for i, path in enumerate(plots["training loss"]["y"]):
        rows = [
            {"epoch": e, "loss": 5.0 - e - i / 10, "lr": 1e-3, "seconds": 1.0, "images_per_s": 9.0}
            for e in (1, 2)
        ]
        write_metrics(committed / path, rows)
    r = subprocess.run([_dvc(), "plots", "show", "--json"], cwd=committed, capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)
    assert shown.get("errors") in (None, []), shown.get("errors")
    assert "could not find provided field" not in r.stderr, r.stderr
    rendered = set(shown["data"])
    for name, definition in plots.items():
        if name == "plots/cmc":
            assert any(k.startswith("plots/cmc/") for k in rendered)
        else:
            assert name in rendered, name
        for entry in shown["data"].get(name, []):
            if entry["type"] == "vega":
                fields = set(entry["content"]["data"]["values"][0])
                ys = definition.get("y", [])
                ys = [ys] if isinstance(ys, str) else list(ys) if isinstance(ys, list) else []
                assert {definition["x"], *ys} <= fields or not ys, (name, fields)


def _readme_exp_show() -> str:
    text = (REPO / "docs" / "experiments.md").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if line.startswith("dvc exp show --hide-queued")]
    assert len(lines) == 1, lines
    return lines[0]


def test_readme_exp_show_example_selects_real_columns(committed: Path):
    """docs/experiments.md's ``dvc exp show`` line, run as written, keeps the columns it promises: a
    metric column and the swept params, with values in the workspace row."""
    import shlex

    argv = shlex.split(_readme_exp_show())
    r = subprocess.run(
        [_dvc(), *argv[1:]],
        cwd=committed,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "300"},
    )
    assert r.returncode == 0, r.stderr
    header = next(line for line in r.stdout.splitlines() if "Experiment" in line).split()
    keep = re.compile(argv[argv.index("--keep") + 1])
    assert header[0] == "Experiment" and all(keep.search(c) for c in header)
    assert any(c.endswith(".on_v1") for c in header), header  # metrics, not only params
    assert any(c.startswith("train.") for c in header), header
    workspace = next(line for line in r.stdout.splitlines() if line.split()[:1] == ["workspace"])
    assert len(workspace.split()) == len(header)  # a value under every column


METRICS_SHOW_COLUMNS = 200


def test_dvc_metrics_show_fits_200_columns(committed: Path):
    """``dvc metrics show`` on the committed outputs, run as a user runs it, prints the headline
    numbers in at most 200 columns: what is not a headline number is a data file (an ``outs``
    entry) or a plot, never a ``metrics`` entry (metrics/adapters.json once made it 2,407
    columns wide)."""
    r = subprocess.run(
        [_dvc(), "metrics", "show"],
        cwd=committed,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "1000"},  # no terminal wrapping hides a wide table
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any("headline.json" in line for line in lines), r.stdout
    widest = max(len(line) for line in lines)
    assert widest <= METRICS_SHOW_COLUMNS, f"{widest} columns:\n{r.stdout}"
