from __future__ import annotations

import json

import pytest
import torch

from compat.errors import BadInputError
from compat.train.checkpoint import (
    flatten_optimizer,
    load_checkpoint,
    save_checkpoint,
    unflatten_optimizer,
)


@pytest.mark.parametrize("kind", ["adamw", "sgd"])
def test_optimizer_state_roundtrips_without_pickle(kind):
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    opt = (
        torch.optim.AdamW(net.parameters(), lr=0.1)
        if kind == "adamw"
        else torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    )
    for _ in range(2):
        opt.zero_grad()
        net(torch.randn(4, 3)).sum().backward()
        opt.step()
    tensors, meta = flatten_optimizer(opt.state_dict())
    meta = json.loads(json.dumps(meta))  # must survive JSON
    opt2 = type(opt)(net.parameters(), lr=0.5)
    opt2.load_state_dict(unflatten_optimizer(tensors, meta))
    a, b = opt.state_dict(), opt2.state_dict()
    assert a["param_groups"] == b["param_groups"]
    for pid, st in a["state"].items():
        for k, v in st.items():
            assert (
                torch.equal(v, b["state"][pid][k])
                if isinstance(v, torch.Tensor)
                else v == b["state"][pid][k]
            )


def test_tampered_checkpoint_is_refused(tmp_path):
    save_checkpoint(tmp_path, {"w": torch.ones(3)}, {"epoch": 1})
    tensors, meta = load_checkpoint(tmp_path)
    assert torch.equal(tensors["w"], torch.ones(3)) and meta["epoch"] == 1
    save_checkpoint(tmp_path, {"w": torch.zeros(3)}, {"epoch": 2})
    assert sorted(p.name for p in tmp_path.glob("*.safetensors")) == ["epoch-0002.safetensors"]
    path = tmp_path / "epoch-0002.safetensors"
    blob = bytearray(path.read_bytes())
    blob[-1] ^= 1
    path.write_bytes(bytes(blob))
    with pytest.raises(BadInputError, match="refusing to resume"):
        load_checkpoint(tmp_path)
    assert load_checkpoint(tmp_path / "none") is None
