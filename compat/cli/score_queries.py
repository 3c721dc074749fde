"""The query rows ``compat score --query-adapter DIR`` serves: a query adapter's (the new model's
queries mapped into the old gallery's space) or a query blend's (those rows interpolated on the
sphere with the old model's own rows of the same queries, ``--old-query FILE``; issue 42).

Both are served through the one path that serves a map's queries,
:meth:`compat.maps.store.Map.queries` (the gate's ``serve: query-blend`` and the evaluate stage's
adapted cells use it too): this module reads and matches the old model's rows and leaves the
blending to it. The map is checked as every served map is
(:meth:`compat.maps.space.SpaceMap.check_serves`: its role, widths, and the versions and weights
its card records against the files' own).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from compat.errors import NOTHING_DONE, BadInputError, UsageError

BLEND = "query-blend"


def served_role(adapter: Any) -> str:
    """The role ``compat score`` serves ``adapter`` as: ``query-blend`` for a blend, else
    ``query-adapter`` (a gallery map is then refused by its role check, exit 4)."""
    return BLEND if adapter.role == BLEND else "query-adapter"


def open_query_map(folder: Path | None, old_query: Path | None, allow_refused: bool) -> Any:
    """The map ``--query-adapter`` names, opened (missing: exit 3; changed weights: 4), or None.
    A gallery map: exit 4. A blend without ``--old-query``, or ``--old-query`` without a
    blend: exit 2. A map refused when it was fitted: exit 7 unless ``allow_refused``."""
    import typer

    if folder is None:
        if old_query is not None:
            raise UsageError("--old-query: only goes with a query-blend map (--query-adapter DIR)")
        return None
    from compat.maps import open_map

    adapter = open_map(folder)
    # A gallery map (psi's or not) maps stored rows, not queries: exit 4. Its refusal is this
    # command's to report (exit 7), below.
    adapter.check_serves(served_role(adapter), allow_refused=True)
    if adapter.role == BLEND and old_query is None:
        raise UsageError(
            f"--query-adapter {folder}: a query blend needs the old model's embeddings of the "
            "queries (--old-query FILE)"
        )
    if adapter.role != BLEND and old_query is not None:
        raise UsageError(
            f"--old-query: only goes with a query-blend map; {folder} is a {adapter.role}"
        )
    if adapter.refused is not None and not allow_refused:
        print(
            f"error: {folder}: refused when it was fitted ({adapter.refused}); "
            "nothing scored (exit 7; --allow-refused applies it anyway)",
            file=sys.stderr,
        )
        raise typer.Exit(NOTHING_DONE)
    return adapter


def made_by(meta: dict) -> str | None:
    """The weights digest a gallery file's meta says made its rows (``compat embed``'s
    ``weights_sha256``, the embedding cache's ``cache_key``), else None."""
    key = meta.get("cache_key") if isinstance(meta, dict) else None
    found = key.get("weights_sha256") if isinstance(key, dict) else None
    found = found or (meta.get("weights_sha256") if isinstance(meta, dict) else None)
    return found if isinstance(found, str) else None


def served_queries(
    adapter: Any,
    q: Any,
    query_path: Path,
    g: Any,
    gallery_path: Path,
    dim_mismatch: str | None,
    old_query: Path | None = None,
) -> tuple[np.ndarray, str]:
    """The query rows of bundle ``q`` served by ``adapter`` against gallery bundle ``g`` (unit
    rows in the map's output space) and the note that says so. A blend reads the old model's
    rows of the same queries from ``old_query`` (:func:`old_rows`)."""
    from compat.maps.space import Joins

    # The one check of a served map (the gate's and backfill's): the versions and weights its
    # card records against the files' own (each fact a file does not record: skipped).
    adapter.check_serves(
        served_role(adapter), q.dim, str(query_path), None if dim_mismatch else g.dim,
        allow_refused=True,
        joins=Joins(source=q.version, target=g.version, from_weights=made_by(q.meta),
                    to_weights=made_by(g.meta), weights_origin="the files' meta records",
                    wanted=f"not {q.version or query_path} -> {g.version or gallery_path}"),
    )  # fmt: skip
    if adapter.role != BLEND:
        note = (
            f"query rows mapped by the {adapter.kind} adapter {adapter.folder} ({_spans(adapter)})"
        )
        return adapter.apply(q.embeddings), note
    assert old_query is not None  # open_query_map: a blend without --old-query is exit 2
    rows, blended = blend_queries(adapter, q.embeddings, q.ids, query_path, old_query)
    return rows, f"queries {blended}"


