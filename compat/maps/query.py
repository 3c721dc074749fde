"""Query adapters applied for evaluation: each map of ``evaluate.adapters`` loaded (weights'
sha256 checked), checked against the versions it is evaluated with and applied to its new
version's evaluation-set rows (:class:`compat.evaluate.adapted.AdaptedRows`); a query blend
(role ``query-blend``) serves the blended queries, the adapted rows interpolated with the old
version's own rows of the same items (:mod:`compat.maps.blend`).

Unlike the gate (:func:`compat.registry.serving.apply_map`), a map its own held-out check
refused is evaluated too: the report names the refusal beside numbers that show why.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from compat.errors import BadInputError
from compat.evaluate.adapted import AdaptedRows


def adapter_joins(folders: Mapping[str, str | os.PathLike[str]]) -> dict[str, tuple[str, str]]:
    """Map name -> (new, old) of each query adapter, read from its card only (no weights)."""
    from compat.maps.card import read_map_card

    return {name: (c.from_, c.to) for name, c in
            ((name, read_map_card(folder)) for name, folder in folders.items())}  # fmt: skip


def adapted_embeddings(
    folders: Mapping[str, str | os.PathLike[str]],
    embeddings: Mapping[str, np.ndarray],
    weights: Mapping[str, str] | None = None,
) -> dict[str, AdaptedRows]:
    """Load each map (weights' sha256 checked), check it against the evaluated versions (role
    ``query-adapter`` or ``query-blend``, widths, and, with ``weights``, that it was fitted on
    these versions' weights: BadInputError naming its card otherwise) and serve its new
    version's rows (a blend's with the old version's rows of the same items)."""
    from compat.maps.store import load_map

    made = weights or {}
    out: dict[str, AdaptedRows] = {}
    for name, folder in folders.items():
        fitted = load_map(folder)
        card, where = fitted.card, Path(folder) / "card.json"
        if card.role not in ("query-adapter", "query-blend"):
            raise BadInputError(
                f"{where}: role: a {card.role} map; evaluate.adapters takes query adapters "
                "and query blends (new queries -> old space)"
            )
        new, old = card.from_, card.to
        for side, version, info in (("from", new, card.data.source), ("to", old, card.data.target)):
            if version not in embeddings:
                raise BadInputError(f"{where}: {side}: {version!r} was not embedded")
            fitted_on = (info or {}).get("weights_sha256")
            if fitted_on and made.get(version) and fitted_on != made[version]:
                raise BadInputError(
                    f"{where}: {side}: fitted on {version}'s weights {fitted_on[:12]}, the "
                    f"evaluated ones are {made[version][:12]}; fit the map again (python "
                    "stages/adapt.py)"
                )
        e_new, e_old = embeddings[new], embeddings[old]
        if card.in_dim != e_new.shape[1] or card.out_dim != e_old.shape[1]:
            raise BadInputError(
                f"{where}: in_dim/out_dim: the map joins {card.in_dim} -> {card.out_dim} dims, "
                f"{new} -> {old} are {e_new.shape[1]} -> {e_old.shape[1]}"
            )
        rows = fitted.queries(e_new, e_old)
        out[name] = AdaptedRows(name, new, old, rows, card.provenance(folder), card.role)
    return out


__all__ = ["adapted_embeddings", "adapter_joins"]
