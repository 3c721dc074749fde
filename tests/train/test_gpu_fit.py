"""On a CUDA machine: bf16 autocast + channels-last training, a parent on the GPU, save/load."""

from __future__ import annotations

import pytest
import torch
from train_synthetic import make_images

from compat.models import load_version
from compat.train import DataInfo, TrainConfig, train_arrays

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.parametrize("method", ["bct", "contrastive", "unibct"])
def test_cuda_bf16_training_with_parent(tmp_path, method):
    images, labels = make_images(num_classes=6, per_class=16, size=16, channels=3)
    base = dict(backbone="tiny", dim=8, batch_size=32, epochs=2, device="cuda")
    old = [i for i, lab in enumerate(labels) if int(lab[1:]) < 3]
    old_labels = [labels[i] for i in old]
    info1 = DataInfo("v1", "f1", "s", sorted(set(old_labels)))
    train_arrays(
        "v1", TrainConfig(**base), images[old], old_labels, info1, models_dir=tmp_path, quiet=True
    )
    info2 = DataInfo("v2", "f2", "s", sorted(set(labels)))
    card = train_arrays("v2", TrainConfig(**base, method=method, parent="v1"), images, labels, info2,
                        models_dir=tmp_path, quiet=True)  # fmt: skip
    assert card.device.startswith("cuda")
    model, _ = load_version(tmp_path / "v2")  # loads on the CPU
    with torch.no_grad():
        assert torch.isfinite(model(torch.zeros(2, 3, 16, 16))).all()
