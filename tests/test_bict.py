"""experiments/bict, the BiCT lambda sweep (issue 28 item 3).

* The sweep's points (params.yaml ``upgrade``; one v2 version each) are named the same way in
  params.yaml ``train``, evaluate.yaml and dvc.yaml's per-point stages, as DVC expands them.
* experiments/bict/results/lambda.md and lambda.json are what summarize.py derives from the committed per-point
  metrics (like tests/test_readme_numbers.py for the README): a hand edit, or metrics committed
  without re-running summarize, fails here. Skipped only while no point's metrics are committed
  (before the first full `dvc repro` of the sweep).
* summarize.py's rules (the peak against the seed spread, forward above backward, psi refused)
  and the README's row 7 on synthetic metrics.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
import yaml

from compat.evaluate.config import read_evaluate_section
from compat.params import load_params

REPO = Path(__file__).resolve().parents[1]
BICT = REPO / "experiments" / "bict"
LAMBDAS = [0.0, 0.3, 1.0, 3.0, 10.0, 30.0]
SEEDED = {3.0, 10.0, 30.0}  # three seeds where the peak and forward vs backward are judged


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def summarize():
    return _load("bict_summarize", BICT / "summarize.py")


def _points() -> list[str]:
    return list(yaml.safe_load((BICT / "params.yaml").read_text())["upgrade"])


# -- the points, named the same everywhere -----------------------------------------------------


def test_params_declare_the_sweep():
    params = load_params(BICT / "params.yaml")  # every section validated
    points = list(params.upgrade)
    assert set(params.train) == {"v1", *points}
    v1 = params.train["v1"]
    assert v1.method == "independent" and v1.parent is None
    grid: dict[float, list[int]] = {}
    for name in points:
        cfg, psi = params.train[name], params.upgrade[name]
        assert (cfg.method, cfg.parent, cfg.split) == ("bict", "v1", "v2"), name
        assert cfg.method_params["form"] == "regression", name
        assert psi.from_ == "v1" and psi.seed == cfg.seed, name
        assert cfg.seed != v1.seed, name  # a shared initialisation leaks compatibility
        lam = float(cfg.method_params["lam"])
        assert name == f"v2-lam{lam:g}-s{cfg.seed}".replace(".", "p"), name
        grid.setdefault(lam, []).append(cfg.seed)
    assert sorted(grid) == LAMBDAS
    for lam, seeds in grid.items():
        assert len(set(seeds)) == len(seeds) == (3 if lam in SEEDED else 1), lam
    assert len(points) == 12


def test_every_point_has_its_evaluate_section():
    sections = yaml.safe_load((BICT / "evaluate.yaml").read_text())
    points = _points()
    assert list(sections) == points
    for name in points:
        cfg = read_evaluate_section(BICT / "evaluate.yaml", name)  # validated
        assert cfg.chain == ["v1", name]
        assert cfg.forward == {name: f"models/{name}/upgrade"}
        assert cfg.protocols == ["identification"] and not cfg.paragon


def test_per_point_stages_iterate_over_the_points():
    stages = yaml.safe_load((BICT / "dvc.yaml").read_text())["stages"]
    for name in ("train-v2", "upgrade", "evaluate"):
        assert stages[name]["foreach"] == "${upgrade}", name
    train = stages["train-v2"]["do"]
    assert train["cmd"].split()[:3] == ["python", "../../stages/train.py", "${key}"]
    assert train["params"] == ["train.${key}"]
    assert {"splits/v2.json", "models/v1/weights.safetensors", "models/v1/card.json"} <= set(
        train["deps"]
    )
    files = ("weights.safetensors", "card.json", "train_metrics.json")
    assert train["outs"] == [f"models/${{key}}/{f}" for f in files]
    v1 = stages["train-v1"]
    assert v1["params"] == ["train.v1"] and "splits/v1.json" in v1["deps"]
    evaluate = stages["evaluate"]["do"]
    cmd = evaluate["cmd"].split()
    assert cmd[:2] == ["python", "../../stages/evaluate.py"]
    args = dict(zip(cmd[2::2], cmd[3::2], strict=True))
    assert args == {
        "--params": "evaluate.yaml",
        "--section": "${key}",
        "--metrics": "metrics/${key}",
        "--plots": "plots/${key}",
        "--cache": "cache/embeddings",
    }
    assert evaluate["params"] == [{"evaluate.yaml": ["${key}"]}]
    assert {
        "models/${item.from}/weights.safetensors",
        "models/${key}/weights.safetensors",
        "models/${key}/upgrade",
    } <= set(evaluate["deps"])
    assert {"metrics/${key}": {"cache": False}} in evaluate["outs"]
    summary = stages["summarize"]
    assert summary["cmd"] == "python summarize.py"
    assert {"summarize.py", "metrics"} <= set(summary["deps"])


def test_dvc_expands_one_stage_per_point():
    from dvc.repo import Repo

    points = _points()
    with Repo(str(BICT)) as repo:
        names = {s.addressing.rpartition(":")[2] for s in repo.index.stages}
    per_point = {f"{s}@{p}" for s in ("train-v2", "upgrade", "evaluate") for p in points}
    assert names == {"data", "split", "train-v1", "summarize", *per_point}


# -- the committed results are what the committed metrics give --------------------------------


def test_results_are_what_the_committed_metrics_give(summarize):
    points = _points()
    present = [p for p in points if summarize.metrics_path(BICT, p).is_file()]
    if not present:
        pytest.skip(
            "experiments/bict/metrics/<point>/compat.json not committed yet: run `dvc repro` in "
            "experiments/bict (the full sweep), then commit dvc.lock, metrics/ and results/"
        )
    missing = sorted(set(points) - set(present))
    assert not missing, f"metrics of some points are not committed: {missing}"
    summary = summarize.summarize(summarize.load_points(BICT))
    results = BICT / "results"
    assert (results / "lambda.md").read_text(encoding="utf-8") == summarize.render(summary), (
        "experiments/bict/results/lambda.md differs from the committed metrics: run python summarize.py in "
        "experiments/bict"
    )
    assert (results / "lambda.json").read_text(encoding="utf-8") == summarize.dump(summary)
    assert summarize.main(["--check"]) == 0


# -- the rules, on synthetic metrics ----------------------------------------------------------


def _fake_sweep(folder: Path, points: dict[str, tuple[float, int, float, float, bool]]) -> Path:
    """A bict folder with params.yaml and metrics/<point>/compat.json: point -> (lambda, seed,
    backward top-1, forward top-1, psi refused)."""
    train: dict = {"v1": {"method": "independent", "split": "v1", "seed": 1}}
    upgrade: dict = {}
    for name, (lam, seed, back, fwd, refused) in points.items():
        train[name] = {"method": "bict", "method_params": {"lam": lam}, "seed": seed}
        upgrade[name] = {"from": "v1", "seed": seed}
        fwd = back if refused else fwd
        cells = {"old": 0.5, "backward": back, "forward": fwd, "self": 0.7}
        bound = {"lower_bound": (fwd - back) / 2}
        report = {
            "forward": {
                name: {
                    "from": "v1",
                    "metrics": {
                        "identification": {
                            "top1": {**cells, "forward_minus_backward": bound},
                            "mAP": {k: v / 2 for k, v in cells.items()},
                        }
                    },
                    "psi": {
                        "refused": "held-out gain not above 0" if refused else None,
                        "held_out_lower_bound": -0.001 if refused else 0.01,
                    },
                }
            }
        }
        path = folder / "metrics" / name / "compat.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(report))
    (folder / "params.yaml").write_text(yaml.safe_dump({"train": train, "upgrade": upgrade}))
    return folder


SWEEP = {  # backward peaks at 10 clear of both neighbours' seeds; psi refused at 30
    "a0": (0.0, 2, 0.01, 0.55, False),
    "a1": (1.0, 2, 0.40, 0.58, False),
    "a3s2": (3.0, 2, 0.560, 0.60, False),
    "a3s3": (3.0, 3, 0.565, 0.61, False),
    "a10s2": (10.0, 2, 0.59, 0.60, False),
    "a10s3": (10.0, 3, 0.58, 0.57, False),
    "a30s2": (30.0, 2, 0.570, 0.0, True),
    "a30s3": (30.0, 3, 0.575, 0.0, True),
}


def test_a_clear_peak_and_forward_above_backward_below_it_hold(summarize, tmp_path):
    s = summarize.summarize(summarize.load_points(_fake_sweep(tmp_path, SWEEP)))
    assert s["peak"]["lambda"] == 10.0 and s["peak"]["interior"] and s["peak"]["held"]
    assert [n["lambda"] for n in s["peak"]["neighbours"]] == [3.0, 30.0]
    assert s["forward"] == {"small_lambdas": [0.0, 1.0, 3.0], "held": True}
    assert s["verdict"] == "held" and s["reasons"] == []
    per = s["lambda"]
    assert per["10"]["forward_above_backward"] == 1  # one seed of two: reported, not judged
    assert per["30"]["psi_refused"] == 2 and per["30"]["forward_above_backward"] == 0
    assert per["3"]["top1"]["backward"] == pytest.approx({"mean": 0.5625, "min": 0.56, "max": 0.565})  # fmt: skip
    md = summarize.render(s)
    assert "| 10 | 2, 3 | 50.0 | 58.5 [58.0, 59.0] |" in md
    assert "refused 2/2 (held-out gain lower bound -0.10)" in md
    assert "| a30s2 | 30 | 2 |" in md and "refused (-0.10)" in md
    assert "- Result 7: held." in md
    for rule in summarize.RULES.values():
        assert rule in md


def test_a_peak_within_the_seed_spread_does_not_hold(summarize, tmp_path):
    sweep = {**SWEEP, "a30s3": (30.0, 3, 0.585, 0.0, True)}  # a seed at 30 above the peak's lowest
    s = summarize.summarize(summarize.load_points(_fake_sweep(tmp_path, sweep)))
    assert s["peak"]["lambda"] == 10.0 and not s["peak"]["held"]
    assert [n["above_spread"] for n in s["peak"]["neighbours"]] == [True, False]
    assert s["verdict"] == "did not hold"
    assert s["reasons"] == ["the peak at lambda 10 is within the seed spread of lambda 30"]


def test_a_peak_at_the_edge_or_forward_below_backward_does_not_hold(summarize, tmp_path):
    edge = {k: v for k, v in SWEEP.items() if v[0] <= 10.0}
    s = summarize.summarize(summarize.load_points(_fake_sweep(tmp_path / "edge", edge)))
    assert s["peak"]["lambda"] == 10.0 and not s["peak"]["interior"]
    assert "backward peaks at lambda 10, the edge of the sweep" in s["reasons"]
    below = {**SWEEP, "a3s3": (3.0, 3, 0.565, 0.55, False)}
    s = summarize.summarize(summarize.load_points(_fake_sweep(tmp_path / "below", below)))
    assert s["peak"]["held"] and not s["forward"]["held"]
    assert s["reasons"] == ["forward is not above backward on every seed at lambda 3"]


def test_summarize_writes_and_checks_the_results(summarize, tmp_path, capsys):
    folder = _fake_sweep(tmp_path, SWEEP)
    assert summarize.main(["--check"], folder=folder) == 1  # nothing written yet
    assert summarize.main([], folder=folder) == 0
    assert {p.name for p in (folder / "results").iterdir()} == {
        "lambda.md",
        "lambda.json",
        "lambda.png",
    }
    assert summarize.main(["--check"], folder=folder) == 0
    md = folder / "results" / "lambda.md"
    md.write_text(md.read_text().replace("58.5", "59.9"))
    assert summarize.main(["--check"], folder=folder) == 1
    (folder / "metrics" / "a1" / "compat.json").unlink()
    assert summarize.main([], folder=folder) == 3
    assert "no metrics" in capsys.readouterr().err


# -- the README's row 7 and lambda table ------------------------------------------------------


def test_readme_row_7_states_the_computed_verdict(summarize, tmp_path, monkeypatch):
    numbers = _load("readme_numbers", REPO / "scripts" / "readme_numbers.py")
    for name, sweep in (("held", SWEEP), ("not", {**SWEEP, "a30s3": (30.0, 3, 0.585, 0.0, True)})):
        folder = _fake_sweep(tmp_path / name / "experiments" / "bict", sweep)
        summarize.main([], folder=folder)
        monkeypatch.setattr(numbers, "ROOT", tmp_path / name)
        row = numbers._result7()
        table = numbers.bict_lambda()
        if name == "held":
            assert row["verdict"] == "held (the judged parts)"
            assert "58.5 [58.0, 59.0] (10)" in row["measured"]
            assert "peak at lambda 10 (above the seed spread of lambda 3 and 30)" in row["measured"]
            assert "forward above backward on 1/1, 1/1, 2/2, 1/2, 0/2 seeds" in row["measured"]
            assert "psi refused on 2/2 seeds at lambda 30" in row["measured"]
        else:
            assert row["verdict"] == (
                "did not hold (the peak at lambda 10 is within the seed spread of lambda 30) "
                "(the judged parts)"
            )
            assert "(above the seed spread of lambda 3; within that of lambda 30)" in row["measured"]  # fmt: skip
        assert re.search(r"^\| 30 \| 2, 3 \| 50\.0 / 25\.0 \| .* \| 0/2 \| 2/2 \|$", table, re.M)
