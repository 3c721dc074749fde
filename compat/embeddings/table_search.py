"""A table gallery scored as it is served (``compat score --gallery <folder>/<name>.lance``).

Each row is served from the newest version whose column holds it
(:meth:`compat.embeddings.table.GalleryTable.row_versions`). A table whose rows all come from
one version is scored like a file: that column against the queries. A partially backfilled
table holds two row groups in two spaces, and is scored as the evaluate stage's
partial-backfill curve scores one (:mod:`compat.evaluate.forward`, :mod:`compat.embeddings.
mixed`): rows of the newer version (the reference) with the queries in its space, the other rows
with queries in the older space, each group's scores put on the reference's scale per query
(``calibration="match"``, :func:`compat.embeddings.mixed.calibrated_two_spaces`), all as plain
inner products of widened rows, so every protocol and ``--index`` runs on them unchanged.

Which queries score the older rows, in order: the query table's column of that version (the
queries embedded by the old model: rule 1 of :mod:`compat.embeddings.mixed`); a query adapter
whose ``to`` is that version, applied to the reference queries (a model trained elsewhere,
Drift-Adapter's direction), or a query blend's queries (those adapted queries SLERPed with the
old model's own rows of the same queries, ``--old-query``; issue 42), which come before the
query table's column (the blend was asked for); else the reference queries themselves (a
backward-compatible new version queries the old rows as they are, BCT), which must then share
the older rows' width. A table of one version is searched with the queries mapped likewise.
The group moments are measured on the rows that hold both columns (an in-place backfill keeps
the old vector of every row it upgrades): the same items in both spaces, so a map that changes
nothing changes no score; without two such rows, on each group's own rows.

Three or more versions served at once, or rows of the reference version scored by queries of
the older one (psi is one-way), are bad input (exit 4) naming the table and the columns.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from compat.embeddings.table import GalleryTable, is_table, open_table
from compat.embeddings.table_columns import column_for
from compat.errors import BadInputError


@dataclass
class Scored:
    """Query and gallery rows ready for the protocols (normalised and, for a mixed table,
    widened), with labels, ids and what was done, for the notes."""

    query: np.ndarray
    query_labels: np.ndarray
    query_ids: list[str] | None
    gallery: np.ndarray
    gallery_labels: np.ndarray
    gallery_ids: list[str] | None
    notes: list[str] = field(default_factory=list)
    groups: dict[str, Any] = field(default_factory=dict)


def _rows(table: GalleryTable, version: str, rows: np.ndarray | None = None) -> np.ndarray:
    """A version's column (zeros where null); all rows, or ``rows``, must hold it."""
    col = table.column(version)
    if col is None:
        raise BadInputError(
            f"{table.where}: {column_for(version)}: no column for {version} (vector columns: "
            f"{', '.join(table.vectors)})"
        )
    x, ok = table.read(col.name)
    need = np.ones(table.n, bool) if rows is None else rows
    if not ok[need].all():
        first = int(np.flatnonzero(need & ~ok)[0])
        raise BadInputError(f"{table.where}: {col.name}: row {first} is null")
    return x


def _queries(path: Path, version: str) -> tuple[np.ndarray | None, str | None, Any]:
    """(the query rows of ``version``, or None; where they came from; the query set's facts:
    labels, ids, its table or bundle)."""
    if is_table(path):
        q = open_table(path)
        labels = q.labels()
        if labels is None:
            raise BadInputError(f"{q.where}: label: the query table has no label column")
        col = q.column(version)
        rows = _rows(q, version) if col is not None else None
        return rows, (f"{col.name} of {path}" if col is not None else None), (q, labels, q.ids())
    from compat.embeddings.reader import load_gallery

    b = load_gallery(path)
    if b.version not in (None, version):
        return None, None, (b, b.labels, b.ids)
    return b.embeddings, str(path), (b, b.labels, b.ids)


Blend = Callable[[np.ndarray, list[str] | None], tuple[np.ndarray, str]]


def _check_adapter(
    adapter: Any,
    table: Any,
    source: str | None,
    target: str,
    in_dim: int,
    rows_of: str,
    blend: Blend | None,
) -> None:
    """The query adapter (or blend) against the versions it serves here and the weights the
    table's columns record (:meth:`compat.maps.space.SpaceMap.check_serves`, the one check of a served
    map); its refusal is ``compat score``'s to report."""
    from compat.models.card import Joins

    def weights(version: str | None) -> str | None:
        col = table.vectors.get(column_for(version)) if version else None
        return None if col is None else col.weights_sha256

    adapter.check_serves(
        "query-adapter" if blend is None else "query-blend", in_dim, rows_of, allow_refused=True,
        joins=Joins(source=source, target=target, from_weights=weights(source),
                    to_weights=weights(target), weights_origin="the table's columns record",
                    wanted=f"the rows it searches here are {target}'s"),
    )  # fmt: skip


