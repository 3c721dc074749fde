"""Where a version's weights start: from scratch, or from its parent's (fine-tuning).

``init: parent`` is sequential fine-tuning as class-incremental learning does it (CL2R, Biondi
et al.; the "ER" baseline of the d-Simplex/HOC paper: "a learnable classifier grown per task,
CE only, replay"): the new version starts from the parent's backbone and embedding layer
(BatchNorm statistics included), and a learnable head starts from the parent's classifier rows,
matched by class *name* (the new version's class order may differ), with freshly initialised rows
for the classes the parent never saw. A dsimplex head has nothing to copy: its vertices are fixed,
and a child's class order extends its parent's (:func:`compat.train.run.class_order`).

:func:`resolve_init` decides what ``init: auto`` (the default) means: the parent's weights for the
methods that fine-tune by default (bct, bct-kd) when the architectures match, else scratch.
:func:`check_init` runs on the parent's card before any data or weights load, so a mismatch
with an explicit ``init: parent`` (another backbone, pooling, neck, dim or head) fails with a message
naming the field.
:func:`init_from_parent` copies the weights and reports what it copied (recorded in the card).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from compat.errors import BadInputError
from compat.models.card import ModelCard
from compat.models.heads import DSimplex, Head, LearnedMarginHead, Softmax
from compat.train.config import TrainConfig

# Card fields that must equal the config's for the parent's weights to fit the new model.
_SAME = ("backbone", "pooling", "neck", "dim", "head")


def _mismatch(cfg: TrainConfig, parent_card: ModelCard) -> tuple[str, Any, Any] | None:
    """The first of :data:`_SAME` where the parent and this version differ: (key, theirs, ours)."""
    for key in _SAME:
        theirs, ours = getattr(parent_card, key), getattr(cfg, key)
        if theirs != ours:
            return key, theirs, ours
    return None


def resolve_init(
    cfg: TrainConfig, parent_card: ModelCard | None, fine_tune_by_default: bool
) -> tuple[str, str | None]:
    """What ``cfg.init`` means for this version: ("scratch" | "parent", why when it was ``auto``).

    ``auto`` (the default) is ``parent`` when the method fine-tunes by default (BCT's family:
    starting from the parent's weights measurably lifts M(new, old) on a strong old model,
    docs/findings.md "BCT on a strong old model"), the version has a parent, no
    ``backbone_weights`` and the parent's backbone, pooling, neck, dim and head; otherwise ``scratch``
    (a wider model, another head, an independent paragon). An explicit value is kept as is."""
    if cfg.init != "auto":
        return cfg.init, None
    if not fine_tune_by_default:
        return "scratch", f"init: auto: method {cfg.method} trains from scratch by default"
    if parent_card is None:
        return "scratch", "init: auto: no parent"
    if cfg.backbone_weights is not None:
        return "scratch", "init: auto: backbone_weights initialise the backbone"
    if (diff := _mismatch(cfg, parent_card)) is not None:
        key, theirs, ours = diff
        return "scratch", f"init: auto: the parent's {key} is {theirs!r}, this version's {ours!r}"
    return "parent", f"init: auto: method {cfg.method} fine-tunes its parent by default"


def check_init(version: str, cfg: TrainConfig, parent_card: ModelCard | None) -> None:
    """Raise BadInputError (naming the field) if ``cfg.init`` cannot start from ``parent_card``
    (an explicit ``parent`` only: ``auto`` falls back to scratch, :func:`resolve_init`)."""
    if cfg.init != "parent":
        return
    where = f"train.{version}.init"
    if parent_card is None:
        raise BadInputError(f"{where}: parent: fine-tuning needs a parent version (set parent)")
    if cfg.backbone_weights is not None:
        raise BadInputError(
            f"{where}: parent and backbone_weights both initialise the backbone; keep one"
        )
    if (diff := _mismatch(cfg, parent_card)) is not None:
        key, theirs, ours = diff
        raise BadInputError(
            f"{where}: parent: {parent_card.version or cfg.parent} has {key} {theirs!r}, this "
            f"version {ours!r}; the parent's weights fit only the same {key} (use init: scratch "
            "to change it, as a model replacement does)"
        )


def copy_head_rows(
    head: Head, parent_head: Head, classes: Sequence[str], parent_classes: Sequence[str]
) -> tuple[int, int]:
    """Copy the parent's classifier rows into ``head`` by class name; (copied, fresh) counts.

    A dsimplex head has no trainable rows: its vertices are the same for every version of the
    same dim, so nothing is copied and every class counts as copied.
    """
    if type(head) is not type(parent_head):
        raise BadInputError(
            f"init: parent: the parent's head is {parent_head.name}, this version's {head.name}"
        )
    if isinstance(head, DSimplex):
        return len(classes), 0
    position = {c: i for i, c in enumerate(parent_classes)}
    pairs = [(i, position[c]) for i, c in enumerate(classes) if c in position]
    if pairs:
        dst = torch.tensor([i for i, _ in pairs])
        src = torch.tensor([j for _, j in pairs])
        with torch.no_grad():
            if isinstance(head, Softmax):
                assert isinstance(parent_head, Softmax)
                head.fc.weight[dst] = parent_head.fc.weight[src].to(head.fc.weight)
                if head.fc.bias is not None and parent_head.fc.bias is not None:
                    head.fc.bias[dst] = parent_head.fc.bias[src].to(head.fc.bias)
            elif isinstance(head, LearnedMarginHead):
                assert isinstance(parent_head, LearnedMarginHead)
                head.weight[dst] = parent_head.weight[src].to(head.weight)
            else:
                raise BadInputError(f"init: parent: cannot copy rows of a {head.name} head")
    return len(pairs), len(classes) - len(pairs)


def init_from_parent(
    model: nn.Module,
    head: Head,
    parent_model: nn.Module,
    parent_head: Head | None,
    classes: Sequence[str],
    parent_card: ModelCard,
) -> dict[str, Any]:
    """Load the parent's model weights into ``model`` and its head rows into ``head``.

    Returns what the card records under ``init``: the parent, its weights digest and how many
    head rows were copied or freshly initialised.
    """
    try:
        model.load_state_dict(parent_model.state_dict(), strict=True)
    except RuntimeError as err:
        first = str(err).splitlines()[0] if str(err) else "state mismatch"
        raise BadInputError(f"init: parent: the parent's weights do not fit: {first}") from None
    if parent_head is None:
        raise BadInputError(
            f"init: parent: {parent_card.version or 'the parent'} was saved without its "
            f"{head.name} head, so its classifier rows cannot be carried over"
        )
    copied, fresh = copy_head_rows(head, parent_head, classes, parent_card.class_names)
    return {
        "kind": "parent",
        "parent": parent_card.version,
        "parent_weights_sha256": parent_card.weights_sha256,
        "head_rows_copied": copied,
        "head_rows_new": fresh,
    }


__all__ = ["check_init", "copy_head_rows", "init_from_parent", "resolve_init"]
