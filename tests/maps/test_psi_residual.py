"""psi's identity start (a residual map whose branch starts at zero), its fast path, its card,
and a bad psi card ending in one line and exit 4 (never a traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from compat.cli.main import app
from compat.embeddings.bundle import EmbeddingBundle, save_bundle
from compat.errors import BadInputError
from compat.maps.psi import UpgradeModule, load_upgrade, save_upgrade, upgrade_array
from compat.models.card import read_upgrade_card


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _stir(psi: UpgradeModule, seed: int = 0) -> UpgradeModule:
    """Move every weight (and the BatchNorm statistics) off their start."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in psi.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3)
        psi.train()
        for _ in range(3):
            psi(torch.randn(32, psi.in_dim, generator=g))
    return psi.eval()


@pytest.mark.parametrize("train_mode", [True, False])
def test_residual_psi_is_the_identity_at_init(train_mode):
    torch.manual_seed(0)
    psi = UpgradeModule(8, 8, hidden=16, residual=True).train(train_mode)
    x = torch.randn(10, 8)
    with torch.no_grad():
        assert torch.equal(psi(x), x)  # exactly: the branch's output layer is zero
    stored = _unit(np.random.default_rng(0).standard_normal((7, 8)))
    np.testing.assert_allclose(upgrade_array(psi.eval(), stored), stored, atol=1e-6)


def test_plain_psi_is_not_the_identity_and_residual_needs_equal_dims():
    torch.manual_seed(0)
    x = torch.randn(10, 8)
    with torch.no_grad():
        assert not torch.allclose(UpgradeModule(8, 8, hidden=16).eval()(x), x)
    with pytest.raises(ValueError, match="in_dim == out_dim"):
        UpgradeModule(8, 6, residual=True)


def test_residual_fast_path_equals_the_eval_module():
    torch.manual_seed(1)
    psi = _stir(UpgradeModule(8, 8, hidden=24, residual=True))
    x = _unit(np.random.default_rng(1).standard_normal((37, 8)))
    with torch.no_grad():
        slow = psi.upgrade(torch.from_numpy(x)).numpy()  # the plain eval-mode reference
    fast = upgrade_array(psi, x)
    np.testing.assert_allclose(fast, slow, atol=2e-6)
    # any batching of the rows gives the same bits (each row is computed in its fixed block)
    pieces = [upgrade_array(psi, x[s : s + 10], start=s) for s in range(0, len(x), 10)]
    np.testing.assert_array_equal(np.concatenate(pieces), fast)
    assert not np.allclose(slow, x, atol=1e-2)  # the stirred branch does something


def test_card_records_residual_and_old_cards_load_the_plain_mlp(tmp_path):
    torch.manual_seed(2)
    psi = _stir(UpgradeModule(6, 6, hidden=8, residual=True))
    card = save_upgrade(tmp_path / "r", psi, {"from": "v1", "to": "v2"})
    assert card.residual is True and card.refused is None and not card.is_refused
    loaded, _ = load_upgrade(tmp_path / "r")
    x = torch.randn(5, 6)
    with torch.no_grad():
        torch.testing.assert_close(loaded.upgrade(x), psi.upgrade(x))
    # A card written before `residual` existed names no such field: the plain MLP.
    plain = _stir(UpgradeModule(6, 6, hidden=8))
    save_upgrade(tmp_path / "p", plain, {"from": "v1", "to": "v2"})
    data = json.loads((tmp_path / "p" / "card.json").read_text())
    del data["residual"]
    (tmp_path / "p" / "card.json").write_text(json.dumps(data))
    loaded, card = load_upgrade(tmp_path / "p")
    assert card.residual is None and not loaded.residual
    with torch.no_grad():
        torch.testing.assert_close(loaded.upgrade(x), plain.upgrade(x))


def test_a_card_claiming_residual_across_two_widths_is_bad_input(tmp_path):
    save_upgrade(tmp_path, UpgradeModule(6, 4, hidden=8).eval(), {"from": "v1", "to": "v2"})
    data = json.loads((tmp_path / "card.json").read_text())
    (tmp_path / "card.json").write_text(json.dumps({**data, "residual": True}))
    with pytest.raises(BadInputError, match=r"card\.json: residual: .*in_dim == out_dim"):
        load_upgrade(tmp_path)


BAD_FIELDS = [
    ("in_dim", "abc", r"in_dim: Input should be a valid integer"),
    ("hidden", -3, r"hidden: Input should be greater than or equal to 1"),
    ("blocks", 0, r"blocks: Input should be greater than or equal to 1"),
]


def _bad_psi(folder: Path, field: str, value: object) -> None:
    torch.manual_seed(0)
    save_upgrade(folder, UpgradeModule(8, 8, hidden=16).eval(), {"from": "v1", "to": "v2"})
    data = json.loads((folder / "card.json").read_text())
    (folder / "card.json").write_text(json.dumps({**data, field: value}))


@pytest.mark.parametrize(("field", "value", "message"), BAD_FIELDS)
def test_a_bad_psi_card_field_is_bad_input_naming_file_and_field(tmp_path, field, value, message):
    _bad_psi(tmp_path, field, value)
    with pytest.raises(BadInputError, match=rf"{tmp_path / 'card.json'}: {message}"):
        read_upgrade_card(tmp_path)
    with pytest.raises(BadInputError, match=message):
        load_upgrade(tmp_path)


@pytest.mark.parametrize(("field", "value", "message"), BAD_FIELDS[:2])
def test_backfill_with_a_bad_psi_card_exits_4_with_one_line(
    tmp_path, monkeypatch, field, value, message
):
    """Issue 15 item 6: `in_dim: "abc"` and `hidden: -3` ended in a traceback with exit 1."""
    monkeypatch.chdir(tmp_path)
    _bad_psi(tmp_path / "psi", field, value)
    emb = _unit(np.random.default_rng(0).standard_normal((12, 8)))
    save_bundle(
        tmp_path / "g.npz", EmbeddingBundle(embeddings=emb, labels=np.arange(12), version="v1")
    )
    args = ["backfill", "-g", "g.npz", "--from", "v1", "--to", "v2", "-o", "out.npz"]
    r = CliRunner().invoke(app, [*args, "--psi", "psi", "--no-progress"])
    assert r.exit_code == 4, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: psi/card.json: "), r.output
    assert message.split(":")[0] in lines[0]
    assert not (tmp_path / "out.npz").exists()
