"""UniBCT's structural prototype refinement: closed form vs the iteration it solves."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from loss_fakes import context, pixel_parent, pixels

from compat.losses import create_loss
from compat.losses.unibct import refine_closed_form, refined_prototypes


def iterate(new, old, lambda_r, tau, steps=500):
    """The reference: V <- lambda_r E V + (1 - lambda_r) V0, run to convergence."""
    a = new @ new.T / tau
    a.fill_diagonal_(float("-inf"))
    e = torch.softmax(a, dim=1)
    v = old.clone()
    for _ in range(steps):
        v = lambda_r * e @ v + (1 - lambda_r) * old
    return v


def test_closed_form_is_the_fixed_point():
    g = torch.Generator().manual_seed(0)
    new = F.normalize(torch.randn(6, 4, generator=g, dtype=torch.float64), dim=1)
    old = F.normalize(torch.randn(6, 3, generator=g, dtype=torch.float64), dim=1)
    closed = refine_closed_form(new, old, 0.9, 0.5)
    assert torch.allclose(closed, iterate(new, old, 0.9, 0.5), atol=1e-10)


def test_single_sample_class_keeps_its_feature():
    old = torch.tensor([[0.6, 0.8]], dtype=torch.float64)
    assert torch.equal(
        refine_closed_form(torch.ones(1, 2, dtype=torch.float64), old, 0.9, 0.05), old
    )


def test_grouped_solve_equals_per_class_loop():
    g = torch.Generator().manual_seed(1)
    labels = torch.tensor([0, 1, 1, 2, 2, 2, 3, 1, 0, 2])
    new = F.normalize(torch.randn(10, 5, generator=g), dim=1)
    old = F.normalize(torch.randn(10, 3, generator=g), dim=1)
    fast = refined_prototypes(new, old, labels, 5, 0.9, 0.5)
    for c in range(4):
        rows = labels == c
        v = (
            iterate(new[rows].double(), old[rows].double(), 0.9, 0.5)
            if rows.sum() > 1
            else old[rows]
        )
        assert torch.allclose(fast[c], F.normalize(v.mean(0), dim=0).float(), atol=1e-5)
    assert torch.equal(fast[4], torch.zeros(3))  # absent class: no prototype


def test_refined_prototype_downweights_an_outlier():
    # three samples agree; the fourth is an outlier both in the new model's graph and in old space
    new = F.normalize(torch.tensor([[1.0, 0.0], [1.0, 0.05], [1.0, -0.05], [0.0, 1.0]]), dim=1)
    old = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    labels = torch.zeros(4, dtype=torch.long)
    vanilla = F.normalize(old.mean(0), dim=0)  # 18.4 degrees off the inliers
    refined = refined_prototypes(new, old, labels, 1, 0.9, 0.05)[0]
    assert refined[1] / refined[0] < 0.5 * vanilla[1] / vanilla[0]


def test_refresh_schedule_and_refresh_replaces_prototypes():
    parent = pixel_parent(["x"], [[1.0, 0.0]])
    # class a: three images whose parent embeddings (the pixels, normalised) are p1 = (1, 1),
    # p2 = (1, -1), p3 = (-1, 1) over sqrt(2): p1 is orthogonal to both, p2 = -p3
    images = pixels((255, 255), (255, 0), (0, 255), (0, 0))
    ctx = context(parent, ["a", "b"], images, ["a", "a", "a", "b"])
    ctx.epochs = 35
    loss = create_loss("unibct")
    loss.prepare(ctx)
    assert loss.refresh_epochs == [10, 20]
    assert create_loss("unibct", {"prototypes": "vanilla"})._refresh_schedule(35) == []
    assert create_loss("unibct", {"refresh_at": [3, 1]})._refresh_schedule(35) == [1, 3]

    class Merged(torch.nn.Module):  # a "new model" whose graph differs from the parent's
        dim = 2

        def forward(self, x):  # (x0, 1): images 1 and 2 coincide, image 3 is orthogonal to them
            v = x.flatten(1)
            return torch.stack([v[:, 0], torch.ones_like(v[:, 0])], dim=1)

    ctx.model = Merged()
    before = loss.prototypes.clone()
    old = F.normalize(torch.tensor([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0]], dtype=torch.float64))
    # at prepare, the parent's own graph stands in for the new model's
    assert torch.allclose(
        before[0].double(), F.normalize(iterate(old, old, 0.9, 0.05).mean(0), dim=0), atol=1e-5
    )
    loss.on_epoch_start(5, ctx)
    assert torch.equal(loss.prototypes, before)  # not a refresh epoch
    loss.on_epoch_start(10, ctx)
    new = F.normalize(torch.tensor([[1.0, 1.0], [1.0, 1.0], [-1.0, 1.0]], dtype=torch.float64))
    expected = F.normalize(iterate(new, old, 0.9, 0.05).mean(0), dim=0)
    assert not torch.allclose(loss.prototypes[0], before[0], atol=1e-2)  # the refresh changed it
    assert torch.allclose(loss.prototypes[0].double(), expected, atol=1e-5)
    assert torch.equal(loss.prototypes[1], before[1])  # a one-image class keeps its feature
    assert parent.forward_calls == 1  # parent features stay cached across refreshes
