"""Table galleries made and taken apart: a table created from a file gallery (``compat data
import``) or a version's embeddings (``compat embed VERSION --out <folder>/<name>.lance``), and a
table exported to a file gallery (``compat data export``).

* **Created whole or not at all**: a new table is written into ``.<name>.<pid>.new`` beside its
  path, checked (ids, widths, metadata: :class:`compat.embeddings.table.GalleryTable`) and
  renamed into place; a folder left by a killed run is removed by the next creation once its pid
  is gone. Rows stream in blocks, in fragments of :data:`ROWS_PER_FRAGMENT` rows (a backfill's
  unit of work and of resumption).
* **Into an existing table**: rows are matched by id and fill their version's column
  (:func:`compat.embeddings.table_fill.fill_by_id`); no row is added or removed.
* **A partially backfilled file** (``row_versions``) puts each row into its version's column;
  a file that records no version needs one named (``--version``).
* **Export**: one version's column (every row must have it), or by default the rows as served
  (each from its newest version, ``row_versions`` recorded), in any file format
  (:mod:`compat.embeddings.formats`); the payload columns stay in the table.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from compat.embeddings.table import LAYOUT, GalleryTable, is_table, open_table
from compat.embeddings.table_columns import (
    META_KEY,
    VectorColumn,
    arrow_vectors,
    column_for,
    fsl_type,
)
from compat.errors import BadInputError, UsageError

ROWS_PER_FRAGMENT = 1 << 18  # 128 MiB of a 128-dim column: a fragment is resumed whole
BLOCK = 65536  # rows per block read from a file gallery


def _new_folder(out: Path) -> Path:
    """A fresh creation folder beside ``out``; those of dead pids are removed first."""
    from compat.io import _pid_alive

    for old in out.parent.glob(f".{out.name}.*.new"):
        pid = old.name.rsplit(".", 2)[-2]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    tmp = out.parent / f".{out.name}.{os.getpid()}.new"
    shutil.rmtree(tmp, ignore_errors=True)
    return tmp


def create_table(
    out: str | os.PathLike[str],
    schema: Any,
    batches: Iterator[Any],
    *,
    fingerprint: str | None,
    meta: dict[str, Any],
) -> GalleryTable:
    """A new table at ``out`` from Arrow ``batches`` of ``schema`` (vector fields carrying their
    metadata), with the gallery-wide metadata; created whole or not at all (module docstring)."""
    import pyarrow as pa

    from compat.embeddings.table import lance_module
    from compat.io import fsync_dir, storage_errors

    lance = lance_module()
    out = Path(out)
    if out.exists():
        raise UsageError(f"{out}: exists; a new table is written only where none is")
    with storage_errors(out):
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = _new_folder(out)
        try:
            reader = pa.RecordBatchReader.from_batches(schema, batches)
            ds = lance.write_dataset(reader, str(tmp), schema=schema, mode="create",
                                     max_rows_per_file=ROWS_PER_FRAGMENT)  # fmt: skip
            body = {"layout": LAYOUT, "fingerprint": fingerprint, "meta": meta}
            ds.update_schema_metadata({META_KEY: json.dumps(body, sort_keys=True, default=str)})
            table = GalleryTable(tmp, named=False, where=str(out))
            table.check_ids()
            if out.exists():
                raise UsageError(f"{out}: appeared while the table was written; not replaced")
            os.replace(tmp, out)
            fsync_dir(out.parent)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return open_table(out)


def _schema(columns: list[VectorColumn], labels: bool) -> Any:
    import pyarrow as pa

    fields = [pa.field("id", pa.string(), nullable=False)]
    if labels:
        fields.append(pa.field("label", pa.int64(), nullable=False))
    fields += [
        pa.field(c.name, fsl_type(c.dim), nullable=True, metadata=c.metadata()) for c in columns
    ]
    return pa.schema(fields)


def import_gallery(
    src: str | os.PathLike[str], out: str | os.PathLike[str], *, version: str | None = None
) -> GalleryTable:
    """The file gallery ``src`` (``.npz``, ``.npy`` + sidecar, Parquet) as the table ``out``: a
    new table, or, when ``out`` exists, its rows filling their versions' columns by id."""
    from compat.embeddings.reader import GalleryReader

    reader = GalleryReader(src)
    per_row = _row_versions(reader, version)
    names = _oldest_first(np.unique(per_row).tolist(), reader.meta)
    source = {"kind": "imported", "file": str(src)}
    weights = _weights(reader.meta)
    columns = [
        VectorColumn(column_for(v), v, reader.dim, weights if len(names) == 1 else None, [source])
        for v in names
    ]
    if Path(out).exists():
        from compat.embeddings.table_fill import fill_by_id

        ids = reader.ids if reader.ids is not None else np.arange(reader.n).astype(np.str_)
        x = reader.memmap()
        table = None
        for col in columns:
            rows = np.flatnonzero(per_row == col.version)
            table = fill_by_id(out, col, ids[rows], np.asarray(x[rows]), where=reader.where)
        assert table is not None
        return table
    labels = reader.labels

    def batches() -> Iterator[Any]:
        import pyarrow as pa

        for b in reader.blocks(BLOCK):
            stop = b.start + len(b.embeddings)
            ids = b.ids if b.ids is not None else np.arange(b.start, stop).astype(np.str_)
            arrays = [pa.array(ids.tolist(), type=pa.string())]
            if labels is not None:
                arrays.append(pa.array(labels[b.start : stop], type=pa.int64()))
            for col in columns:
                arrays.append(arrow_vectors(b.embeddings, per_row[b.start : stop] == col.version))
            yield pa.record_batch(arrays, schema=schema)

    schema = _schema(columns, labels is not None)
    meta = {k: v for k, v in reader.meta.items() if k not in ("cache_key", "content_sha256")}
    return create_table(out, schema, batches(), fingerprint=reader.fingerprint, meta=meta)


