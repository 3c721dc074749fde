"""BCT's influence loss and its distillation variant (Shen et al., CVPR 2020, "Towards
Backward-Compatible Representation Learning"), on plain tensors.

The old classifier may be a weight matrix (K, d_old) (logits = W x, plus ``bias`` if given), an
``nn.Linear``, or one of compat's heads (:mod:`compat.models.heads`; a margin head keeps its
margin rule, as BCT's influence loss is the old model's own training loss). The new embedding is
fitted to the classifier's width by BCT's rule: its first d_old coordinates (zero-padded when
narrower). Labels index the classifier's rows; a label outside them (negative, or past the last
row) marks a sample of a class the old classifier does not hold.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from compat.functional.align import fit_width
from compat.functional.distill import kd_per_sample
from compat.models.heads import Head

OldClassifier = torch.Tensor | nn.Linear | Head


def classifier_width(classifier: OldClassifier) -> int:
    """The embedding width the old classifier takes."""
    if isinstance(classifier, torch.Tensor):
        return classifier.shape[1]
    if isinstance(classifier, nn.Linear):
        return classifier.in_features
    return classifier.dim


def classifier_rows(classifier: OldClassifier) -> int:
    """The number of classes (rows) of the old classifier."""
    if isinstance(classifier, torch.Tensor):
        return classifier.shape[0]
    if isinstance(classifier, nn.Linear):
        return classifier.out_features
    return classifier.weight_matrix().shape[0]


def old_logits(
    features: torch.Tensor,
    classifier: OldClassifier,
    targets: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """The old classifier's logits of ``features`` (fitted to its width). With ``targets`` a
    margin head applies its margin to the target logit; without, plain logits (what KD compares)."""
    x = fit_width(features.float(), classifier_width(classifier))
    if isinstance(classifier, torch.Tensor):
        return F.linear(x, classifier.to(x), None if bias is None else bias.to(x))
    if isinstance(classifier, Head):
        return classifier(x, targets)
    return classifier(x.to(classifier.weight.dtype)).float()


def _influence_per_sample(
    new: torch.Tensor, labels: torch.Tensor, classifier: OldClassifier, bias: torch.Tensor | None
) -> torch.Tensor:
    rows = classifier_rows(classifier)
    safe = torch.where((labels >= 0) & (labels < rows), labels, 0)
    logits = old_logits(new, classifier, safe, bias)
    return F.cross_entropy(logits, safe, reduction="none")


def bct_influence(
    new: torch.Tensor,
    labels: torch.Tensor,
    old_classifier: OldClassifier,
    *,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """BCT Eq. (8)'s influence term: the old classifier's cross-entropy on the new embeddings.

    ``new`` (n, d_new); ``labels`` (n,) rows of the old classifier; samples whose label is not a
    row (negative, or >= its row count) are left out (BCT's "drop"; synthesize rows with
    :func:`compat.functional.synthesized_rows` to keep them). Mean over the kept samples; zero,
    still in the graph, when none is kept. The classifier is used as given: freeze it.
    """
    keep = ((labels >= 0) & (labels < classifier_rows(old_classifier))).float()
    # A masked mean instead of boolean indexing: no host-device sync on a GPU.
    per_sample = _influence_per_sample(new, labels, old_classifier, bias)
    return (per_sample * keep).sum() / keep.sum().clamp(min=1.0)


def bct_kd(
    new: torch.Tensor,
    old: torch.Tensor | None,
    labels: torch.Tensor,
    old_classifier: OldClassifier,
    *,
    temperature: float = 1.0,
    old_classes: int | None = None,
    bias: torch.Tensor | None = None,
    teacher_logits: torch.Tensor | None = None,
) -> torch.Tensor:
    """BCT's influence loss with knowledge distillation for new classes (BCT Sec. 3.3):

    - a sample of an old class (0 <= label < ``old_classes``, default: every row of the
      classifier) takes the influence cross-entropy through the old classifier, as in Eq. (8);
    - a sample of a new class (any other label, e.g. -1) takes
      T^2 * KL(softmax(w_old old / T) || softmax(w_old new / T)): the old classifier's soft
      output on the old model's embedding ``old`` of the same image is the target.

    Mean over the batch of the per-sample terms. ``teacher_logits`` (n, K), if given, stand in
    for the old classifier's logits of ``old`` (then ``old`` may be None).
    """
    k = classifier_rows(old_classifier) if old_classes is None else old_classes
    is_old = (labels >= 0) & (labels < k)
    ce = _influence_per_sample(new, torch.where(is_old, labels, -1), old_classifier, bias)
    if teacher_logits is None:
        if old is None:
            raise ValueError("bct_kd: give the old embeddings or the teacher's logits")
        teacher_logits = old_logits(old, old_classifier, None, bias)
    teacher = teacher_logits.detach().float()
    student = old_logits(new, old_classifier, None, bias)
    distil = kd_per_sample(student, teacher, temperature)
    return torch.where(is_old, ce, distil).mean()
