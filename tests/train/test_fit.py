"""The fit loop: determinism, bit-identical resume, reporting, cost rules."""

from __future__ import annotations

import json
import sys
import types

import numpy as np
import pytest
import torch
from train_synthetic import make_images

from compat.losses import create_loss
from compat.models import FrozenParent, build_embedding_model, create_head
from compat.train import DataInfo, TrainConfig, train_arrays
from compat.train.fit import fit

BASE = dict(backbone="tiny", dim=8, batch_size=16, epochs=3, lr=3e-3)


class Stop(Exception):
    pass


@pytest.fixture(scope="module")
def data():
    images, labels = make_images(num_classes=6, per_class=8, size=8)
    old = np.array([int(label[1:]) < 3 for label in labels])
    return images, labels, old


def info(labels, name="v1"):
    return DataInfo(name, f"fp-{name}", "src", sorted(set(labels)))


@pytest.fixture(scope="module")
def parent_dir(tmp_path_factory, data):
    images, labels, old = data
    models = tmp_path_factory.mktemp("models")
    old_labels = [lab for lab, o in zip(labels, old, strict=True) if o]
    train_arrays(
        "v1", TrainConfig(**BASE), images[old], old_labels, info(old_labels), models_dir=models,
        checkpoint_dir=models / "ckpt-v1", quiet=True,
    )  # fmt: skip
    return models


@pytest.mark.parametrize(
    ("method", "extra"),
    [
        ("independent", {"optimizer": "sgd", "schedule": "step", "lr": 0.05}),
        ("unibct", {"method_params": {"refresh_at": [2]}}),
        ("lwf", {}),
    ],
)
def test_killed_run_resumes_to_identical_weights(tmp_path, data, parent_dir, method, extra):
    images, labels, _ = data
    cfg = TrainConfig(**{**BASE, **extra, "method": method, "parent": "v1"})
    common = dict(models_dir=parent_dir, quiet=True)
    full = train_arrays(
        "v2", cfg, images, labels, info(labels, "v2"), out_dir=tmp_path / "full",
        checkpoint_dir=tmp_path / "ck-full", **common,
    )  # fmt: skip

    def crash_after_first(epoch, row):
        if epoch == 1:
            raise Stop

    with pytest.raises(Stop):
        train_arrays(
            "v2", cfg, images, labels, info(labels, "v2"), out_dir=tmp_path / "resumed",
            checkpoint_dir=tmp_path / "ck", on_epoch_end=crash_after_first, **common,
        )  # fmt: skip
    ck = json.loads((tmp_path / "ck" / "checkpoint.json").read_text())
    assert ck["epoch"] == 1
    assert not (tmp_path / "resumed" / "card.json").exists()
    resumed = train_arrays(
        "v2", cfg, images, labels, info(labels, "v2"), out_dir=tmp_path / "resumed",
        checkpoint_dir=tmp_path / "ck", **common,
    )  # fmt: skip
    assert resumed.weights_sha256 == full.weights_sha256
    metrics = json.loads((tmp_path / "resumed" / "train_metrics.json").read_text())
    assert [r["epoch"] for r in metrics["epochs"]] == [1, 2, 3]
    assert not (tmp_path / "ck").exists()  # removed once the version is written


def test_seeded_runs_repeat_and_versions_differ(tmp_path, data):
    images, labels, _ = data
    cfg = TrainConfig(**{**BASE, "epochs": 1})
    kw = dict(models_dir=tmp_path, quiet=True)
    a = train_arrays("v1", cfg, images, labels, info(labels), out_dir=tmp_path / "a", **kw)
    b = train_arrays("v1", cfg, images, labels, info(labels), out_dir=tmp_path / "b", **kw)
    c = train_arrays("v9", cfg, images, labels, info(labels), out_dir=tmp_path / "c", **kw)
    assert a.weights_sha256 == b.weights_sha256
    assert c.weights_sha256 != a.weights_sha256  # its own seed: no shared initialisation
    assert a.effective_seed != c.effective_seed


def test_checkpoint_of_another_run_is_ignored(tmp_path, data, capsys):
    images, labels, _ = data
    kw = dict(models_dir=tmp_path, checkpoint_dir=tmp_path / "ck", keep_checkpoint=True)
    train_arrays(
        "v1", TrainConfig(**{**BASE, "epochs": 1}), images, labels, info(labels), quiet=True, **kw
    )
    card = train_arrays(
        "v1", TrainConfig(**{**BASE, "epochs": 1, "lr": 1e-3}), images, labels, info(labels), **kw,
        progress=False,
    )  # fmt: skip
    assert card.steps == 3
    assert "ignoring checkpoint" in capsys.readouterr().out


