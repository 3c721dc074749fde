"""Training heads (classifiers on top of the embedding), built by name.

All but ``softmax`` are margin-softmax heads: features f and class weights w are L2-normalised,
cos(theta_j) = <f, w_j>, and a head only decides what happens to the target logit
(:meth:`MarginHead.margin`), so CosFace or ArcFace is a few lines (pytorch-metric-learning style).

- softmax: logits = W f + b (raw features).
- linear: logits = W f, bias-free, on raw features: the classifier of the IAM-CL2R reference
  code's ER baseline (miccunifi/iamcl2r, ``Incremental_ResNet.fc2``), grown by new rows per task.
- normface (Wang et al., ACM MM 2017, "NormFace"): logits = s cos(theta_j).
- cosface (Wang et al., CVPR 2018, "CosFace", Eq. 4): target logit s (cos(theta_y) - m).
- arcface (Deng et al., CVPR 2019, "ArcFace", Eq. 3): target logit s cos(theta_y + m), with the
  insightface threshold fallback when theta_y + m > pi.
- dsimplex (Biondi et al., "Stationary Representations"; Pernici et al., "Regular Polytope
  Networks"): a fixed, non-trainable classifier W of K = dim + 1 unit vectors with equal pairwise
  angles; K is pre-allocated, so classes that a later version adds already own a direction.
  ``form="linear"`` (default, the paper and its code): logits = W z on the unnormalised feature z,
  plain cross-entropy; ``form="margin"``: a fixed-weight CosFace (scale s, cosine margin m).

Heads compute in float32 even under bf16 autocast: margins on bf16 cosines (3 significant
digits) would be mostly rounding.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from compat.catalog import Catalog
from compat.errors import BadInputError

HEADS: Catalog[Head] = Catalog("head")


class Head(nn.Module):
    """A classifier over ``num_classes`` classes of ``dim``-wide embeddings.

    ``forward(emb, targets)`` returns training logits (margin applied to the target class);
    ``forward(emb)`` returns plain logits (no margin), which is what KD-style losses compare.
    """

    name: str = ""

    def __init__(self, dim: int, num_classes: int) -> None:
        super().__init__()
        if num_classes < 1:
            raise BadInputError(f"head: num_classes must be >= 1, got {num_classes}")
        self.dim = dim
        self.num_classes = num_classes

    def weight_matrix(self) -> torch.Tensor:
        """The (K, dim) class weights (K >= num_classes for dsimplex)."""
        raise NotImplementedError

    def params(self) -> dict[str, Any]:
        """Constructor keyword arguments besides dim and num_classes (recorded in the card)."""
        return {}

    def logits(self, emb: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, emb: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        with torch.autocast(device_type=emb.device.type, enabled=False):
            return self.logits(emb.float(), targets)

    def loss(self, emb: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of the margin logits."""
        return F.cross_entropy(self(emb, targets), targets)

    def frozen_copy(
        self, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None
    ) -> Head:
        """A head of the same kind and params whose weights are ``weight`` (default: its own),
        detached and frozen: the "old classifier" of BCT-style influence losses."""
        raise NotImplementedError


def _scatter_target(
    cos: torch.Tensor, targets: torch.Tensor, new_target: torch.Tensor
) -> torch.Tensor:
    return cos.scatter(1, targets[:, None], new_target)


