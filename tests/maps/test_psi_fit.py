"""Fitting psi: the loss forms, learning a known map, determinism, the config."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from compat.errors import BadInputError
from compat.maps.psi_config import UpgradeConfig
from compat.maps.psi_fit import fit_upgrade, upgrade_loss


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_losses_by_hand():
    out = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    target = torch.tensor([[0.0, 1.0], [0.0, 1.0]])
    # mse: mean over rows of the squared distance: ((1 + 1) + (0 + 1)) / 2
    assert float(upgrade_loss(out, target, "mse")) == pytest.approx(1.5)
    # cosine: mean of 1 - cos: (1 - 0 + 1 - 1) / 2
    assert float(upgrade_loss(out, target, "cosine")) == pytest.approx(0.5)
    with pytest.raises(BadInputError):
        upgrade_loss(out, target, "l1")


def _pairs(n=400, d=8, d_new=8, seed=0):
    rng = np.random.default_rng(seed)
    old = unit(rng.standard_normal((n, d)))
    m = rng.standard_normal((d, d_new))
    new = unit(np.tanh(old @ m))  # a non-linear map psi can learn
    return old, new


CFG = {"hidden": 32, "epochs": 25, "batch_size": 64, "lr": 3e-3, "device": "cpu"}


@pytest.mark.parametrize("loss", ["mse", "cosine"])
def test_psi_learns_a_map_between_two_spaces(loss):
    old, new = _pairs()
    fit = fit_upgrade(old, new, UpgradeConfig(**CFG, loss=loss), progress=False, quiet=True)
    s = fit.summary
    assert s["num_val"] == 80 and s["num_fit"] == 320  # val_fraction 0.2 of rows (no labels)
    assert s["val_cosine"] > 0.95
    assert s["val_cosine"] > s["val_cosine_without_upgrade"] + 0.3
    assert len(fit.rows) == 25 and fit.rows[-1]["loss"] < fit.rows[0]["loss"]
    assert not fit.psi.training


def test_fit_is_deterministic_for_a_seed():
    old, new = _pairs(n=200, d=6, d_new=4)
    cfg = UpgradeConfig(**{**CFG, "epochs": 3})
    a = fit_upgrade(old, new, cfg, progress=False, quiet=True).psi.state_dict()
    b = fit_upgrade(old, new, cfg, progress=False, quiet=True).psi.state_dict()
    c = fit_upgrade(old, new, cfg, seed=1, progress=False, quiet=True).psi.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)
    assert a["net.0.weight"].shape == (32, 6) and a["net.9.weight"].shape == (4, 32)


def test_fit_rejects_bad_pairs():
    old, new = _pairs(n=20)
    cfg = UpgradeConfig(**{**CFG, "epochs": 1})
    with pytest.raises(BadInputError, match="equal n"):
        fit_upgrade(old, new[:10], cfg, quiet=True)
    bad = old.copy()
    bad[3, 0] = np.nan
    with pytest.raises(BadInputError, match="NaN"):
        fit_upgrade(bad, new, cfg, quiet=True)


def test_config_section():
    cfg = UpgradeConfig.model_validate({"from": "v1", "hidden": 1024, "loss": "cosine"})
    assert cfg.from_ == "v1" and cfg.hidden == 1024 and cfg.blocks == 3
    assert cfg.dump()["from"] == "v1" and "from_" not in cfg.dump()
    assert UpgradeConfig().from_ is None and UpgradeConfig().hidden is None
    with pytest.raises(ValidationError, match="Extra inputs"):
        UpgradeConfig.model_validate({"hiden": 3})
    with pytest.raises(ValidationError):
        UpgradeConfig.model_validate({"loss": "l1"})


def test_config_module_is_import_light(heavy_imports):
    assert heavy_imports("compat.maps.psi_config") == []


def test_a_loss_that_turns_non_finite_stops_the_fit_naming_the_epoch(monkeypatch):
    """Issue 30 case 4 for psi: a loss that turns NaN (a diverging fit) stops the fit at the end
    of that epoch with the epoch and the loss named; no psi is returned, so none is saved."""
    import compat.maps.psi_fit as upgrade

    real = upgrade.upgrade_loss
    monkeypatch.setattr(upgrade, "upgrade_loss", lambda *a: real(*a) * float("nan"))
    old, new = _pairs(n=200)
    with pytest.raises(BadInputError, match=r"^upgrade: epoch 1: loss 'mse' is not finite"):
        fit_upgrade(old, new, UpgradeConfig(**{**CFG, "epochs": 3}), progress=False, quiet=True)


def test_an_absurd_learning_rate_is_refused_at_validation():
    """An lr of 1e38 is finite but overflowed AdamW's step (a torch RuntimeError traceback)."""
    with pytest.raises(ValidationError, match="less than or equal to 1000"):
        UpgradeConfig(lr=1e38)
