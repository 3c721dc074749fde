"""Evaluating a 7-version sequence: AC strictness honoured, a readable 7 x 7 heatmap with the
sequence metrics, and stages/evaluate.py pointed at a section and folders of its own (what each
evaluate@<method> stage of experiments/sequence does)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from seq_scripts import REPO

from compat.evaluate.config import EvaluateConfig
from compat.evaluate.plots import _sequence_line
from compat.evaluate.report import evaluate_chain, write_report

CHAIN = [f"t{k}" for k in range(1, 8)]


def _sequence(n_classes=40, per=4, d=12, seed=0):
    """Seven versions in one space, less noisy each time; t4 is t3's twin (ties with it)."""
    rng = np.random.default_rng(seed)
    labels = [f"c{c:02d}" for c in range(n_classes) for _ in range(per)]
    n = len(labels)
    manifest = SimpleNamespace(
        items=[f"i{k}" for k in range(n)], labels=labels,
        query=[i for i in range(n) if i % per < 2], gallery=[i for i in range(n) if i % per >= 2],
        pairs=[(0, 1, True), (0, per, False)], fingerprint="seq",
    )  # fmt: skip
    base = rng.standard_normal((n_classes, d))[np.repeat(np.arange(n_classes), per)]
    emb = {}
    for k, v in enumerate(CHAIN):
        noise = 1.6 - 0.2 * k
        x = base + noise * rng.standard_normal((n, d))
        emb[v] = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    emb["t4"] = emb["t3"].copy()
    return manifest, emb


@pytest.mark.parametrize("strict", [True, False])
def test_ac_strictness_is_honoured(strict):
    manifest, emb = _sequence()
    cfg = EvaluateConfig(chain=CHAIN, protocols=["identification"], bootstrap=0, strict_ac=strict)
    rep = evaluate_chain(manifest, emb, cfg)
    top1 = rep["matrix"]["identification"]["top1"]
    assert top1["t4"]["t3"] == top1["t3"]["t3"]  # the twin ties with its parent's self test
    m = np.array([[top1[q].get(g, np.nan) for g in CHAIN] for q in CHAIN])
    i, j = np.tril_indices(7, k=-1)
    expected = np.mean(m[i, j] > m[j, j]) if strict else np.mean(m[i, j] >= m[j, j])
    seq = rep["sequence"]["identification"]["top1"]
    assert seq["ac"] == pytest.approx(expected) and seq["strict_ac"] is strict
    assert len(rep["cells"]) == 28  # the lower triangle of 7 x 7, diagonal included


def test_heatmap_of_a_long_chain_names_the_sequence_metrics(tmp_path):
    manifest, emb = _sequence()
    cfg = EvaluateConfig(chain=CHAIN, protocols=["identification"], bootstrap=0)
    rep = evaluate_chain(manifest, emb, cfg)
    write_report(rep, tmp_path / "metrics", tmp_path / "plots")
    from PIL import Image

    with Image.open(tmp_path / "plots" / "heatmap_identification.png") as img:
        _, height = img.size
    assert height >= 110 * 0.5 * 7  # cells keep ~0.5 in a side at dpi 110
    seq = rep["sequence"]["identification"]["top1"]
    line = _sequence_line(seq, 7)
    assert f"AC {seq['ac']:.2f}" in line and "AA" in line and "BC" in line and "FC" in line
    assert _sequence_line(seq, 2) == ""  # a two-version chain keeps the plain title


def test_evaluate_stage_reads_a_section_and_writes_where_told(tmp_path, monkeypatch, capsys):
    """stages/evaluate.py --params/--section/--metrics/--plots/--cache (evaluate@<method>)."""
    import torch
    from PIL import Image
    from torch import nn

    import compat.models
    from compat.data.config import FolderData
    from compat.data.sources import build_source
    from compat.data.split import EvalManifest
    from compat.io import fingerprint, write_json

    rng = np.random.default_rng(0)
    for c in range(6):
        for i in range(4):
            path = tmp_path / "images" / f"c{c}" / f"{i}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8), mode="L").save(path)
    monkeypatch.chdir(tmp_path)
    source = build_source(FolderData(kind="folder", root="images", size=8, channels=1), "data")
    items = [it.id for it in source.items]
    body = {
        "source_fingerprint": source.fingerprint, "items": items,
        "labels": [it.label for it in source.items],
        "query": [k for k in range(len(items)) if k % 4 < 2],
        "gallery": [k for k in range(len(items)) if k % 4 >= 2],
        "nonmated_classes": [], "pairs": [(0, 1, True), (0, 4, False)],
    }  # fmt: skip
    write_json("splits/eval.json", EvalManifest(**body, fingerprint=fingerprint(body)).model_dump())
    Path("evaluate.yaml").write_text(
        "hoc:\n  chain: [t1, t2, t3]\n  protocols: [identification]\n  bootstrap: 0\n"
    )

    def fake_load_version(path):
        torch.manual_seed(int(Path(path).name[1:]))
        model = nn.Sequential(nn.Flatten(), nn.Linear(64, 6))
        return model.eval(), SimpleNamespace(weights_sha256=f"sha-{Path(path).name}")

    monkeypatch.setattr(compat.models, "load_version", fake_load_version)
    for version in ("t1", "t2", "t3"):  # the stage names each version's weights from its card
        card = {
            "version": version, "backbone": "fake", "dim": 6, "in_channels": 1, "image_size": 8,
            "pooling": "none", "weights_sha256": f"sha-{version}",
        }  # fmt: skip
        write_json(Path("models") / version / "card.json", card)
    spec = importlib.util.spec_from_file_location("evaluate_stage", REPO / "stages/evaluate.py")
    stage = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stage)
    args = ["--params", "evaluate.yaml", "--section", "hoc", "--metrics", "metrics/hoc",
            "--plots", "plots/hoc", "--cache", "cache/embeddings/hoc"]  # fmt: skip
    assert stage.main(args) == 0
    rep = json.loads((tmp_path / "metrics/hoc/compat.json").read_text())
    assert rep["chain"] == ["t1", "t2", "t3"]
    assert (tmp_path / "metrics/hoc/identification.json").is_file()
    assert (tmp_path / "plots/hoc/heatmap_identification.png").is_file()
    assert len(list((tmp_path / "cache/embeddings/hoc").glob("*.npz"))) == 3
    assert not Path("metrics/compat.json").exists() and not Path("cache/embeddings/x").exists()
    assert stage.main(["--params", "evaluate.yaml", "--section", "er"]) == 3
    assert "evaluate.yaml: er: section missing" in capsys.readouterr().err
