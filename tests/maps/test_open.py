"""One interface to every map between spaces (compat.maps.open_map): psi's folder and a
compat.maps map folder open as the same kind of object and give the rows the direct loads give,
bit for bit; a folder holding neither card is a clear error naming the folder."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from compat.errors import BadInputError, NotFoundError
from compat.maps import Joins, SpaceMap, fit_map, load_map, open_card, open_map, save_map
from compat.maps.card import MAP_KINDS, MapCard
from compat.maps.psi import UpgradeModule, load_upgrade, save_upgrade, upgrade_array
from compat.models.card import UpgradeCard
from tests.maps.conftest import drifted_pairs, unit

INTERFACE = ("kind", "role", "from_", "to", "in_dim", "out_dim", "weights_sha256", "refused")


@pytest.fixture()
def psi_folder(tmp_path):
    torch.manual_seed(0)
    psi = UpgradeModule(16, 16, 32)
    with torch.no_grad():
        for p in psi.parameters():
            p.add_(0.1 * torch.randn_like(p))  # not the identity
    folder = tmp_path / "models" / "v2" / "upgrade"
    save_upgrade(
        folder, psi.eval(),
        {"from": "v1", "to": "v2", "from_weights_sha256": "a" * 64, "to_weights_sha256": "b" * 64},
    )  # fmt: skip
    return folder


@pytest.fixture()
def map_folder(tmp_path):
    new, old, labels, _ = drifted_pairs(n=400, d_new=16, d_old=16)
    fitted = fit_map(
        "procrustes", old, new, labels=labels.tolist(), role="gallery-map", from_name="v1",
        to_name="v2",
    )  # fmt: skip
    save_map(tmp_path / "maps" / "v1-to-v2", fitted)
    return tmp_path / "maps" / "v1-to-v2"


def _rows(n: int = 700, d: int = 16) -> np.ndarray:
    return unit(np.random.default_rng(3).standard_normal((n, d)))


def _batched(m, x: np.ndarray, size: int) -> np.ndarray:
    return np.concatenate([m.apply(x[s : s + size], start=s) for s in range(0, len(x), size)])


def test_a_psi_folder_opens_as_the_direct_load_applies(psi_folder):
    x = _rows()
    psi, card = load_upgrade(psi_folder)
    direct = upgrade_array(psi, x)
    opened = open_map(psi_folder)
    assert np.array_equal(opened.apply(x), direct)
    assert np.array_equal(_batched(opened, x, 77), direct)  # fixed row blocks, any batching
    assert (opened.kind, opened.role, opened.from_, opened.to) == ("upgrade", "gallery-map",
                                                                   "v1", "v2")  # fmt: skip
    assert (opened.in_dim, opened.out_dim, opened.refused) == (16, 16, None)
    assert opened.weights_sha256 == card.weights_sha256
    assert opened.provenance(str(psi_folder)) == card.provenance(str(psi_folder))
    assert isinstance(open_card(psi_folder), UpgradeCard)


def test_a_map_folder_opens_as_the_direct_load_applies(map_folder):
    x = _rows()
    direct = load_map(map_folder).apply(x)
    opened = open_map(map_folder)
    assert np.array_equal(opened.apply(x), direct)
    assert np.array_equal(_batched(opened, x, 77), direct)
    card = load_map(map_folder).card
    assert {a: getattr(opened, a) for a in INTERFACE} == {
        "kind": "procrustes", "role": "gallery-map", "from_": "v1", "to": "v2", "in_dim": 16,
        "out_dim": 16, "weights_sha256": card.weights_sha256, "refused": None,
    }  # fmt: skip
    assert opened.provenance(map_folder) == card.provenance(map_folder)
    assert isinstance(open_card(map_folder), MapCard)


def test_both_answer_the_same_interface(psi_folder, map_folder):
    for folder in (psi_folder, map_folder):
        opened = open_map(folder)
        assert isinstance(opened, SpaceMap) and opened.folder == folder
        for name in (*INTERFACE, "held_out_lower_bound", "card", "applier"):
            getattr(opened, name)
        opened.check_serves(
            "gallery-map", 16, "v1's embeddings", 16, joins=Joins(source="v1", target="v2")
        )
        with pytest.raises(BadInputError, match=r"card\.json: role: .*query-adapter map is needed"):
            opened.check_serves("query-adapter", 16, "v3's embeddings", 16)


def test_a_folder_with_neither_card_is_an_error_naming_the_folder(tmp_path):
    empty = tmp_path / "nothing"
    empty.mkdir()
    for call in (open_map, open_card):
        with pytest.raises(NotFoundError) as err:
            call(empty)
        assert f"{empty} holds neither psi nor a fitted map" in str(err.value)
    model = tmp_path / "model"
    model.mkdir()
    (model / "card.json").write_text(json.dumps({"backbone": "tiny", "dim": 8}))
    with pytest.raises(BadInputError) as err:
        open_map(model)
    assert str(err.value).startswith(f"{model / 'card.json'}: kind: neither psi's upgrade card")
    assert f"{model} holds neither psi nor a fitted map" in str(err.value)


def test_every_card_kind_opens_through_the_catalog():
    """open_map and open_card look the card's kind up in one catalog: psi's upgrade card and
    every fitted kind, nothing else (a kind that is no string is refused like an unknown one)."""
    from compat.maps.folder import FOLDER_KINDS
    from compat.maps.kinds import KINDS
    from compat.models.card import UPGRADE_KIND

    assert FOLDER_KINDS.names() == sorted([UPGRADE_KIND, *MAP_KINDS])
    assert set(KINDS.names()) == set(MAP_KINDS)  # psi is opened here, never fitted by fit_map


@pytest.mark.parametrize("kind", ["upgrade-v0", ["procrustes"], {"kind": "affine"}, None])
def test_a_card_of_no_known_kind_is_refused_naming_both(tmp_path, kind):
    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "card.json").write_text(json.dumps({"kind": kind}))
    for call in (open_map, open_card):
        with pytest.raises(BadInputError) as err:
            call(folder)
        assert str(err.value) == (
            f"{folder / 'card.json'}: kind: neither psi's upgrade card nor a map card (kind "
            f"{kind!r}; psi's is 'upgrade', a map's one of procrustes, affine, residual-mlp): "
            f"{folder} holds neither psi nor a fitted map"
        )


def test_the_card_alone_needs_no_torch(heavy_imports):
    assert heavy_imports("compat.maps", "compat.maps.folder", heavy=("torch",)) == []


def test_psi_keeps_its_checks_and_a_refused_psi_is_served(psi_folder):
    opened = open_map(psi_folder)
    where = psi_folder / "card.json"
    with pytest.raises(BadInputError, match=r"psi upgrades v1 -> v2, the contract needs v0 -> v2"):
        opened.check_serves(
            "gallery-map",
            joins=Joins(source="v0", target="v2", wanted="the contract needs v0 -> v2"),
        )
    with pytest.raises(BadInputError) as err:
        opened.check_serves("gallery-map", joins=Joins(
            target="v2", from_weights="c" * 64, weights_origin="the registered ones are"
        ))  # fmt: skip
    assert str(err.value) == (
        f"{where}: from_weights_sha256: psi was fitted on v1 weights {'a' * 12}..., but the "
        f"registered ones are {'c' * 12}...; re-run upgrade@v2"
    )
    with pytest.raises(BadInputError, match=r"out_dim: the map writes 16-dim rows, .* is 8-dim"):
        opened.check_serves("gallery-map", 16, "v1's embeddings", 8)
    card = json.loads(where.read_text())
    card["refused"] = {"reason": "no gain", "metric": "top1"}
    where.write_text(json.dumps(card))
    refused = open_map(psi_folder)
    assert refused.refused == "no gain"
    refused.check_serves("gallery-map", 16, "v1's embeddings", 16)  # the identity: served


def test_a_refused_map_is_never_served_unless_measured(tmp_path):
    new, old, labels, _ = drifted_pairs(n=400, d_new=16, d_old=16)
    noise = np.random.default_rng(5).permutation(new)
    fitted = fit_map("affine", old, noise, labels=labels.tolist(), role="gallery-map")
    assert fitted.card.refused is not None
    save_map(tmp_path / "bad", fitted)
    opened = open_map(tmp_path / "bad")
    with pytest.raises(BadInputError, match=r"bad/card\.json: refused: .*never served"):
        opened.check_serves("gallery-map", 16, "the rows", 16)
    opened.check_serves("gallery-map", 16, "the rows", 16, allow_refused=True)


def test_score_takes_a_query_adapter_only(tmp_path, psi_folder, map_folder):
    """compat score --query-adapter opens any map folder: a gallery map (psi's or not) maps
    stored rows, not queries, and is bad input (exit 4) naming its card."""
    from typer.testing import CliRunner

    from compat.cli.main import app

    q = tmp_path / "q.npz"
    with open(q, "wb") as f:
        np.savez(f, embeddings=_rows(40), labels=np.repeat(np.arange(10), 4))
    for folder in (psi_folder, map_folder):
        r = CliRunner().invoke(app, ["score", "-q", str(q), "-g", str(q), "--query-adapter",
                                     str(folder)])  # fmt: skip
        assert r.exit_code == 4, r.output
        assert f"{folder / 'card.json'}: role:" in r.stderr and "query-adapter" in r.stderr
