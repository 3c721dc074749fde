"""Versions on disk: safetensors + card, sha256 verified, never unpickled."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

from compat.errors import BadInputError, NotFoundError
from compat.models import (
    EmbeddingModel,
    build_embedding_model,
    create_head,
    load_head,
    load_version,
    read_card,
    save_version,
)
from compat.models.parent import FrozenParent


def _card():
    return {
        "version": "v1",
        "backbone": "tiny",
        "pooling": "avg",
        "dim": 8,
        "in_channels": 1,
        "image_size": 16,
        "head": "cosface",
        "head_params": {"s": 16.0, "m": 0.2},
        "num_classes": 3,
        "classes": ["a", "b", "c"],
    }


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    model = build_embedding_model("tiny", 8, in_channels=1, image_size=16)
    model.train()(torch.rand(4, 1, 16, 16))  # move BN running stats off their defaults
    head = create_head("cosface", 8, 3, s=16.0, m=0.2)
    card = save_version(tmp_path / "v1", model.eval(), head, _card())
    return tmp_path / "v1", model, head, card


def test_roundtrip(saved):
    folder, model, head, card = saved
    assert (folder / "weights.safetensors").is_file()
    assert read_card(folder).weights_sha256 == card.weights_sha256
    assert card.packages is not None and "torch" in card.packages
    loaded, loaded_card = load_version(folder)
    assert isinstance(loaded, EmbeddingModel) and not loaded.training
    assert loaded_card.classes == ["a", "b", "c"]
    x = torch.rand(2, 1, 16, 16) * 2 - 1
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))
    loaded_head, _ = load_head(folder)
    assert torch.equal(loaded_head.weight, head.weight)


def test_loading_never_unpickles(saved, monkeypatch):
    folder = saved[0]

    def refuse(*a, **k):
        raise AssertionError("unpickling attempted")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    load_version(folder)


def test_tampered_weights_are_refused(saved):
    folder = saved[0]
    blob = bytearray((folder / "weights.safetensors").read_bytes())
    blob[-1] ^= 1
    (folder / "weights.safetensors").write_bytes(bytes(blob))
    with pytest.raises(BadInputError, match=r"does not match card\.json"):
        load_version(folder)


def test_stale_card_is_refused(saved):
    folder = saved[0]
    card = json.loads((folder / "card.json").read_text())
    card["weights_sha256"] = "0" * 64
    (folder / "card.json").write_text(json.dumps(card))
    with pytest.raises(BadInputError, match="sha256"):
        load_version(folder)


def test_missing_version_and_weights(tmp_path, saved):
    with pytest.raises(NotFoundError):
        load_version(tmp_path / "nope")
    (saved[0] / "weights.safetensors").unlink()
    with pytest.raises(NotFoundError, match="weights"):
        load_version(saved[0])


def test_neck_roundtrips_and_old_cards_read_as_the_default(tmp_path, saved):
    torch.manual_seed(0)
    model = build_embedding_model("tiny", 8, in_channels=1, image_size=16, neck="bn-linear")
    model.train()(torch.rand(4, 1, 16, 16))
    card = save_version(tmp_path / "n", model.eval(), None, {**_card(), "neck": "bn-linear"})
    loaded, loaded_card = load_version(tmp_path / "n")
    assert card.neck == loaded_card.neck == loaded.neck == "bn-linear"
    x = torch.rand(2, 1, 16, 16) * 2 - 1
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))
    # a card written before the field existed is the BNNeck it was trained with
    folder = saved[0]
    card_json = json.loads((folder / "card.json").read_text())
    assert "neck" not in _card()
    assert read_card(folder).neck == "linear-bn"
    # a card that names the wrong neck cannot load the weights
    card_json["neck"] = "bn-linear"
    (folder / "card.json").write_text(json.dumps(card_json))
    with pytest.raises(BadInputError, match="architecture"):
        load_version(folder)


def test_card_architecture_mismatch_is_bad_input(saved):
    folder = saved[0]
    card = json.loads((folder / "card.json").read_text())
    card["dim"] = 16
    (folder / "card.json").write_text(json.dumps(card))
    with pytest.raises(BadInputError, match="architecture"):
        load_version(folder)


def test_version_without_head(tmp_path):
    model = build_embedding_model("tiny", 8, in_channels=1, image_size=16)
    card = {**_card(), "head": None}
    save_version(tmp_path / "v0", model, None, card)
    load_version(tmp_path / "v0")
    with pytest.raises(BadInputError, match="without a classifier"):
        load_head(tmp_path / "v0")


def test_frozen_parent_has_no_gradients_and_caches_features(saved):
    parent = FrozenParent.load(saved[0])
    assert all(not p.requires_grad for p in parent.model.parameters())
    assert not parent.model.training
    x = torch.rand(3, 1, 16, 16) * 2 - 1
    out = parent.embed(x)
    assert not out.requires_grad and not out.is_inference()
    images = torch.randint(0, 256, (5, 16, 16, 1), dtype=torch.uint8)
    a = parent.features(images, key="k")
    b = parent.features(images, key="k")
    assert a is b and parent.forward_calls == 2
    assert torch.allclose(a.norm(dim=1), torch.ones(5), atol=1e-5)


def test_parent_bf16_forward_on_cpu_is_close_and_float32(saved):
    fp32 = FrozenParent.load(saved[0], cpu_bf16=False)
    bf16 = FrozenParent.load(saved[0], cpu_bf16=True)
    x = torch.rand(4, 1, 16, 16) * 2 - 1
    a, b = fp32.embed(x), bf16.embed(x)
    assert b.dtype == torch.float32 and not b.requires_grad
    assert torch.nn.functional.cosine_similarity(a, b).min() > 0.99
    off = FrozenParent.load(saved[0], amp=False, cpu_bf16=True)  # amp off: float32 everywhere
    assert torch.equal(off.embed(x), a)