def _row_versions(reader: Any, version: str | None) -> np.ndarray:
    """Each row's version: the file's ``row_versions`` or ``version``, else ``--version``."""
    if version is not None and reader.row_versions is not None:
        raise BadInputError(
            f"{reader.where}: row_versions: the file names each row's version; drop --version"
        )
    if version is not None and reader.version not in (None, version):
        raise BadInputError(
            f"{reader.where}: version: the file says {reader.version!r}, not --version {version!r}"
        )
    if reader.row_versions is not None:
        return np.asarray(reader.row_versions, dtype=np.str_)
    v = version or reader.version
    if v is None:
        raise BadInputError(
            f"{reader.where}: version: the gallery records no version (neither version nor "
            "row_versions); name it with --version"
        )
    return np.full(reader.n, v)


def _oldest_first(versions: list[str], meta: dict[str, Any]) -> list[str]:
    """The versions of a file's rows, oldest first (the table's column order, so the newest
    serves a row): in the order its backfills moved rows (``meta["backfill"]``: from, then to),
    else by name with numbers compared as numbers (``v2`` before ``v10``)."""
    import re

    chain: list[str] = []
    for run in meta.get("backfill", []) if isinstance(meta.get("backfill"), list) else []:
        if isinstance(run, dict):
            chain += [v for v in (run.get("from"), run.get("to")) if isinstance(v, str)]
    rank = {v: i for i, v in reversed(list(enumerate(chain)))}

    def key(v: str) -> tuple[int, list[Any]]:
        parts = [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", v)]
        return rank.get(v, -1), parts

    return sorted(versions, key=key)


def _weights(meta: dict[str, Any]) -> str | None:
    """The weights that made a gallery's rows, where its meta says (embed, the cache key)."""
    sha = meta.get("weights_sha256")
    key = meta.get("cache_key")
    if not isinstance(sha, str) and isinstance(key, dict):
        sha = key.get("weights_sha256")
    return sha if isinstance(sha, str) else None


def write_table_embeddings(out: str | os.PathLike[str], bundle: Any) -> GalleryTable:
    """A version's embeddings (``compat embed``) as the table ``out``: a new table (id, label,
    ``vec_<version>``), or that column of an existing one filled by id."""
    import pyarrow as pa

    if bundle.version is None:
        raise BadInputError("embeddings: version: the embeddings name no version")
    if bundle.ids is None:
        raise BadInputError("embeddings: ids: a table's rows are matched by id; the rows have none")
    source = {"kind": "embedded", "items": bundle.meta.get("items"),
              "fingerprint": bundle.fingerprint, "weights_sha256": _weights(bundle.meta)}  # fmt: skip
    col = VectorColumn(column_for(bundle.version), bundle.version, bundle.dim,
                       _weights(bundle.meta), [source])  # fmt: skip
    ids = np.asarray(bundle.ids, dtype=np.str_)
    if Path(out).exists():
        from compat.embeddings.table_fill import fill_by_id

        return fill_by_id(out, col, ids, bundle.embeddings, where=f"{bundle.version} embeddings")
    schema = _schema([col], True)

    def batches() -> Iterator[Any]:
        for s in range(0, len(bundle), BLOCK):
            sl = slice(s, s + BLOCK)
            yield pa.record_batch(
                [pa.array(ids[sl].tolist(), type=pa.string()),
                 pa.array(bundle.labels[sl], type=pa.int64()),
                 arrow_vectors(bundle.embeddings[sl])],
                schema=schema,
            )  # fmt: skip

    return create_table(out, schema, batches(), fingerprint=bundle.fingerprint,
                        meta=dict(bundle.meta))  # fmt: skip


def export_table(
    src: str | os.PathLike[str], out: str | os.PathLike[str], *, version: str | None = None
) -> tuple[int, int, str]:
    """The table ``src`` written to the file gallery ``out`` (format from the path): one
    version's column, or the rows as served. Returns (rows, width, what was exported)."""
    from compat.embeddings.formats import format_of
    from compat.embeddings.gallery_out import claim_gallery, write_gallery

    fmt = format_of(out)
    if fmt == "lance" or is_table(out):
        raise UsageError(f"--out {out}: a table; export writes .npz, .npy or a Parquet folder")
    claim_gallery(out, fmt)  # the one checked-output path, before any work: a user's file kept
    table = open_table(src)
    if version is not None:
        col = table.column(version)
        if col is None:
            raise BadInputError(
                f"{table.where}: {column_for(version)}: no column for version {version} (vector "
                f"columns: {', '.join(table.vectors)})"
            )
        columns, what = [col.name], col.name
    else:
        columns, what = list(table.vectors), "served rows"
    dim = table.served_dim(columns)
    ids, labels = table.ids(), table.labels()
    if version is not None:
        ok = table.valid(columns)[columns[0]]
        if not ok.all():
            first = int(np.flatnonzero(~ok)[0])
            raise BadInputError(
                f"{table.where}: {columns[0]}: {int((~ok).sum())} rows are null (a partial "
                f"backfill; first row {first}, id {str(ids[first])!r}); export the served rows"
            )
        per_row = np.full(table.n, version)
    else:
        per_row = table.row_versions(columns)
    distinct = list(dict.fromkeys(per_row.tolist()))
    one = distinct[0] if len(distinct) == 1 else None
    meta = {**table.meta, "table": {"path": str(table.path), "version": int(table.ds.version),
                                    "columns": columns}}  # fmt: skip
    blocks = table.served_batches(BLOCK, columns)
    write_gallery(
        out, table.n, dim, ((start, rows) for start, rows, _ in blocks), ids=ids, labels=labels,
        row_versions=None if one is not None else per_row, version=one,
        fingerprint=table.fingerprint, meta=meta,
    )  # fmt: skip
    return table.n, dim, what


__all__ = [
    "BLOCK",
    "ROWS_PER_FRAGMENT",
    "create_table",
    "export_table",
    "import_gallery",
    "write_table_embeddings",
]