def blend_queries(
    adapter: Any, new_rows: np.ndarray, ids: list[str] | None, query_path: Path, old_query: Path
) -> tuple[np.ndarray, str]:
    """A query blend's served queries: the new model's ``new_rows`` (named ``ids``) adapted and
    SLERPed with the old model's own rows of the same queries from ``old_query``
    (:func:`old_rows`), through :meth:`compat.maps.store.Map.queries`; and what they are (for
    the note). A file gallery's queries and a table gallery's older-space ones
    (:func:`compat.embeddings.table_search.score_table`) are both served here."""
    old = old_rows(adapter, old_query, ids, len(new_rows), query_path)
    note = (
        f"blended (weight {adapter.card.blend.weight:g}) by the {adapter.kind} query blend "
        f"{adapter.folder} ({_spans(adapter)}): the adapted query and the old model's own from "
        f"{old_query}"
    )
    return adapter.queries(new_rows, old), note


def _spans(adapter: Any) -> str:
    """``v3-scratch -> v1, 128 -> 128``: the versions and widths a map joins, for the notes."""
    return f"{adapter.from_} -> {adapter.to}, {adapter.in_dim} -> {adapter.out_dim}"


def old_rows(
    adapter: Any, path: Path, ids: list[str] | None, n: int, query_path: Path
) -> np.ndarray:
    """The old model's rows of the ``n`` queries (named ``ids``) from ``path`` (any format
    ``--query`` takes; labels not needed), in the queries' order: by id when both files carry
    ids (each query id must be there, once), else row for row (as many rows). Exit 4 naming the
    file otherwise, or when its width is not the blend's old side or the versions and weights it
    records are not the ones the blend's card names."""
    from compat.embeddings.reader import GalleryReader
    from compat.maps.space import Joins

    r = GalleryReader(path, labels=False)
    if r.dim != adapter.out_dim:
        raise BadInputError(
            f"{path}: embeddings: {r.dim}-dim rows, but the blend's old side is "
            f"{adapter.out_dim}-dim ({adapter.to}; its card {adapter.where})"
        )
    adapter.check_serves(
        BLEND, allow_refused=True,
        joins=Joins(target=r.version, to_weights=made_by(r.meta),
                    weights_origin=f"{path}'s meta records",
                    wanted=f"{path} holds {r.version}'s rows"),
    )  # fmt: skip
    parts = [b.embeddings for b in r.blocks(65536, with_columns=False)]  # each checked finite
    rows = np.concatenate(parts) if parts else np.zeros((0, r.dim), np.float32)
    old_ids = None if r.ids is None else [str(i) for i in r.ids]
    if ids is not None and old_ids is not None:
        position: dict[str, int] = {}
        for i, item in enumerate(old_ids):
            if item in position:  # which of two rows is the query's old embedding: unknowable
                raise BadInputError(
                    f"{path}: ids: {item!r} names rows {position[item]} and {i} (the old "
                    "model's embeddings of the queries are matched by id: one row each)"
                )
            position[item] = i
        missing = next((item for item in ids if str(item) not in position), None)
        if missing is not None:
            raise BadInputError(
                f"{path}: ids: no row for query id {missing!r} of {query_path} (the old "
                "model's embeddings of the same queries, matched by id)"
            )
        return rows[[position[str(item)] for item in ids]]
    if len(rows) != n:
        raise BadInputError(
            f"{path}: embeddings: {len(rows)} rows, {query_path} has {n} queries (without ids "
            "in both files, rows are matched in order)"
        )
    return rows


__all__ = [
    "blend_queries",
    "made_by",
    "old_rows",
    "open_query_map",
    "served_queries",
    "served_role",
]
