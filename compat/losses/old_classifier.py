"""The parent's classifier, frozen and re-indexed to the new version's classes (BCT, Eq. 8).

BCT's influence loss scores new embeddings with the old classifier. Classes the parent never saw
have no old weights; BCT either synthesizes them ("sys", Sec. 3.3) or drops their samples from the
influence term. A synthesized row is, by default (``synthesis="normalised"``), the normalised
mean of the parent's normalised embeddings of that class's training images, scaled to the old
rows' mean norm with the old biases' mean as its bias where the head has biases (a plain mean of raw features has another
scale than the trained rows of a linear head); ``synthesis="mean"`` is the paper's and openBCT's
row, the plain mean of the parent's (L2-normalised) embeddings, neither re-normalised nor
rescaled, bias 0. A d-Simplex parent needs neither: its K vertices are pre-allocated, and a
new version's class order extends its parent's, so new classes take the next free vertices.
"""

from __future__ import annotations

from typing import Annotated, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from compat.errors import BadInputError
from compat.functional.align import fit_width
from compat.functional.influence import bct_influence
from compat.functional.prototypes import class_means, synthesized_rows
from compat.losses.base import MethodContext
from compat.models.heads import DSimplex, Head, Softmax

# The ``synthesis`` param of every method that synthesizes old rows (bct, bict, bct-kd).
Synthesis = Annotated[
    Literal["normalised", "mean"],
    Field(
        description="how a synthesized row is made (new_classes: synthesize): 'normalised' "
        "(compat's default) the normalised mean of the parent's normalised embeddings, scaled to "
        "the old rows' mean norm, bias the old biases' mean; 'mean' the paper's and openBCT's "
        "form, the plain mean of the parent's (unit) embeddings, bias 0 (docs/reference.md, bct)"
    ),
]


class OldClassifier(nn.Module):
    """Frozen old classifier over the new class order; built by :meth:`build` in ``prepare``.

    ``old_index[c]`` is the old-classifier row of new class ``c`` (-1: dropped); rows below
    ``num_parent`` are classes the parent was trained on. ``head`` scores
    new embeddings (columns aligned to the new dim by ``dim_mismatch``); ``teacher`` scores parent
    embeddings (the parent's own dim), for KD-style terms.
    """

    def __init__(
        self,
        new_classes: str = "synthesize",
        dim_mismatch: str = "truncate",
        synthesis: str = "normalised",
    ) -> None:
        super().__init__()
        self.new_classes = new_classes
        self.synthesis = synthesis
        self.dim_mismatch = dim_mismatch
        self.head: Head | None = None
        self.teacher: Head | None = None
        self.register_buffer("old_index", torch.empty(0, dtype=torch.long))
        self.num_synthesized = 0
        self.num_parent = 0

    def build(self, ctx: MethodContext) -> None:
        parent = ctx.parent
        if parent is None or parent.head is None:
            raise BadInputError("the parent has no classifier head to build an old classifier from")
        old_head = parent.head
        weight = old_head.weight_matrix().detach().float()
        raw = isinstance(old_head, Softmax)  # softmax or linear: rows are not unit vectors
        bias = old_head.fc.bias if raw else None
        bias = None if bias is None else bias.detach().float()
        parent_pos = {c: i for i, c in enumerate(parent.classes)}
        self.num_parent = len(parent.classes)
        index = torch.full((len(ctx.classes),), -1, dtype=torch.long)
        new_cls = [c for c, name in enumerate(ctx.classes) if name not in parent_pos]
        for c, name in enumerate(ctx.classes):
            if name in parent_pos:
                index[c] = parent_pos[name]

        if isinstance(old_head, DSimplex):
            # Pre-allocated vertices: new classes take the next free ones, in the new order.
            free = len(parent.classes)
            for c in new_cls:
                if free < weight.shape[0]:
                    index[c] = free
                    free += 1
        elif new_cls and self.new_classes == "synthesize":
            weight, bias = self._synthesize(ctx, weight, bias, new_cls, index, raw=raw)

        self.old_index = index.to(ctx.device)
        self.teacher = old_head.frozen_copy(weight.to(ctx.device), _to(bias, ctx.device))
        d_new, d_old = ctx.dim, weight.shape[1]
        k = min(d_new, d_old) if self.dim_mismatch == "truncate" else max(d_new, d_old)
        aligned = weight[:, :k] if k <= d_old else F.pad(weight, (0, k - d_old))
        self.head = old_head.frozen_copy(aligned.to(ctx.device), _to(bias, ctx.device))

    def _synthesize(
        self,
        ctx: MethodContext,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        new_cls: list[int],
        index: torch.Tensor,
        raw: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert ctx.parent is not None
        k_old = weight.shape[0]
        slot = torch.full((len(ctx.classes),), -1, dtype=torch.long)
        slot[new_cls] = torch.arange(len(new_cls))
        rows = torch.nonzero(slot[ctx.targets] >= 0).flatten()
        # Un-augmented images, embedded once per run by the frozen parent.
        feats = ctx.parent.features(ctx.images[rows], key="bct-synthesize").cpu()
        labels = slot[ctx.targets[rows]]
        if self.synthesis == "mean":  # the paper's and openBCT's row: the plain class mean
            synth = class_means(feats.float(), labels, len(new_cls))
            new_bias = torch.zeros(len(new_cls)) if bias is not None else None
        else:
            # A softmax classifier's rows are not unit vectors: match the old rows' mean norm.
            norm = float(weight.norm(dim=1).mean()) if raw else 1.0
            synth = synthesized_rows(feats, labels, len(new_cls), norm=norm)
            new_bias = bias.mean().expand(len(new_cls)) if bias is not None else None
        if bias is not None:
            bias = torch.cat([bias, new_bias])
        index[new_cls] = k_old + torch.arange(len(new_cls))
        self.num_synthesized = len(new_cls)
        return torch.cat([weight, synth]), bias

    def align(self, new: torch.Tensor) -> torch.Tensor:
        """The new embedding in the old head's width (truncated or zero-padded)."""
        assert self.head is not None
        return fit_width(new, self.head.dim)

    def influence(self, new: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """BCT Eq. (8)'s influence term: the old head's loss on the new embeddings.

        Samples whose class has no old row are dropped; the mean is over the kept samples.
        """
        assert self.head is not None
        return bct_influence(new, self.old_index[targets], self.head)


def _to(t: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    return None if t is None else t.to(device)


__all__ = ["OldClassifier", "Synthesis", "class_means"]
