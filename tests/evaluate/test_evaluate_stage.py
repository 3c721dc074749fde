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
    out = capsys.readouterr().out
    assert "embedded" in out and "identification top1: M(v1,v1)=" in out
    assert stage.main() == 0
    assert "cached" in capsys.readouterr().out
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
