"""Which training images make up each batch: ``random`` or ``balanced`` (``train.<v>.sampler``).

- ``random`` (default): each epoch one random permutation of the training set, cut into batches
  (the last, short one dropped unless ``drop_last: false``).
- ``balanced``: every batch is half replay, half new, as the IAM-CL2R reference code's
  ``BalancedBatchSampler`` builds them (Biondi et al., CVPR'24, "Stationary Representations",
  miccunifi/iamcl2r ``dataset_utils.py``). A class-incremental task holds every image of its few
  new classes and only a small replay memory of each earlier class; a random permutation would
  give the replay images only their share of the set (a fifth of task 2's images with 20 per
  class), a balanced batch gives them half of every step. Each half is drawn afresh for every
  batch: without replacement when its side holds at least as many images as the half, with
  replacement otherwise (the reference replaces when the side holds no more than the half). A
  task with no replay (the first) draws whole batches from its new images. An epoch has as many
  batches as the random sampler's, so the schedule and step count do not change.

Which images are new is :func:`new_items`'s decision: the last ``new_classes`` classes of the
training set's class list (an incremental split lists earlier tasks' classes first), or, by
default, the classes the parent version was not trained on.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from compat.errors import BadInputError


def new_items(
    labels: Sequence[str],
    classes: Sequence[str],
    new_classes: int | None,
    parent_classes: Sequence[str] | None,
    where: str,
) -> torch.Tensor:
    """(n,) bool: which training images belong to the task's new classes.

    ``classes`` is the training set's class list (its manifest's order); with ``new_classes``
    the last that many of it are new, else every class ``parent_classes`` lacks. ``where`` names
    the config field in errors (``params.yaml: train.hoc-t3``).
    """
    if new_classes is not None:
        if new_classes > len(classes):
            raise BadInputError(
                f"{where}.new_classes: {new_classes}, but the training set has only "
                f"{len(classes)} classes"
            )
        new = set(classes[len(classes) - new_classes :])
    elif parent_classes is not None:
        new = set(classes) - set(parent_classes)
    else:
        raise BadInputError(
            f"{where}.sampler: balanced needs to know which classes are new: set new_classes "
            "(the last that many of the training set's classes) or a parent (its classes are "
            "the replay)"
        )
    return torch.tensor([label in new for label in labels], dtype=torch.bool)


def _draw(pool: torch.Tensor, k: int, gen: torch.Generator) -> torch.Tensor:
    """``k`` items of ``pool``: without replacement when it holds at least ``k``, else with."""
    if len(pool) >= k:
        return pool[torch.randperm(len(pool), generator=gen)[:k]]
    return pool[torch.randint(len(pool), (k,), generator=gen)]


class BalancedBatches:
    """Half-replay, half-new batches of ``batch_size`` image indices (see the module's text)."""

    def __init__(self, new: torch.Tensor, batch_size: int) -> None:
        if new.dtype != torch.bool or new.ndim != 1:
            raise ValueError("new must be a 1-d bool tensor")
        if len(new) == 0:
            raise BadInputError("sampler: balanced: the training set is empty")
        self.new = torch.nonzero(new).flatten()
        self.old = torch.nonzero(~new).flatten()
        self.batch_size = batch_size

    def batch(self, gen: torch.Generator) -> torch.Tensor:
        """One batch's indices (old half first), drawn with ``gen``."""
        if len(self.old) == 0 or len(self.new) == 0:
            return _draw(self.new if len(self.old) == 0 else self.old, self.batch_size, gen)
        half = self.batch_size // 2
        return torch.cat([_draw(self.old, half, gen), _draw(self.new, self.batch_size - half, gen)])

    def describe(self) -> dict[str, int]:
        """What the card records: how many images each half is drawn from."""
        return {"replay_images": len(self.old), "new_images": len(self.new)}


__all__ = ["BalancedBatches", "new_items"]
