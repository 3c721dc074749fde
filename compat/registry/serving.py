"""The rows a served configuration puts in front of the gate (issue 27).

A contract's ``serve`` (:class:`compat.contracts.schema.Serve`) says how the version meets its
parent's stored gallery. ``native`` needs nothing beyond the two versions' rows. ``query-adapter``
maps the version's evaluation-set rows into the parent's space with a fitted map
(:mod:`compat.maps`, role ``query-adapter``): the gate's ``cross`` cell becomes
M(adapt(new), parent). ``query-blend`` interpolates those adapted rows on the sphere with the
parent's own rows of the same items (a map of role ``query-blend``, its weight on its card;
:mod:`compat.maps.blend`): M(blend(new), parent). ``backfill`` maps the parent's rows into the version's space: the gate's
``cross`` cell becomes M(new, psi(parent)); the map is the pipeline's psi
(``models/<version>/upgrade/``, :mod:`compat.maps.psi`) or any fitted gallery map. Either folder
is opened by :func:`compat.maps.open_map`, one interface for both.

Before a map runs it is checked against what it will be applied to
(:meth:`compat.maps.SpaceMap.check_serves`): its role, the widths of the rows it reads and
writes, psi's versions and the registered weights it was fitted on, and whether a map's own
held-out check refused it when it was fitted (a refused map is never served: exit 4, naming its
card; a refused psi is the identity, served as "no upgrade"). What the verdict records of it is
its provenance: folder, weights sha256, and for a map its kind, role and fit data fingerprint.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from compat.contracts.schema import Contract
from compat.maps.space import Joins


def apply_map(
    folder: Path,
    rows: np.ndarray,
    rows_of: str,
    out_dim: int,
    role: str,
    joins: Joins | None = None,
) -> tuple[np.ndarray, dict[str, Any]]:
    """``rows`` mapped by the map in ``folder`` (:func:`compat.maps.open_map`), checked first:
    ``role``, ``in_dim`` = the rows' width, ``out_dim`` = the target's width, what it ``joins``
    (psi's versions and weights) and not refused when fitted. Returns the mapped rows and the
    map's provenance."""
    from compat.maps import open_map

    opened = open_map(folder)
    opened.check_serves(role, rows.shape[1], rows_of, out_dim, joins=joins)
    return opened.apply(rows), opened.provenance(folder)


def adapted_rows(
    contract: Contract,
    embeddings: dict[str, np.ndarray],
    models: Path = Path("models"),
    weights: Callable[[str], str | None] = lambda name: None,
) -> tuple[np.ndarray | None, dict[str, Any] | None]:
    """For ``serve: query-adapter``: the version's rows mapped into the parent's space, and the
    adapter's provenance; for ``serve: query-blend`` the blended queries (the adapted rows and
    the parent's rows of the same items, interpolated) and the blend's provenance; else (None,
    None)."""
    mode = contract.serve.mode
    if mode not in ("query-adapter", "query-blend"):
        return None, None
    new, parent = contract.version, contract.parent
    assert parent is not None
    folder = Path(contract.serve.map_folder(new, parent, models) or "")
    # The versions it serves, and the registered weights it must have been fitted on (``weights``:
    # None, not compared): a map fitted for other versions is never served (issue 45).
    joins = Joins(
        source=new, target=parent, wanted=f"the contract serves {new}'s queries on {parent}'s "
        "gallery", from_weights=weights(new), to_weights=weights(parent),
        weights_origin="the registered ones are",
    )  # fmt: skip
    if mode == "query-adapter":
        rows, info = apply_map(
            folder, embeddings[new], f"{new}'s embeddings", embeddings[parent].shape[1],
            "query-adapter", joins,
        )  # fmt: skip
        return rows, {"mode": mode, **info}
    from compat.maps import open_map

    opened = open_map(folder)
    opened.check_serves(mode, embeddings[new].shape[1], f"{new}'s embeddings",
                        embeddings[parent].shape[1], joins=joins)  # fmt: skip
    return opened.queries(embeddings[new], embeddings[parent]), {
        "mode": mode, **opened.provenance(folder)
    }  # fmt: skip


def backfill_map_folder(contract: Contract, models: Path) -> Path | None:
    """For ``serve: backfill``: the folder of the gallery map (psi's by default); else None."""
    if contract.serve.mode != "backfill":
        return None
    assert contract.parent is not None
    return Path(contract.serve.map_folder(contract.version, contract.parent, models) or "")


def gallery_map_rows(
    contract: Contract,
    folder: Path,
    embeddings: dict[str, np.ndarray],
    weights: Callable[[str], str | None] = lambda name: None,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The parent's rows mapped by the gallery map in ``folder`` (psi's or a :mod:`compat.maps`
    map) and its provenance. ``weights(name)``: the registered weights digest of a version
    (None: not compared), which psi must have been fitted on."""
    new, parent = contract.version, contract.parent
    assert parent is not None
    joins = Joins(
        source=parent, target=new, wanted=f"the contract needs {parent} -> {new}",
        from_weights=weights(parent), to_weights=weights(new),
        weights_origin="the registered ones are",
    )  # fmt: skip
    rows, info = apply_map(
        folder, embeddings[parent], f"{parent}'s embeddings", embeddings[new].shape[1],
        "gallery-map", joins,
    )  # fmt: skip
    return {parent: rows}, info


__all__ = ["adapted_rows", "apply_map", "backfill_map_folder", "gallery_map_rows"]
