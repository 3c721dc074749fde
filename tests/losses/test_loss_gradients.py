"""Gradients reach the new model (and a method's own trainable parts) and never the parent."""

from __future__ import annotations

import pytest
import torch
from loss_fakes import fake_card

from compat.losses import LOSSES, MethodContext, create_loss
from compat.models import FrozenParent, build_embedding_model, create_head
from compat.train.fit import Trainee

CLASSES = ["a", "b", "c", "d"]


def make_parent(head_name: str, dim: int = 8) -> FrozenParent:
    torch.manual_seed(0)
    model = build_embedding_model("tiny", dim, in_channels=1, image_size=8)
    head = create_head(head_name, dim, 3)
    card = fake_card(version="v1", dim=dim, classes=CLASSES[:3], head=head_name)
    return FrozenParent(model, head, card)


@pytest.mark.parametrize("method", LOSSES.names())
def test_gradient_reaches_only_what_it_should(method):
    head_name = "dsimplex" if method == "hoc" else "cosface"
    dim = 8
    parent = make_parent(head_name, dim)
    parent_before = {k: v.clone() for k, v in parent.model.state_dict().items()}
    torch.manual_seed(1)
    model = build_embedding_model("tiny", dim, in_channels=1, image_size=8).train()
    head = create_head(head_name, dim, len(CLASSES))
    images = torch.randint(0, 256, (8, 8, 8, 1), dtype=torch.uint8)
    targets = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    loss = create_loss(method)
    ctx = MethodContext(
        classes=CLASSES,
        images=images,
        targets=targets,
        dim=dim,
        head=head,
        parent=parent,
        model=model,
    )
    loss.prepare(ctx)
    trainee = Trainee(model, head, loss, amp=False)
    x = images.permute(0, 3, 1, 2).float() / 127.5 - 1
    old = parent.embed(x) if loss.needs_parent_forward else None
    parts = trainee(x, targets, old, torch.arange(8))
    assert len(parts) >= (1 if method == "independent" else 2)
    torch.stack(list(parts.values())).sum().backward()

    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    for p in parent.model.parameters():
        assert not p.requires_grad and p.grad is None
    if parent.head is not None:
        assert all(p.grad is None for p in parent.head.parameters())
    for name, buf in loss.named_buffers():
        assert not buf.requires_grad, name
    trainable = [n for n, p in loss.named_parameters() if p.requires_grad]
    if method == "lwf":
        assert trainable and all(p.grad is not None for p in loss.old_head.parameters())
    else:
        assert trainable == [], trainable
    for k, v in parent.model.state_dict().items():
        assert torch.equal(v, parent_before[k]), k  # BN stats too: the parent ran in eval mode
    # Only the methods that compare with the parent's embedding of the batch run its backbone
    # per batch (bct for its l2 term, bict's default regression form); the paper's bct does not.
    if method in ("independent", "unibct"):
        assert not loss.needs_parent_forward
    if method in ("bct", "bict"):
        assert loss.needs_parent_forward
    if method == "bct":
        assert not create_loss("bct", {"l2": 0.0}).needs_parent_forward
