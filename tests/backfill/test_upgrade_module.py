"""psi's architecture, its folded fast path against the eval-mode module, and its files."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from compat.errors import BadInputError, NotFoundError
from compat.maps.psi import (
    UpgradeModule,
    load_upgrade,
    read_upgrade_card,
    upgrade_array,
    upgrade_folder,
)


def test_architecture_is_three_linear_bn_relu_blocks_then_linear():
    psi = UpgradeModule(8, 12, hidden=32)
    kinds = [type(m) for m in psi.net]
    assert kinds == [nn.Linear, nn.BatchNorm1d, nn.ReLU] * 3 + [nn.Linear]
    assert psi.net[0].in_features == 8 and psi.net[0].out_features == 32
    assert psi.net[-1].in_features == 32 and psi.net[-1].out_features == 12
    assert psi(torch.randn(5, 8)).shape == (5, 12)
    assert len([m for m in UpgradeModule(4, 4, 8, blocks=2).net if isinstance(m, nn.Linear)]) == 3


def test_folded_fast_path_equals_the_eval_module(kit):
    torch.manual_seed(0)
    psi = kit.trained_bn(UpgradeModule(8, 6, hidden=24), 8)
    x = kit.unit(np.random.default_rng(1).standard_normal((37, 8)))
    with torch.no_grad():
        slow = psi.upgrade(torch.from_numpy(x)).numpy()  # the plain eval-mode reference
    fast = upgrade_array(psi, x)
    np.testing.assert_allclose(fast, slow, atol=2e-6)
    pieces = [upgrade_array(psi, x[s : s + 10], start=s) for s in range(0, len(x), 10)]
    np.testing.assert_array_equal(np.concatenate(pieces), fast)  # one partial piece of 7
    np.testing.assert_allclose(np.linalg.norm(fast, axis=1), 1.0, atol=1e-6)
    assert fast.dtype == np.float32


def test_upgrade_array_rejects_rows_of_another_width():
    with pytest.raises(BadInputError, match="psi expects"):
        upgrade_array(UpgradeModule(8, 8, 8).eval(), np.zeros((3, 5), np.float32))


def test_save_load_round_trip_and_tamper_check(tmp_path, kit):
    folder = upgrade_folder(tmp_path / "models", "v2")
    assert folder == tmp_path / "models" / "v2" / "upgrade"
    psi, card = kit.make_psi(folder, in_dim=8, out_dim=4, hidden=16)
    assert card.kind == "upgrade" and (card.in_dim, card.out_dim) == (8, 4)
    assert card.from_ == "v1" and card.to == "v2" and len(card.weights_sha256) == 64
    loaded, card2 = load_upgrade(folder)
    assert card2 == card and not loaded.training
    x = torch.randn(4, 8)
    with torch.no_grad():
        torch.testing.assert_close(loaded.upgrade(x), psi.upgrade(x))

    blob = bytearray((folder / "weights.safetensors").read_bytes())
    blob[-1] ^= 1
    (folder / "weights.safetensors").write_bytes(bytes(blob))
    with pytest.raises(BadInputError, match=r"does not match card\.json"):
        load_upgrade(folder)


def test_card_errors(tmp_path):
    with pytest.raises(NotFoundError):
        read_upgrade_card(tmp_path / "nowhere")
    (tmp_path / "card.json").write_text(json.dumps({"backbone": "tiny"}))
    with pytest.raises(BadInputError, match="not an upgrade module card"):
        read_upgrade_card(tmp_path)
    (tmp_path / "card.json").write_text(json.dumps({"kind": "upgrade", "from": "v1"}))
    with pytest.raises(BadInputError, match=r"card\.json: to: missing field$"):
        read_upgrade_card(tmp_path)
