"""``stages/evaluate.py`` run for real in a scratch project: image folder, manifest, fake models."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

import compat.models
from compat.data.config import FolderData
from compat.data.sources import build_source
from compat.data.split import EvalManifest
from compat.io import fingerprint, write_json

ROOT = Path(__file__).resolve().parents[2]


def _stage():
    spec = importlib.util.spec_from_file_location("evaluate_stage", ROOT / "stages" / "evaluate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def project(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    n_classes, per = 12, 4
    for c in range(n_classes):
        # Each class is a noisy version of its own pattern, so a linear model can tell them apart.
        pattern = rng.integers(0, 256, (8, 8))
        folder = tmp_path / "images" / f"c{c:02d}"
        folder.mkdir(parents=True)
        for i in range(per):
            pixels = np.clip(pattern + rng.normal(0, 20, (8, 8)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels, mode="L").save(folder / f"{i}.png")
    monkeypatch.chdir(tmp_path)
    source = build_source(FolderData(kind="folder", root="images", size=8, channels=1), "data")
    items = [it.id for it in source.items]
    labels = [it.label for it in source.items]
    query = [k for k in range(len(items)) if k % per < 2]
    gallery = [k for k in range(len(items)) if k % per >= 2 and k // per >= 2]  # 2 open classes
    pairs = [(k, k + 1, True) for k in range(0, len(items), per)]
    pairs += [(k, (k + per) % len(items), False) for k in range(0, len(items), per)]
    body = {
        "source_fingerprint": source.fingerprint, "items": items, "labels": labels,
        "query": query, "gallery": gallery, "nonmated_classes": ["c00", "c01"], "pairs": pairs,
    }  # fmt: skip
    write_json("splits/eval.json", EvalManifest(**body, fingerprint=fingerprint(body)).model_dump())
    Path("params.yaml").write_text(
        "evaluate:\n  chain: [v1, v2]\n  paragon: {v2: v2p}\n  bootstrap: 30\n"
    )
    loads = []

    def fake_load_version(path):
        version = Path(path).name
        loads.append(version)
        torch.manual_seed({"v1": 1, "v2": 2, "v2p": 3}[version])
        model = nn.Sequential(nn.Flatten(), nn.Linear(64, 6))
        return model.eval(), SimpleNamespace(weights_sha256=f"sha-{version}")

    monkeypatch.setattr(compat.models, "load_version", fake_load_version)
    for version in ("v1", "v2", "v2p"):
        card = {
            "version": version, "backbone": "fake", "dim": 6, "in_channels": 1, "image_size": 8,
            "pooling": "none", "weights_sha256": f"sha-{version}",
        }  # fmt: skip
        write_json(Path("models") / version / "card.json", card)
    return tmp_path, loads


def test_stage_writes_metrics_plots_and_uses_the_cache(project, capsys):
    tmp_path, loads = project
    stage = _stage()
    assert stage.main() == 0
    assert sorted(loads) == ["v1", "v2", "v2p"]
    report = json.loads((tmp_path / "metrics/compat.json").read_text())
    assert report["cells"] == [["v1", "v1"], ["v2", "v1"], ["v2", "v2"], ["v2p", "v2p"]]
    assert report["counts"]["open-set"] == {"mated": 20, "non_mated": 4}
    for protocol in ("identification", "open-set", "verification"):
        flat = json.loads((tmp_path / f"metrics/{protocol}.json").read_text())
        assert set(flat["M"]) == {"v1", "v2", "v2p"}
    assert (tmp_path / "plots/cmc/v2_on_v1.json").is_file()
    assert (tmp_path / "plots/heatmap_identification.png").is_file()
    assert len(list((tmp_path / "cache/embeddings").glob("*.npz"))) == 3
    captured = capsys.readouterr()
    assert "identification top1: M(v1,v1)=" in captured.out
    # Progress goes to stderr as it happens: each version embedded, then a line per cell.
    assert "embedded" in captured.err
    cell_lines = [line for line in captured.err.splitlines() if "evaluate: cell " in line]
    assert [line.split(":")[1].strip().split(" M")[0] for line in cell_lines] == [
        "cell 1/4", "cell 2/4", "cell 3/4", "cell 4/4",
    ]  # fmt: skip
    assert "M(v2, v1): identification, open-set, verification in" in cell_lines[1]
    assert stage.main() == 0
    assert "cached" in capsys.readouterr().err
    assert sorted(loads) == ["v1", "v2", "v2p"]  # cached versions: no model loaded again


def test_stage_errors_exit_with_their_code(project, capsys):
    _tmp_path, _ = project
    stage = _stage()
    Path("params.yaml").write_text("evaluate:\n  chain: [v1]\n  bootsrap: 3\n")
    assert stage.main() == 4
    assert (
        "params.yaml: evaluate.bootsrap: Extra inputs are not permitted" in capsys.readouterr().err
    )
    Path("params.yaml").write_text("data: {}\n")
    assert stage.main() == 3
    Path("params.yaml").write_text("evaluate:\n  chain: [v1]\n")
    Path("splits/eval.json").unlink()
    assert stage.main() == 3
    assert "splits/eval.json" in capsys.readouterr().err


def _set_training_split(version: str, split: str, train_fingerprint: str) -> None:
    path = Path("models") / version / "card.json"
    card = json.loads(path.read_text())
    card["data"] = {"split": split, "train_fingerprint": train_fingerprint}
    write_json(path, card)


def test_a_paragon_trained_on_another_split_is_refused_before_embedding(project, capsys):
    """Issue 13.4: a version's paragon is trained on that version's own training split."""
    tmp_path, loads = project
    _set_training_split("v1", "v1", "a" * 16)
    _set_training_split("v2", "v2", "b" * 16)
    _set_training_split("v2p", "v3", "c" * 16)  # a later version's data: gain understated
    stage = _stage()
    assert stage.main() == 4
    err = capsys.readouterr().err
    assert "evaluate.paragon.v2: paragon v2p was trained on split cccccccccccc" in err
    assert loads == [] and not (tmp_path / "metrics").exists()  # nothing embedded or written
    _set_training_split("v2p", "v2", "b" * 16)  # the right paragon: v2's own split
    assert stage.main() == 0
    report = json.loads((tmp_path / "metrics/compat.json").read_text())
    assert report["gain"]["identification"]["top1"]["v2"]["v1"]["paragon"] == "v2p"


def test_stage_truncates_a_wider_version_as_its_card_says(project, monkeypatch, capsys):
    """Issue 13.7: v2 (10 dims) meets v1's 6-dim gallery by its first 6 coordinates."""
    tmp_path, _ = project

    def load(path):
        version = Path(path).name
        torch.manual_seed({"v1": 1, "v2": 2, "v2p": 3}[version])
        model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10 if version == "v2" else 6))
        return model.eval(), SimpleNamespace(weights_sha256=f"sha-{version}")

    monkeypatch.setattr(compat.models, "load_version", load)
    path = Path("models/v2/card.json")
    card = json.loads(path.read_text())
    write_json(
        path, {**card, "dim": 10, "method": "bct", "method_params": {"dim_mismatch": "truncate"}}
    )
    stage = _stage()
    assert stage.main() == 0
    report = json.loads((tmp_path / "metrics/compat.json").read_text())
    assert report["skipped"] == []
    assert report["aligned"] == [
        {"query": "v2", "gallery": "v1", "dim_mismatch": "truncate", "dims": [10, 6], "dim": 6}
    ]
    assert report["matrix"]["identification"]["top1"]["v2"]["v1"] is not None
    write_json(path, {**card, "dim": 10})  # a card without dim_mismatch: the cell stays empty
    assert stage.main() == 0
    report = json.loads((tmp_path / "metrics/compat.json").read_text())
    assert report["matrix"]["identification"]["top1"]["v2"].get("v1") is None
    assert "v2 declares no dim_mismatch" in report["skipped"][0]["reason"]
