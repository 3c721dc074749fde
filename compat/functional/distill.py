"""Knowledge distillation (Hinton et al., "Distilling the Knowledge in a Neural Network"), the
soft-label term of BCT's kd variant and of LwF."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def kd_per_sample(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """(n,) T^2 * KL(softmax(teacher / T) || softmax(student / T)) of each row."""
    t = float(temperature)
    log_p_student = F.log_softmax(student_logits.float() / t, dim=1)
    log_p_teacher = F.log_softmax(teacher_logits.float() / t, dim=1)
    kl = (log_p_teacher.exp() * (log_p_teacher - log_p_student)).sum(dim=1)
    return kl * t * t


def kd(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """T^2 * KL(softmax(teacher / T) || softmax(student / T)), averaged over the batch.

    The T^2 factor keeps gradient magnitudes independent of T (Hinton et al., Sec. 2).
    """
    return kd_per_sample(student_logits, teacher_logits, temperature).mean()
