"""drift.py: BatchNorm statistics re-estimated on a split, on a hand-computed case."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from seq_scripts import script
from torch import nn

from compat.errors import BadInputError


@pytest.fixture(scope="module")
def drift():
    return script("drift")


def _bn_model():
    model = nn.Sequential(nn.BatchNorm2d(1), nn.Flatten())
    with torch.no_grad():
        model[0].weight.fill_(2.0)
        model[0].running_mean.fill_(7.0)
    return model


# to_tensor maps uint8 to [-1, 1]: 0 -> -1, 255 -> 1; every image is 2 x 2 pixels
IMAGES = {"a": np.zeros((2, 2, 1), np.uint8), "b": np.full((2, 2, 1), 255, np.uint8)}


def _load(ids):
    return np.stack([IMAGES[i[0]] for i in ids])


def test_reestimate_bn_hand_computed_and_keeps_weights(drift):
    model = _bn_model()
    # one batch of 2 a's and 2 b's: 8 pixels at -1, 8 at 1; mean 0, unbiased variance 16/15
    out = drift.reestimate_bn(model, _load, ["a1", "a2", "b1", "b2"], batch_size=4)
    assert out[0].running_mean.item() == pytest.approx(0.0)
    assert out[0].running_var.item() == pytest.approx(16 / 15)
    assert out[0].weight.item() == 2.0 and not out.training
    assert model[0].running_mean.item() == 7.0  # the original is untouched
    with pytest.raises(BadInputError, match="no BatchNorm"):
        drift.reestimate_bn(nn.Flatten(), _load, ["a1"])


def test_reestimate_bn_shuffles_so_class_sorted_items_do_not_hide_variance(drift):
    items = [f"a{i}" for i in range(64)] + [f"b{i}" for i in range(64)]
    stats = []
    for order in (items, items[::-1]):
        out = drift.reestimate_bn(_bn_model(), _load, order, batch_size=16)
        stats.append((out[0].running_mean.item(), out[0].running_var.item()))
    assert stats[0] == stats[1]  # the given order does not matter
    # in class-sorted batches of 16 every batch variance is 0; shuffled, near the total 1.0
    assert stats[0][1] > 0.8


def test_missing_data_is_a_one_line_error(drift, tmp_path, capsys):
    code = drift.main(["a", "b", "--split", "t1", "--source", str(tmp_path / "source.json")])
    assert code == 3
    err = capsys.readouterr().err.strip()
    assert err.startswith("drift: ") and "source.json" in err and "\n" not in err
