"""Gallery formats: an ``.npz`` bundle, a memory-mapped ``.npy`` matrix, a folder of Parquet shards,
a LanceDB table.

The format follows the path (:func:`format_of`):

=====================  ==========================================================================
``*.npz``              an :mod:`~compat.embeddings.bundle` (read whole; shapes checked from the
                       archive's headers before anything is decompressed)
``*.npy``              the (n, d) matrix alone, read in blocks or memory-mapped; labels, ids, row
                       versions and provenance, when there are any, sit in a sidecar bundle
                       without ``embeddings``: ``<stem>.meta.npz`` (``g.npy`` -> ``g.meta.npz``)
a folder (or ``*.parquet``)  Parquet shards ``*.parquet`` read in file-name order, columns ``id``
                       (string), ``embedding`` (fixed-size list of float32), optional ``label``
                       (integer) and ``row_version`` (string); gallery-wide provenance (``version``,
                       ``fingerprint``, ``meta``) in ``_compat.json`` beside them (Parquet readers
                       skip files starting with ``_``)
``*.lance``            a LanceDB table, the folder ``<database folder>/<name>.lance``: one row per
                       item, one ``vec_<version>`` column per version
                       (:mod:`compat.embeddings.table`); read as its rows served, each from its
                       newest version
=====================  ==========================================================================

This module says which format a path names (an output need not exist yet) and where a ``.npy``
matrix's sidecar is, and writes the pieces of each format: Parquet shards with the gallery
schema, the shards' ``_compat.json``, and the header of a ``.npy`` matrix whose rows are streamed
after it (the ``.npz`` bundle and the sidecar are :mod:`compat.embeddings.bundle`'s). Reading any
of them, in row blocks or whole, with the schema checked, is :mod:`compat.embeddings.reader`'s;
a table's layout and checks are :mod:`compat.embeddings.table`'s, writing one
:mod:`compat.embeddings.table_write`'s and :mod:`compat.embeddings.table_fill`'s.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from compat.errors import UsageError

FORMATS = ("npz", "npy", "parquet", "lance")
DATASET_META = "_compat.json"
SHARD_GLOB = "*.parquet"
ROW_GROUP = 65536  # rows per row group of the shards compat writes


def format_of(path: str | os.PathLike[str]) -> str:
    """``"npz"``, ``"npy"``, ``"parquet"`` or ``"lance"`` from the path (an output need not exist
    yet)."""
    p = Path(path)
    if p.suffix == ".lance":  # a folder too, so before the Parquet folder test
        return "lance"
    if p.suffix == ".npz":
        return "npz"
    if p.suffix == ".npy":
        return "npy"
    if p.is_dir() or p.suffix in ("", ".parquet"):
        return "parquet"
    raise UsageError(
        f"{p}: unknown gallery format {p.suffix!r}; expected .npz, .npy, a folder of "
        "Parquet shards or a LanceDB table (<folder>/<name>.lance)"
    )


def sidecar_of(npy: str | os.PathLike[str]) -> Path:
    """The bundle holding a ``.npy`` matrix's labels, ids, row versions and provenance."""
    p = Path(npy)
    return p.with_name(p.stem + ".meta.npz")


# ---------------------------------------------------------------------- writing


def write_shard(
    path: Path,
    ids: np.ndarray,
    embeddings: np.ndarray,
    labels: np.ndarray | None,
    row_versions: np.ndarray | None,
) -> None:
    """One Parquet shard with the gallery schema (written to ``path`` as is: callers rename)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = embeddings.shape[1]
    cols: dict[str, Any] = {
        "id": pa.array(ids.tolist() if ids.dtype.kind == "U" else ids, type=pa.string()),
        "embedding": pa.FixedSizeListArray.from_arrays(
            pa.array(np.ascontiguousarray(embeddings, dtype=np.float32).ravel()), d
        ),
    }
    if labels is not None:
        cols["label"] = pa.array(labels, type=pa.int64())
    if row_versions is not None:
        cols["row_version"] = pa.array(row_versions.tolist(), type=pa.string())
    # Row groups bound a reader's memory: Parquet is decoded one row group at a time.
    pq.write_table(pa.table(cols), path, row_group_size=ROW_GROUP)


def write_dataset_meta(
    folder: Path, version: str | None, fingerprint: str | None, meta: dict
) -> None:
    """The shards' gallery-wide provenance, ``<folder>/_compat.json``, written atomically."""
    from compat.io import atomic_path

    with atomic_path(folder / DATASET_META) as tmp:
        tmp.write_text(
            json.dumps(
                {"version": version, "fingerprint": fingerprint, "meta": meta}, sort_keys=True
            )
            + "\n"
        )


def write_npy_header(f: Any, n: int, d: int) -> None:
    """A version 1.0 ``.npy`` header for a C-ordered (n, d) float32 matrix; rows follow."""
    from numpy.lib import format as npformat

    npformat.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (n, d)})


__all__ = [
    "DATASET_META",
    "FORMATS",
    "ROW_GROUP",
    "SHARD_GLOB",
    "format_of",
    "sidecar_of",
    "write_dataset_meta",
    "write_npy_header",
    "write_shard",
]