class MarginHead(Head):
    """Base of the normalised heads: logits = s * cos, with ``margin`` applied to the target."""

    def __init__(self, dim: int, num_classes: int, s: float = 16.0, m: float = 0.0) -> None:
        super().__init__(dim, num_classes)
        self.s = float(s)
        self.m = float(m)

    def margin(self, cos_target: torch.Tensor) -> torch.Tensor:
        """Hook: the target's cosine after the margin (identity = NormFace)."""
        return cos_target

    def params(self) -> dict[str, Any]:
        return {"s": self.s, "m": self.m}

    def cosine(self, emb: torch.Tensor) -> torch.Tensor:
        return F.linear(F.normalize(emb, dim=1), F.normalize(self.weight_matrix(), dim=1))

    def logits(self, emb: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        cos = self.cosine(emb)
        if targets is not None:
            target_cos = cos.gather(1, targets[:, None])
            cos = _scatter_target(cos, targets, self.margin(target_cos))
        return self.s * cos

    def frozen_copy(
        self, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None
    ) -> Head:
        w = (self.weight_matrix() if weight is None else weight).detach().clone()
        copy = FixedMarginHead(self, w)
        return copy.requires_grad_(False)


class LearnedMarginHead(MarginHead):
    def __init__(self, dim: int, num_classes: int, s: float = 16.0, m: float = 0.0) -> None:
        super().__init__(dim, num_classes, s, m)
        self.weight = nn.Parameter(torch.empty(num_classes, dim))
        nn.init.normal_(self.weight, std=0.01)

    def weight_matrix(self) -> torch.Tensor:
        return self.weight


class FixedMarginHead(MarginHead):
    """Frozen weights plus the margin rule of ``like`` (used for old classifiers)."""

    def __init__(self, like: MarginHead, weight: torch.Tensor) -> None:
        super().__init__(weight.shape[1], weight.shape[0], like.s, like.m)
        self.name = like.name
        self._like_margin = like.margin
        self.register_buffer("weight", weight)

    def weight_matrix(self) -> torch.Tensor:
        return self.weight

    def margin(self, cos_target: torch.Tensor) -> torch.Tensor:
        return self._like_margin(cos_target)


@HEADS.register("normface")
class NormFace(LearnedMarginHead):
    """NormFace (Wang et al., 2017): logits = s cos(theta_j), no margin."""

    name = "normface"

    def __init__(self, dim: int, num_classes: int, s: float = 16.0, m: float = 0.0) -> None:
        super().__init__(dim, num_classes, s, 0.0)

    def params(self) -> dict[str, Any]:
        return {"s": self.s}


@HEADS.register("cosface")
class CosFace(LearnedMarginHead):
    """CosFace (Wang et al., CVPR 2018): target logit s (cos(theta_y) - m)."""

    name = "cosface"

    def margin(self, cos_target: torch.Tensor) -> torch.Tensor:
        return cos_target - self.m  # Eq. (4)


@HEADS.register("arcface")
class ArcFace(LearnedMarginHead):
    """ArcFace (Deng et al., CVPR 2019): target logit s cos(theta_y + m).

    cos(theta + m) is not monotonic once theta + m > pi, so past ``th = cos(pi - m)`` the insightface
    code switches to the CosFace-like ``cos(theta) - mm`` with ``mm = sin(pi - m) * m``, which
    keeps the target logit decreasing in theta. ``easy_margin=True`` instead applies the margin
    only where cos(theta) > 0.
    """

    name = "arcface"

    def __init__(
        self,
        dim: int,
        num_classes: int,
        s: float = 16.0,
        m: float = 0.2,
        easy_margin: bool = False,
    ) -> None:
        super().__init__(dim, num_classes, s, m)
        self.easy_margin = bool(easy_margin)
        self.cos_m, self.sin_m = math.cos(m), math.sin(m)
        self.th = math.cos(math.pi - m)
        self.mm = math.sin(math.pi - m) * m

    def params(self) -> dict[str, Any]:
        return {"s": self.s, "m": self.m, "easy_margin": self.easy_margin}

    def margin(self, cos_target: torch.Tensor) -> torch.Tensor:
        # The clamp keeps sqrt's gradient finite at |cos| = 1.
        sine = (1.0 - cos_target * cos_target).clamp(min=1e-12).sqrt()
        phi = cos_target * self.cos_m - sine * self.sin_m  # Eq. (3): cos(theta + m)
        if self.easy_margin:
            return torch.where(cos_target > 0, phi, cos_target)
        return torch.where(cos_target > self.th, phi, cos_target - self.mm)


def simplex_vertices(k: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """K unit vectors in R^(K-1) with pairwise cosine -1/(K-1) (a regular simplex).

    Construction (d = K - 1): rows e_1..e_d of the identity plus the row (1 - sqrt(d+1))/d * 1,
    which makes all pairwise distances equal; subtracting the centroid centres the simplex on the
    origin and L2-normalising puts the vertices on the unit sphere.
    """
    if k < 2:
        raise BadInputError(f"dsimplex: needs K >= 2 classes, got {k}")
    d = k - 1
    rows = torch.cat(
        [torch.eye(d, dtype=torch.float64), torch.full((1, d), (1.0 - math.sqrt(d + 1)) / d)]
    )
    rows = rows - rows.mean(dim=0, keepdim=True)
    return F.normalize(rows, dim=1).to(dtype)


DSIMPLEX_FORMS = ("linear", "margin")


class FixedLinearHead(Head):
    """Frozen weights, logits = W f on the raw feature (the old classifier of a linear d-Simplex)."""

    def __init__(self, name: str, weight: torch.Tensor) -> None:
        super().__init__(weight.shape[1], weight.shape[0])
        self.name = name
        self.register_buffer("weight", weight)

    def weight_matrix(self) -> torch.Tensor:
        return self.weight

    def logits(self, emb: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        return F.linear(emb, self.weight)

    def frozen_copy(
        self, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None
    ) -> Head:
        w = (self.weight if weight is None else weight).detach().clone()
        return FixedLinearHead(self.name, w).requires_grad_(False)


@HEADS.register("dsimplex")
class DSimplex(MarginHead):
    """A fixed d-Simplex classifier: K = dim + 1 pre-allocated classes, never trained.

    ``form="linear"`` (default; Biondi et al. and their code): logits = W z with the unnormalised
    feature z and the fixed vertices W, trained with plain cross-entropy; ``s`` and ``m`` are
    ignored. ``form="margin"``: normalised features, logits s cos(theta_j), target s (cos - m).
    Logits cover all K vertices, so the directions of classes not seen yet act as negatives and
    stay free for the versions that add them. ``num_classes`` (the classes seen) must be <= K.
    """

    name = "dsimplex"

    def __init__(
        self, dim: int, num_classes: int, s: float = 16.0, m: float = 0.0, form: str = "linear"
    ) -> None:
        super().__init__(dim, num_classes, s, m)
        if form not in DSIMPLEX_FORMS:
            raise BadInputError(
                f"head: dsimplex form must be one of {', '.join(DSIMPLEX_FORMS)}, got {form!r}"
            )
        self.form = form
        k = dim + 1
        if num_classes > k:
            raise BadInputError(
                f"head: dsimplex with dim {dim} holds at most {k} classes, got {num_classes}; "
                f"set dim >= {num_classes - 1}"
            )
        self.register_buffer("weight", simplex_vertices(k))

    @property
    def capacity(self) -> int:
        return self.dim + 1

    def weight_matrix(self) -> torch.Tensor:
        return self.weight

    def params(self) -> dict[str, Any]:
        if self.form == "linear":
            return {"form": "linear"}
        return {"form": "margin", "s": self.s, "m": self.m}

    def margin(self, cos_target: torch.Tensor) -> torch.Tensor:
        return cos_target - self.m

    def logits(self, emb: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        if self.form == "linear":
            return F.linear(emb, self.weight)  # W z: no normalisation, scale or margin
        return super().logits(emb, targets)

    def frozen_copy(
        self, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None
    ) -> Head:
        if self.form == "linear":
            w = (self.weight if weight is None else weight).detach().clone()
            return FixedLinearHead(self.name, w).requires_grad_(False)
        return super().frozen_copy(weight, bias)


@HEADS.register("softmax")
class Softmax(Head):
    """A plain linear classifier on the raw embedding: logits = W f + b."""

    name = "softmax"
    has_bias = True

    def __init__(self, dim: int, num_classes: int, s: float | None = None, m: float | None = None):
        super().__init__(dim, num_classes)
        self.fc = nn.Linear(dim, num_classes, bias=self.has_bias)

    def weight_matrix(self) -> torch.Tensor:
        return self.fc.weight

    def logits(self, emb: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        return self.fc(emb)

    def frozen_copy(
        self, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None
    ) -> Head:
        w = self.fc.weight if weight is None else weight
        b = self.fc.bias if bias is None else bias
        copy = type(self)(w.shape[1], w.shape[0])
        with torch.no_grad():
            copy.fc.weight.copy_(w)
            if copy.fc.bias is not None:
                copy.fc.bias.copy_(b)
        return copy.requires_grad_(False)


@HEADS.register("linear")
class Linear(Softmax):
    """A bias-free linear classifier on the raw embedding: logits = W f.

    The classifier of the IAM-CL2R reference code's ER baseline (``nn.Linear(feat_size,
    num_classes, bias=False)``, expanded by fresh rows for each task's new classes) and of the
    d-Simplex/HOC paper's learnable-classifier runs; plain cross-entropy, no scale or margin.
    """

    name = "linear"
    has_bias = False


def create_head(name: str, dim: int, num_classes: int, **kwargs: Any) -> Head:
    """Build a head by name; an unknown name raises UsageError listing the known ones.

    Keyword arguments a head does not take (``m`` for normface, ``s``/``m`` for softmax, ``form``
    for all but dsimplex) are accepted and ignored, so one params section serves every head.
    """
    factory = HEADS.get(name)
    if name != "dsimplex":
        kwargs.pop("form", None)
    if name in ("softmax", "linear", "normface"):
        kwargs = {k: v for k, v in kwargs.items() if k not in ("m", "easy_margin")}
    if name in ("softmax", "linear", "dsimplex", "cosface"):
        kwargs.pop("easy_margin", None)
    try:
        return factory(dim, num_classes, **kwargs)
    except TypeError as err:
        raise BadInputError(f"head {name}: {err}") from None


__all__ = [
    "HEADS",
    "ArcFace",
    "CosFace",
    "DSimplex",
    "FixedLinearHead",
    "Head",
    "Linear",
    "MarginHead",
    "NormFace",
    "Softmax",
    "create_head",
    "simplex_vertices",
]
