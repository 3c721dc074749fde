"""A map on disk and in memory: ``weights.safetensors`` plus ``card.json`` in one folder.

Saved through compat's one checked-output path (:mod:`compat.outputs`): the folder may be new,
empty or a map folder (only ``weights.safetensors`` and a map's ``card.json``: :func:`map_owner`);
anything else is refused (exit 2) and never touched. The weights and then the card are written
into a new folder beside it, swapped in whole: a kill leaves the previous map or the new one,
never a card beside other weights, and no half-saved map is ever loaded. On load the
weights' sha256 must equal the card's (:func:`compat.models.version.read_verified`), and the
tensors must have the card's shape; otherwise BadInputError (exit 4) naming the file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from compat.errors import BadInputError
from compat.maps.card import MapCard, read_map_card, write_map_card
from compat.maps.space import SpaceMap

WEIGHTS = "weights.safetensors"
CARD = "card.json"


def weights_blob(state: dict[str, Any]) -> bytes:
    """The safetensors bytes of ``state``: depend on the tensors alone (one metadata key, as
    psi's: safetensors writes metadata from a hash map whose order varies between saves)."""
    from safetensors.torch import save

    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in state.items()}
    return save(tensors, metadata={"format": "pt"})


class Map(SpaceMap):
    """A fitted :mod:`compat.maps` map: its :class:`MapCard` and the applier that maps rows
    (fixed row blocks); the other kind of :class:`compat.maps.space.SpaceMap` is psi's
    :class:`compat.maps.psi.Psi`."""

    card: MapCard

    @property
    def held_out_lower_bound(self) -> float | None:
        """The lower bound of the held-out difference that decided whether it was kept."""
        return None if self.card.heldout is None else self.card.heldout.lower_bound

    def apply(self, x: np.ndarray, start: int = 0) -> np.ndarray:
        """Rows ``start ..`` of a matrix mapped: float32 (n, out_dim), L2-normalised; a row's
        bits do not depend on ``start`` or ``len(x)`` (:mod:`compat.models.rowblocks`)."""
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] != self.in_dim:
            raise BadInputError(
                f"{self.where}: in_dim: the map takes {self.in_dim}-dim rows, got shape {x.shape}"
            )
        return self.applier.apply(x, start)

    def queries(
        self, new_rows: np.ndarray, old_rows: np.ndarray | None = None, start: int = 0
    ) -> np.ndarray:
        """The queries this map serves on the old gallery: adapt(new) for a query adapter; for
        a query blend slerp(old, adapt(new), w) (:mod:`compat.maps.blend`), which needs the old
        model's rows of the same queries. Float32 unit rows; a row's bits do not depend on its
        batch."""
        if self.role == "gallery-map":
            raise BadInputError(
                f"{self.where}: role: a gallery-map maps stored rows, it serves no queries"
            )
        adapted = self.apply(new_rows, start)
        if self.card.blend is None:
            return adapted
        if old_rows is None or np.shape(old_rows) != adapted.shape:
            got = "none" if old_rows is None else f"shape {np.shape(old_rows)}"
            raise BadInputError(
                f"{self.where}: blend: a query blend needs the old model's rows of the same "
                f"queries, shape {adapted.shape}; got {got}"
            )
        from compat.maps.blend import slerp

        return slerp(old_rows, adapted, self.card.blend.weight)


def map_owner(folder: Path) -> str | None:
    """None when ``folder`` holds a map and nothing else (``weights.safetensors``, a map's
    ``card.json``): a save may replace it; else what it holds (:func:`compat.outputs.claim`)."""
    from compat.errors import CompatError
    from compat.outputs import folder_entries

    extra = folder_entries(folder, lambda name: name in (WEIGHTS, CARD), "a map's")
    if extra is not None:
        return extra
    if (folder / CARD).exists():
        try:
            read_map_card(folder)
        except CompatError:
            return f"its {CARD} is not a map's"
    return None


def save_map(folder: str | os.PathLike[str], fitted: Map, option: str = "--out") -> Path:
    """Write ``fitted`` as the folder ``folder`` (module docstring: only a map folder or an empty
    one is replaced, swapped in whole); returns the card's path. ``option`` names the folder in
    a refusal."""
    from compat.io import atomic_path
    from compat.outputs import claim, new_folder

    out = Path(folder)
    blob = weights_blob(fitted.applier.state())
    if fitted.card.weights_sha256 != _sha(blob):
        raise ValueError("the card's weights_sha256 does not match the weights to be saved")
    claim(out, "folder", map_owner, option, "a map folder")
    with new_folder(out) as tmp:
        with atomic_path(tmp / WEIGHTS, size=len(blob)) as part:
            part.write_bytes(blob)
        write_map_card(tmp, fitted.card)
    fitted.folder = out
    return out / CARD


def _sha(blob: bytes) -> str:
    from compat.io import sha256_bytes

    return sha256_bytes(blob)


def load_map(folder: str | os.PathLike[str], device: str = "cpu") -> Map:
    """The map in ``folder``: NotFoundError (3) without a card or weights, BadInputError (4)
    when the card is bad, the weights' sha256 differs from it, or they do not fit its shape."""
    from safetensors.torch import load

    from compat.maps.kinds import kind_module
    from compat.models.version import read_verified

    path = Path(folder)
    card = read_map_card(path)
    weights = path / WEIGHTS
    blob = read_verified(weights, card.weights_sha256, "map weights")
    try:
        state = load(blob)
    except Exception as err:
        raise BadInputError(f"{weights}: not a safetensors file ({err})") from None
    try:
        applier = kind_module(card.kind).from_state(
            state, card.in_dim, card.out_dim, card.params, device
        )
    except (KeyError, ValueError, RuntimeError) as err:
        first = (str(err).splitlines() or ["state mismatch"])[0]
        raise BadInputError(f"{weights}: weights do not fit the card: {first}") from None
    return Map(card, applier, path)


__all__ = ["CARD", "WEIGHTS", "Map", "load_map", "map_owner", "save_map", "weights_blob"]
