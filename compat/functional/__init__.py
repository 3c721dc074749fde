"""Pure tensor functions of every compatibility term, callable from any training loop.

No state, no parent wrapper, no config: plain tensors in, a scalar loss (or a tensor) out. The
old classifier of the BCT terms may be a weight matrix, an ``nn.Linear`` or a compat head. The
methods of :mod:`compat.losses` wrap these; docs/reference.md gives each formula its source.

    from compat import functional as CF
    loss = F.cross_entropy(new_head(z_new), y) + lam * CF.bct_influence(z_new, y, old_fc)

* :mod:`~compat.functional.influence`   BCT's influence loss and its distillation variant (Eq. 8)
* :mod:`~compat.functional.regression`  feature regression onto the old embedding (BCT Eq. 3, l2)
* :mod:`~compat.functional.distill`     knowledge distillation of logits (Hinton et al.; LwF)
* :mod:`~compat.functional.contrastive` InfoNCE between new and old embeddings (UniBCT, HOC)
* :mod:`~compat.functional.prototypes`  class prototypes from old embeddings (BCT's synthesized
  classifier rows, UniBCT's structural prototypes)
* :mod:`~compat.functional.simplex`     the fixed d-Simplex classifier (d-Simplex/HOC)
* :mod:`~compat.functional.align`       a new embedding meeting an old one of another width (BCT
  Sec. 3: the first d_old coordinates)
"""

from __future__ import annotations

from compat.functional.align import align_dims, fit_width
from compat.functional.contrastive import contrastive, hoc_infonce
from compat.functional.distill import kd, kd_per_sample
from compat.functional.influence import (
    bct_influence,
    bct_kd,
    classifier_rows,
    classifier_width,
    old_logits,
)
from compat.functional.prototypes import (
    class_means,
    refine_closed_form,
    refined_prototypes,
    synthesized_rows,
    unibct_prototypes,
)
from compat.functional.regression import l2
from compat.functional.simplex import dsimplex_logits, dsimplex_vertices

__all__ = [
    "align_dims",
    "bct_influence",
    "bct_kd",
    "class_means",
    "classifier_rows",
    "classifier_width",
    "contrastive",
    "dsimplex_logits",
    "dsimplex_vertices",
    "fit_width",
    "hoc_infonce",
    "kd",
    "kd_per_sample",
    "l2",
    "old_logits",
    "refine_closed_form",
    "refined_prototypes",
    "synthesized_rows",
    "unibct_prototypes",
]