def _fit_with_parent(method, params, data, parent_dir):
    images, labels, _ = data
    parent = FrozenParent.load(parent_dir / "v1")
    classes = sorted(set(labels))
    targets = torch.tensor([classes.index(c) for c in labels])
    torch.manual_seed(0)
    model = build_embedding_model("tiny", 8, in_channels=1, image_size=8)
    head = create_head("cosface", 8, len(classes))
    cfg = TrainConfig(**{**BASE, "epochs": 1})
    loss = create_loss(method, params)
    result = fit(
        model, head, loss, images, targets, cfg, classes=classes, parent=parent, quiet=True
    )
    return parent, result


def test_papers_bct_never_runs_the_parent_backbone_per_batch(data, parent_dir):
    # l2: 0 is the paper's BCT: only the old classifier's weights take part.
    parent, result = _fit_with_parent("bct", {"new_classes": "drop", "l2": 0.0}, data, parent_dir)
    assert parent.forward_calls == 0
    parent, _ = _fit_with_parent("bct", {"l2": 0.0}, data, parent_dir)
    assert parent.forward_calls == 1  # the one cached pass for synthesized classes
    # compat's default adds the alignment term: one frozen parent pass per batch, plus the one
    # cached pass for synthesized classes.
    parent, result = _fit_with_parent("bct", {}, data, parent_dir)
    assert parent.forward_calls == result.steps + 1
    parent, result = _fit_with_parent("l2", {}, data, parent_dir)
    assert parent.forward_calls == result.steps
    assert not parent.model.training


def test_metrics_json_mlflow_and_progress_bar(tmp_path, data, monkeypatch):
    images, labels, _ = data
    logged = []
    fake = types.SimpleNamespace(
        active_run=lambda: object(), log_metrics=lambda m, step: logged.append((step, m))
    )
    monkeypatch.setitem(sys.modules, "mlflow", fake)
    cfg = TrainConfig(**{**BASE, "epochs": 2})
    train_arrays(
        "v1", cfg, images, labels, info(labels), models_dir=tmp_path, progress=True,
        checkpoint_dir=tmp_path / "ck",
    )  # fmt: skip
    metrics = json.loads((tmp_path / "v1" / "train_metrics.json").read_text())
    rows = metrics["epochs"]
    assert [r["epoch"] for r in rows] == [1, 2]
    assert {"loss", "loss_head", "lr", "images_per_s", "seconds"} <= set(rows[0])
    assert metrics["summary"]["epoch"] == 2 and "seconds_total" in metrics["summary"]
    assert [s for s, _ in logged] == [1, 2] and "train/loss_head" in logged[0][1]


def test_rejects_bad_arrays(data):
    images, _, _ = data
    model = build_embedding_model("tiny", 8, in_channels=1, image_size=8)
    head = create_head("cosface", 8, 6)
    loss = create_loss("independent")
    cfg = TrainConfig(**BASE)
    from compat.errors import BadInputError

    with pytest.raises(BadInputError, match="uint8"):
        fit(model, head, loss, images.astype(np.float32), np.zeros(len(images)), cfg)
    with pytest.raises(BadInputError, match="too small to train on"):
        fit(model, head, loss, images[:1], np.zeros(1), cfg)


def test_a_batch_larger_than_the_training_set_trains_on_whole_set_batches(data, capsys):
    images, _, _ = data
    model = build_embedding_model("tiny", 8, in_channels=1, image_size=8)
    head = create_head("cosface", 8, 6)
    result = fit(model, head, create_loss("independent"), images[:10],
                 np.arange(10) % 6, TrainConfig(**{**BASE, "batch_size": 128, "epochs": 1}))  # fmt: skip
    assert (
        "batch_size 128 is larger than the training set (10 images): using batches of 10"
        in capsys.readouterr().err
    )
    assert len(result.metrics) == 1 and result.metrics[0]["loss"] > 0  # one step was taken


def test_a_non_finite_loss_stops_training_naming_the_term_and_epoch(tmp_path, data):
    """issue 30: a loss gone NaN or inf is exit 4 naming the term and the epoch, and nothing of
    that run is saved as a version (its weights are already lost)."""
    from compat.errors import BadInputError

    images, labels, _ = data
    # sgd at lr 1e30 without momentum: the first steps blow the weights up to inf and NaN. Such an
    # lr is over the params bound (1000), so it is set past validation: a run that diverges.
    cfg = TrainConfig(**{**BASE, "optimizer": "sgd", "momentum": 0.0, "warmup": 0.0,
                         "schedule": "step", "step_milestones": [0.99]})  # fmt: skip
    cfg = cfg.model_copy(update={"lr": 1e30})
    with pytest.raises(
        BadInputError, match=r"^train: epoch [0-9]+: loss term '(head|loss)' is not finite"
    ):
        train_arrays("v9", cfg, images, labels, info(labels, "v9"), models_dir=tmp_path / "m",
                     checkpoint_dir=tmp_path / "ckpt", quiet=True)  # fmt: skip
    assert not (tmp_path / "m" / "v9" / "weights.safetensors").exists()
