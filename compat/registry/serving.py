"""The rows a served configuration puts in front of the gate (issue 27).

A contract's ``serve`` (:class:`compat.contracts.schema.Serve`) says how the version meets its
parent's stored gallery. ``native`` needs nothing beyond the two versions' rows. ``query-adapter``
maps the version's evaluation-set rows into the parent's space with a fitted map
(:mod:`compat.maps`, role ``query-adapter``): the gate's ``cross`` cell becomes
M(adapt(new), parent). ``backfill`` maps the parent's rows into the version's space: the gate's
``cross`` cell becomes M(new, psi(parent)); the map is the pipeline's psi
(``models/<version>/upgrade/``, :mod:`compat.models.upgrade`) or any fitted gallery map.

Before a map runs it is checked against what it will be applied to: its role, the widths of the
rows it reads and writes, and whether its own held-out check refused it when it was fitted (a
refused map is never served: exit 4, naming its card). What the verdict records of it is its
provenance: folder, kind, role, weights sha256, fit data fingerprint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from compat.contracts.schema import Contract


def apply_map(
    folder: Path, rows: np.ndarray, rows_of: str, out_dim: int, role: str
) -> tuple[np.ndarray, dict[str, Any]]:
    """``rows`` mapped by the :mod:`compat.maps` map in ``folder``, checked first: ``role``,
    ``in_dim`` = the rows' width, ``out_dim`` = the target's width, and not refused when
    fitted. Returns the mapped rows and the map's provenance."""
    from compat.maps import load_map

    fitted = load_map(folder)
    fitted.check_serves(role, rows.shape[1], rows_of, out_dim)
    return fitted.apply(rows), fitted.card.provenance(folder)


def adapted_rows(
    contract: Contract, embeddings: dict[str, np.ndarray], models: Path = Path("models")
) -> tuple[np.ndarray | None, dict[str, Any] | None]:
    """For ``serve: query-adapter``: the version's rows mapped into the parent's space, and the
    adapter's provenance; else (None, None)."""
    if contract.serve.mode != "query-adapter":
        return None, None
    new, parent = contract.version, contract.parent
    assert parent is not None
    folder = Path(contract.serve.map_folder(new, parent, models) or "")
    rows, info = apply_map(
        folder, embeddings[new], f"{new}'s embeddings", embeddings[parent].shape[1],
        "query-adapter",
    )  # fmt: skip
    return rows, {"mode": "query-adapter", **info}


def backfill_map_folder(contract: Contract, models: Path) -> Path | None:
    """For ``serve: backfill``: the folder of the gallery map (psi's by default); else None."""
    if contract.serve.mode != "backfill":
        return None
    assert contract.parent is not None
    return Path(contract.serve.map_folder(contract.version, contract.parent, models) or "")


def gallery_map_rows(
    contract: Contract, folder: Path, embeddings: dict[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    """The parent's rows mapped by a :mod:`compat.maps` gallery map in ``folder``, or None when
    the folder is psi's (an upgrade card, read by :func:`compat.registry.assemble.upgraded_parent`)."""
    from compat.maps.card import holds_map_card

    if not holds_map_card(folder):
        return None
    new, parent = contract.version, contract.parent
    assert parent is not None
    rows, info = apply_map(
        folder, embeddings[parent], f"{parent}'s embeddings", embeddings[new].shape[1],
        "gallery-map",
    )  # fmt: skip
    return {parent: rows}, info


__all__ = ["adapted_rows", "apply_map", "backfill_map_folder", "gallery_map_rows"]
