"""Whole-version runs: outputs, the card, every refusal before training, and the DVC stage."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from train_synthetic import make_images, make_project

from compat.errors import BadInputError, NotFoundError, UsageError
from compat.models import load_head, load_version, save_version
from compat.models.card import ModelCard
from compat.models.embedding import build_embedding_model
from compat.train import DataInfo, TrainConfig, train_arrays
from compat.train.run import class_order

BASE = dict(backbone="tiny", dim=8, batch_size=16, epochs=1)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def data():
    return make_images(num_classes=4, per_class=8, size=8)


def info(labels, name="v1"):
    return DataInfo(name, f"fp-{name}", "src-fp", sorted(set(labels)))


@pytest.fixture(scope="module")
def models(tmp_path_factory, data):
    images, labels = data
    root = tmp_path_factory.mktemp("models")
    train_arrays("v1", TrainConfig(**BASE), images, labels, info(labels), models_dir=root, quiet=True,
                 checkpoint_dir=root / "ck")  # fmt: skip
    return root


def test_outputs_and_card(models):
    folder = models / "v1"
    assert {p.name for p in folder.iterdir()} == {
        "weights.safetensors",
        "card.json",
        "train_metrics.json",
    }
    model, card = load_version(folder)
    for key in (
        "backbone", "dim", "head", "head_params", "num_classes", "classes", "method", "method_params",
        "parent", "data_fingerprint", "source_fingerprint", "weights_sha256", "epochs",
        "training_seconds", "packages", "split", "in_channels", "image_size",
    ):  # fmt: skip
        assert key in card.to_json(), key
    assert card.classes == ["c000", "c001", "c002", "c003"] and card.num_classes == 4
    assert (card.data_fingerprint, card.source_fingerprint) == ("fp-v1", "src-fp")
    assert card.method == "independent" and card.parent is None
    head, _ = load_head(folder)
    assert head.weight.shape == (4, 8)
    import torch

    with torch.no_grad():
        assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 8)


def run(cfg_kw, models, data, version="v2"):
    images, labels = data
    return train_arrays(version, TrainConfig(**{**BASE, **cfg_kw}), images, labels,
                        info(labels, version), models_dir=models, quiet=True)  # fmt: skip


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (
            {"backbone": "resnet9"},
            "unknown backbone 'resnet9'; known: resnet18, resnet50, small-cnn, tiny",
        ),
        (
            {"head": "sphere"},
            "unknown head 'sphere'; known: arcface, cosface, dsimplex, linear, normface, softmax",
        ),
        ({"method": "bctt"}, "unknown method 'bctt'; known: bct, bct-kd, bict"),
    ],
)
def test_unknown_names_list_the_known_ones(models, data, kw, match):
    with pytest.raises(UsageError, match=match):
        run(kw, models, data)


def test_unworkable_parents_are_refused_before_training(models, data, tmp_path):
    with pytest.raises(BadInputError, match="needs the dsimplex head"):
        run({"method": "hoc", "parent": "v1"}, models, data)
    with pytest.raises(BadInputError, match="not dsimplex"):
        run({"method": "hoc", "head": "dsimplex", "parent": "v1"}, models, data)
    with pytest.raises(BadInputError, match="needs a parent"):
        run({"method": "bct"}, models, data)
    with pytest.raises(NotFoundError, match="parent version 'v0' not found"):
        run({"method": "bct", "parent": "v0"}, models, data)
    with pytest.raises(BadInputError, match="method_params: lam"):
        run({"method": "bct", "parent": "v1", "method_params": {"lam": "much"}}, models, data)
    # a parent saved without a classifier
    headless = tmp_path / "models"
    card = {
        "backbone": "tiny", "dim": 8, "pooling": "avg", "in_channels": 1, "image_size": 8,
        "head": None, "classes": [],
    }  # fmt: skip
    save_version(
        headless / "v1", build_embedding_model("tiny", 8, in_channels=1, image_size=8), None, card
    )
    with pytest.raises(BadInputError, match="without a classifier head"):
        run({"method": "bct", "parent": "v1"}, headless, data)
    assert not (headless / "v2").exists()


def test_tampered_parent_is_refused(models, data, tmp_path):
    import shutil

    root = tmp_path / "m"
    shutil.copytree(models / "v1", root / "v1")
    w = root / "v1" / "weights.safetensors"
    blob = bytearray(w.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    w.write_bytes(bytes(blob))
    with pytest.raises(BadInputError, match="sha256"):
        run({"method": "bct", "parent": "v1"}, root, data)
    assert not (root / "v2").exists()


def test_parent_on_other_images_is_refused(models):
    images, labels = make_images(num_classes=4, per_class=8, size=16)
    with pytest.raises(BadInputError, match="8 px images"):
        train_arrays("v2", TrainConfig(**BASE, method="l2", parent="v1"), images, labels,
                     info(labels), models_dir=models, quiet=True)  # fmt: skip


def test_bct_child_records_lineage(models, data):
    card = run({"method": "bct", "parent": "v1", "dim": 12}, models, data)
    assert card.parent == "v1"
    assert (
        card.parent_weights_sha256
        == json.loads((models / "v1" / "card.json").read_text())["weights_sha256"]
    )
    assert card.method_params["new_classes"] == "synthesize"


def test_dsimplex_class_order_extends_the_parent():
    parent = ModelCard(backbone="tiny", dim=8, in_channels=1, image_size=8, pooling="avg",
                       weights_sha256="0" * 64, head="dsimplex", classes=["k", "b"])  # fmt: skip
    assert class_order(["a", "b", "k", "z"], "dsimplex", parent) == ["k", "b", "a", "z"]
    # new classes keep the manifest's (introduction) order, not a sorted one
    assert class_order(["z", "b", "a"], "dsimplex", parent) == ["k", "b", "z", "a"]
    assert class_order(["a", "b"], "cosface", parent) == ["a", "b"]
    assert class_order(["a", "b"], "dsimplex", None) == ["a", "b"]


def test_hoc_chain_keeps_class_vertices(tmp_path):
    images, labels = make_images(num_classes=4, per_class=8, size=8)
    cfg = dict(BASE, head="dsimplex", dim=7, method="hoc")
    old = [i for i, lab in enumerate(labels) if lab in ("c002", "c003")]
    train_arrays("h1", TrainConfig(**cfg), images[old], [labels[i] for i in old],
                 DataInfo("h1", "f", "s", ["c002", "c003"]), models_dir=tmp_path, quiet=True)  # fmt: skip
    card = train_arrays("h2", TrainConfig(**cfg, parent="h1"), images, labels, info(labels, "h2"),
                        models_dir=tmp_path, quiet=True)  # fmt: skip
    assert card.classes == ["c002", "c003", "c000", "c001"]


def _stage():
    spec = importlib.util.spec_from_file_location("train_stage", REPO / "stages" / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_stage_trains_from_params_source_and_split(tmp_path, monkeypatch, capsys):
    params = {
        "train": {
            "v1": {**BASE, "seed": 3},
            "v2": {**BASE, "split": "v1", "method": "bct", "parent": "v1"},
        }
    }
    source = make_project(tmp_path, params)
    monkeypatch.chdir(tmp_path)
    stage = _stage()
    assert stage.main(["v1", "--no-progress"]) == 0
    assert stage.main(["v2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "train: v2 (bct, parent v1)" in out
    card = json.loads(Path("models/v2/card.json").read_text())
    assert card["source_fingerprint"] == source.fingerprint and card["split"] == "v1"
    # bad input: an unknown version, a typo in params, a method that cannot work
    assert stage.main(["v7"]) == 3
    params["train"]["v3"] = {**BASE, "split": "v1", "epoch": 2}
    params["train"]["v4"] = {**BASE, "split": "v1", "method": "hoc", "parent": "v1"}
    Path("params.yaml").write_text(yaml.safe_dump(params))
    assert stage.main(["v3"]) == 4
    assert stage.main(["v4"]) == 4
    err = capsys.readouterr().err
    assert "train.v3.epoch: Extra inputs are not permitted" in err
    assert "error: method hoc: needs the dsimplex head" in err
    assert np.isfinite(card["training_seconds"])