def score_table(
    query: str | os.PathLike[str],
    gallery: str | os.PathLike[str],
    *,
    normalize: Any,
    adapter: Any = None,
    blend: Blend | None = None,
) -> Scored:
    """Query and gallery rows for ``compat score`` on a table gallery (module docstring).
    ``normalize(x, path)`` L2-normalises rows (or is the identity for ``--no-normalize``);
    ``adapter`` is an opened query adapter or blend (:class:`compat.maps.space.SpaceMap`) or
    None. A blend comes with ``blend(new_rows, ids)``: its served queries and what they are
    (:func:`compat.cli.score_queries.blend_queries`)."""
    query, gallery = Path(query), Path(gallery)
    table = open_table(gallery)
    g_labels = table.labels()
    if g_labels is None:
        raise BadInputError(f"{table.where}: label: the table has no label column to score by")
    served = table.row_versions()
    names = [c.version for c in table.vectors.values() if (served == c.version).any()]
    ids = table.ids().tolist()
    if len(names) > 2:
        raise BadInputError(
            f"{table.where}: {', '.join(column_for(v) for v in names)}: rows are served from "
            f"{len(names)} versions; a search joins two spaces at most (backfill the oldest)"
        )
    ref = names[-1]
    q_ref, ref_from, (_, q_labels, q_ids) = _queries(query, ref)
    if len(names) == 1:
        if q_ref is None:  # a cross test: the queries' own version on this gallery's rows
            q_ref, ref_from = _one_version(query)
        if adapter is not None:
            _check_adapter(adapter, table, None, ref, q_ref.shape[1], str(query), blend)
            q_ref, ref_from = _mapped(adapter, blend, q_ref, _list(q_ids), ref_from)
        g = normalize(_rows(table, ref), gallery)
        q = normalize(q_ref, query)
        note = f"gallery {gallery}: every row served from {column_for(ref)}; queries {ref_from}"
        return Scored(q, q_labels, _list(q_ids), g, g_labels, ids, [note],
                      {ref: {"rows": table.n, "queries": ref_from}})  # fmt: skip
    old = names[0]
    if q_ref is None:
        raise BadInputError(
            f"{query}: no {ref} queries: rows of {table.where} served from {column_for(ref)} "
            f"need queries in {ref}'s space (a map to {ref} is one-way)"
        )
    is_ref = served == ref
    q_old, old_from, _ = (
        _queries(query, old) if is_table(query) and blend is None else (None, None, None)
    )
    if adapter is not None:  # it maps ref's queries onto the rows not yet in ref: old's
        _check_adapter(adapter, table, ref, old, q_ref.shape[1], str(query), blend)
    if q_old is None and adapter is not None:
        q_old, old_from = _mapped(adapter, blend, q_ref, _list(q_ids), f"{ref} queries")
    if q_old is None:
        q_old, old_from = q_ref, f"{ref} queries (backward compatible)"
    ref_rows, old_rows = _rows(table, ref, is_ref), _rows(table, old, ~is_ref)
    if q_old.shape[1] != old_rows.shape[1] or q_ref.shape[1] != ref_rows.shape[1]:
        raise BadInputError(
            f"{query}: the queries are {q_ref.shape[1]}-dim, the rows of {old} "
            f"{old_rows.shape[1]}-dim and of {ref} {ref_rows.shape[1]}-dim; give {old} queries "
            f"(a query table with {column_for(old)}) or --query-adapter"
        )
    q_r, q_o = normalize(q_ref, query), normalize(q_old, query)
    has_old = table.valid([column_for(old)])[column_for(old)]
    g_r = _normalized_where(ref_rows, is_ref, normalize, gallery)
    g_o = _normalized_where(old_rows, has_old, normalize, gallery)
    both = is_ref & has_old
    from compat.embeddings.mixed import GroupStats, calibrated_two_spaces

    if both.sum() >= 2:
        stats, on = (GroupStats.of(g_r[both]), GroupStats.of(g_o[both])), "rows held in both"
    else:
        stats, on = (GroupStats.of(g_r[is_ref]), GroupStats.of(g_o[~is_ref])), "each group's rows"
    q, g = calibrated_two_spaces(q_r, q_o, g_r, g_o, is_ref, stats)
    n_ref = int(is_ref.sum())
    note = (
        f"gallery {gallery}: {n_ref} rows served from {column_for(ref)} scored with {ref_from}, "
        f"{table.n - n_ref} from {column_for(old)} with {old_from}; scores matched across the "
        f"two spaces (moments of the {int(both.sum()) if on == 'rows held in both' else table.n} "
        f"{on})"
    )
    groups = {ref: {"rows": n_ref, "queries": ref_from},
              old: {"rows": table.n - n_ref, "queries": old_from}}  # fmt: skip
    return Scored(q, q_labels, _list(q_ids), g, g_labels, ids, [note], groups)


def _mapped(
    adapter: Any, blend: Blend | None, rows: np.ndarray, ids: list[str] | None, rows_from: str
) -> tuple[np.ndarray, str]:
    """The new queries ``rows`` mapped into the adapter's ``to`` space: adapted, or the blend's
    served queries; and where they came from."""
    if blend is None:
        return adapter.apply(rows), f"{rows_from} through the adapter {adapter.folder}"
    served, how = blend(rows, ids)
    return served, f"{rows_from} {how}"


def _normalized_where(x: np.ndarray, rows: np.ndarray, normalize: Any, path: Path) -> np.ndarray:
    """``x`` with ``rows`` normalised; the others (null in the column) stay zero."""
    out = np.zeros_like(x)
    out[rows] = normalize(x[rows], path)
    return out


def _one_version(path: Path) -> tuple[np.ndarray, str]:
    """The query rows of a query file of another version, or of a table's only column."""
    if not is_table(path):
        from compat.embeddings.reader import load_gallery

        return load_gallery(path).embeddings, str(path)
    q = open_table(path)
    if len(q.vectors) != 1:
        raise BadInputError(
            f"{q.where}: {', '.join(q.vectors)}: none is the gallery's version; name the "
            "queries' version by giving a table with that column"
        )
    col = next(iter(q.vectors.values()))
    return _rows(q, col.version), f"{col.name} of {path}"


def _list(ids: Any) -> list[str] | None:
    return None if ids is None else [str(i) for i in ids]


__all__ = ["Scored", "score_table"]
