"""Maps on disk (weights, then card; sha256 checked on load) and applied over fixed row blocks
(bit-identical whatever the batching)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from compat.errors import BadInputError, NotFoundError
from compat.maps import fit_map, load_map, save_map
from tests.maps.conftest import drifted_pairs

KINDS = {
    "procrustes": {"scaling": True},
    "affine": {"rank": 8},
    "residual-mlp": {"epochs": 2, "hidden": 16, "device": "cpu"},
}


@pytest.fixture(scope="module")
def fitted():
    new, old, labels, _ = drifted_pairs(n=600, d_new=24, d_old=16)
    return new, {
        k: fit_map(k, new, old, labels=labels.tolist(), params=p) for k, p in KINDS.items()
    }


@pytest.mark.parametrize("kind", list(KINDS))
def test_save_load_round_trip(tmp_path, fitted, kind):
    new, maps = fitted
    m = maps[kind]
    save_map(tmp_path / "a", m)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        "card.json",
        "weights.safetensors",
    ]
    back = load_map(tmp_path / "a")
    assert back.card == m.card and back.folder == tmp_path / "a"
    assert np.array_equal(back.apply(new), m.apply(new))
    save_map(tmp_path / "b", back)  # the same bytes again
    assert (tmp_path / "a" / "weights.safetensors").read_bytes() == (
        tmp_path / "b" / "weights.safetensors"
    ).read_bytes()


@pytest.mark.parametrize("kind", list(KINDS))
def test_apply_is_bit_identical_across_batch_sizes(fitted, kind):
    new, maps = fitted
    m = maps[kind]
    whole = m.apply(new)
    assert whole.dtype == np.float32 and np.allclose(np.linalg.norm(whole, axis=1), 1, atol=1e-5)
    for size in (1, 7, 100, 255, 257):
        parts = [m.apply(new[s : s + size], start=s) for s in range(0, len(new), size)]
        assert np.array_equal(np.concatenate(parts), whole), size
    # any scale reaches unit length first, as galleries store rows
    assert np.allclose(m.apply(new[:300] * 1e20)[:3], whole[:3], atol=1e-6)


def test_changed_weights_are_refused(tmp_path, fitted):
    _, maps = fitted
    save_map(tmp_path, maps["affine"])
    w = tmp_path / "weights.safetensors"
    blob = bytearray(w.read_bytes())
    blob[-1] ^= 0x01
    w.write_bytes(bytes(blob))
    with pytest.raises(BadInputError, match=r"weights\.safetensors: sha256 .* does not match") as e:
        load_map(tmp_path)
    assert e.value.exit_code == 4


def test_a_card_that_lies_about_the_shape_is_refused(tmp_path, fitted):
    _, maps = fitted
    save_map(tmp_path, maps["affine"])
    card = json.loads((tmp_path / "card.json").read_text())
    card["in_dim"] = 12
    (tmp_path / "card.json").write_text(json.dumps(card))
    with pytest.raises(BadInputError, match="do not fit the card"):
        load_map(tmp_path)


def test_missing_and_foreign_cards(tmp_path):
    with pytest.raises(NotFoundError, match="map card not found"):
        load_map(tmp_path / "nothing")
    (tmp_path / "card.json").write_text(json.dumps({"kind": "upgrade", "from": "v1"}))
    with pytest.raises(BadInputError, match="kind: not a map card"):
        load_map(tmp_path)
    (tmp_path / "card.json").write_text(json.dumps({"kind": "affine", "extra": 1}))
    with pytest.raises(BadInputError, match=r"card\.json: "):
        load_map(tmp_path)


def test_apply_checks_the_width(fitted):
    _, maps = fitted
    with pytest.raises(BadInputError, match="in_dim: the map takes 24-dim rows"):
        maps["affine"].apply(np.zeros((3, 16), np.float32))
