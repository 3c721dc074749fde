"""A fitted linear map y = n(n(x) W + b), applied over fixed row blocks (shared by the
``procrustes`` and ``affine`` kinds).

n is L2 normalisation: rows are read as galleries store them (any finite scale reaches unit
length: :func:`compat.models.norms.normalize_rows`) and written at unit length, as the space
they are compared in expects. :meth:`LinearMap.apply` runs over fixed row blocks
(:func:`compat.models.rowblocks.map_rows`), so a row's result is bit-identical whatever batch it
arrives in.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from compat.errors import BadInputError
from compat.models.norms import normalize_rows
from compat.models.rowblocks import GPU_ROW_BLOCK, ROW_BLOCK, map_rows


class LinearMap:
    """``weight`` (in_dim, out_dim) and ``bias`` (out_dim,), float32, applied row-wise."""

    def __init__(
        self,
        weight: np.ndarray | torch.Tensor,
        bias: np.ndarray | torch.Tensor,
        device: str = "cpu",
    ) -> None:
        w = torch.as_tensor(np.ascontiguousarray(np.asarray(weight, dtype=np.float32)))
        b = torch.as_tensor(np.ascontiguousarray(np.asarray(bias, dtype=np.float32)))
        if w.ndim != 2 or b.shape != (w.shape[1],):
            raise ValueError(f"weight {tuple(w.shape)} and bias {tuple(b.shape)} do not fit")
        self.device = torch.device(device)
        self.weight, self.bias = w.to(self.device), b.to(self.device)
        self.in_dim, self.out_dim = int(w.shape[0]), int(w.shape[1])
        # A GPU runs a whole product per launch: small blocks would only add launches.
        self.block = ROW_BLOCK if self.device.type == "cpu" else GPU_ROW_BLOCK

    def state(self) -> dict[str, torch.Tensor]:
        """The tensors saved in ``weights.safetensors``."""
        return {"weight": self.weight.cpu(), "bias": self.bias.cpu()}

    @classmethod
    def from_state(cls, state: dict[str, Any], in_dim: int, out_dim: int, device: str) -> LinearMap:
        """The map of saved tensors; ValueError when they do not have the card's shape."""
        if set(state) != {"weight", "bias"}:
            raise ValueError(f"expected tensors weight and bias, found {sorted(state)}")
        if tuple(state["weight"].shape) != (in_dim, out_dim):
            raise ValueError(
                f"weight shape {tuple(state['weight'].shape)}, the card says {(in_dim, out_dim)}"
            )
        return cls(state["weight"].numpy(), state["bias"].numpy(), device)

    @torch.inference_mode()
    def _block(self, rows: np.ndarray) -> np.ndarray:
        x = normalize_rows(torch.from_numpy(rows).to(self.device))
        return F.normalize(torch.addmm(self.bias, x, self.weight), dim=1).cpu().numpy()

    def apply(self, x: np.ndarray, start: int = 0) -> np.ndarray:
        """Rows ``start ..`` of a matrix mapped: float32 (n, out_dim), L2-normalised."""
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] != self.in_dim:
            raise BadInputError(
                f"embeddings: the map expects (n, {self.in_dim}) rows, got shape {tuple(x.shape)}"
            )
        return map_rows(self._block, x, start=start, out_dim=self.out_dim, block=self.block)


__all__ = ["LinearMap"]
