"""Filling one vector column of a table gallery in place, without rewriting any other column.

What Lance rewrites (measured, docs/findings.md "LanceDB galleries"): ``merge_insert`` by id
rewrites every column of each matched row into a new fragment and moves those rows to the end
of the table; ``add_columns`` and a fragment's ``merge_columns`` write the new column alone,
but only once (an existing column cannot be filled further). So a column is filled in two
steps, each one Lance commit:

1. **declare** (:func:`declare_column`): the column is added all null with its field metadata
   (a metadata-only commit: no data file), or, when it exists, its metadata gains the new
   source (a map, an embedding run). Metadata first: a run killed before its data commit leaves
   a column that names a source no row came from yet, never rows whose source it does not name.
2. **fill** (:func:`write_fragment_column` for each fragment with a row to change, then
   :func:`commit_column`): each fragment's new file of that column alone (the values it had,
   plus the new rows, null elsewhere; deleted rows null), streamed batch by batch, then one
   ``Update`` (``rewrite_columns``) commit that swaps the column's file in those fragments.
   Every other column keeps its files byte for byte; fragments with nothing to change keep
   theirs; an index on the column forgets the swapped fragments (Lance searches them flat).

A run killed before the fill commit leaves the table as it was (Lance commits are atomic); its
fragment files sit unreferenced under ``data/`` until the next run of the same job uses them
(their names are the job's: :func:`fragment_file`) or a failed run removes them.

:func:`fill_by_id` fills a column from rows in memory matched by id (``compat embed`` and
``compat data import`` into an existing table). One writer per table: :func:`table_lock`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from compat.embeddings.lock import WriterLock
from compat.embeddings.table import Fragment, GalleryTable, open_table
from compat.embeddings.table_columns import VectorColumn, arrow_vectors, fsl_type, vectors_of
from compat.errors import BadInputError, ConflictError
from compat.io import sha256_file, storage_errors

_ADDRESS = "_rowaddr"
_OFFSET = np.uint64(0xFFFFFFFF)
FILE_PREFIX = "compat-"

# (values (b, d) float32, valid (b,)) for a batch of the fragment's live rows starting at a row.
Compute = Callable[[Any, int], tuple[np.ndarray, np.ndarray]]


def table_lock(path: str | os.PathLike[str]) -> WriterLock:
    """The one-writer lock of a table, ``.<name>.lance.lock`` beside it: every compat command
    that writes the table holds it (a second one is exit 6)."""
    p = Path(path)
    return WriterLock(
        p.parent / f".{p.name}.lock",
        busy=f"{p}: another compat command (pid {{pid}}) is writing this table (a backfill, "
        "an embed or an import); wait for it to finish",
        cannot=f"{p}: cannot write beside the table",
    )


@dataclass(frozen=True)
class FragmentFile:
    """A fragment's new file of a column, finished: its name under ``data/`` and sha256."""

    fragment: int
    file: str
    sha256: str
    rows: int  # physical rows


def fragment_file(tag: str, fragment: int) -> str:
    """The name of a run's file for one fragment (``tag``: the job), under ``data/``."""
    return f"{FILE_PREFIX}{tag}-{fragment:06d}.lance"


def declare_column(table: GalleryTable, column: VectorColumn) -> GalleryTable:
    """The column added (all null) with its metadata, or its metadata merged with ``column``'s
    sources (each once); the table opened again after a commit, as it is when nothing changed.
    A column of another width is bad input (exit 4)."""
    import pyarrow as pa

    have = table.vectors.get(column.name)
    if have is None:
        field = pa.field(column.name, fsl_type(column.dim), nullable=True,
                         metadata=column.metadata())  # fmt: skip
        with _lance_errors(table):
            table.ds.add_columns(field)
        return open_table(table.path)
    if have.dim != column.dim:
        raise BadInputError(
            f"{table.where}: {column.name}: the column holds {have.dim}-dim rows, the new rows "
            f"are {column.dim}-dim (the wrong width)"
        )
    merged = VectorColumn(
        have.name,
        have.version,
        have.dim,
        have.weights_sha256 or column.weights_sha256,
        have.sources + [s for s in column.sources if s not in have.sources],
    )
    if merged == have and table.ds.schema.field(have.name).metadata:
        return table
    with _lance_errors(table):
        table.ds.update_field_metadata({have.name: merged.metadata()}, replace=True)
    return open_table(table.path)


def write_fragment_column(
    table: GalleryTable,
    frag: Fragment,
    column: VectorColumn,
    read_columns: list[str],
    compute: Compute,
    *,
    batch_size: int,
    name: str,
    progress: Callable[[int], None] | None = None,
) -> FragmentFile:
    """Write ``data/<name>``: the fragment's values of ``column`` (one per physical row),
    ``compute`` called on each batch of its live rows (``read_columns``) with the batch's first
    table row; deleted rows are null. Returns the finished file with its sha256."""
    import pyarrow as pa
    from lance.file import LanceFileWriter

    path = table.path / "data" / name
    schema = pa.schema([pa.field(column.name, fsl_type(column.dim), nullable=True)])
    d = column.dim
    with storage_errors(path):
        writer = LanceFileWriter(str(path), schema, version=table.ds.data_storage_version)
        done = 0  # physical rows written
        for start, batch in table.batches(read_columns, batch_size, fragment=frag,
                                          with_address=True):  # fmt: skip
            offsets = (batch.column(_ADDRESS).to_numpy() & _OFFSET).astype(np.int64)
            values, valid = compute(batch, start)
            span = int(offsets[-1]) + 1 - done
            if span != len(offsets):  # deleted rows before or among these: null slots
                full, ok = np.zeros((span, d), np.float32), np.zeros(span, bool)
                full[offsets - done], ok[offsets - done] = values, valid
                values, valid = full, ok
            writer.write_batch(pa.record_batch([arrow_vectors(values, valid)], schema=schema))
            done += span
            if progress is not None:
                progress(batch.num_rows)
        for s in range(done, frag.physical, batch_size):  # deleted rows at the end
            m = min(batch_size, frag.physical - s)
            writer.write_batch(pa.record_batch(
                [arrow_vectors(np.zeros((m, d), np.float32), np.zeros(m, bool))], schema=schema
            ))  # fmt: skip
        writer.close()
    return FragmentFile(frag.id, name, sha256_file(path), frag.physical)


def commit_column(table: GalleryTable, column: str, files: list[FragmentFile]) -> int:
    """One commit putting each fragment's new file of ``column`` in place of its old one (the
    old file, or the column's place in a file it shares, is no longer read). Returns the new
    table version; another writer's commit in between is a conflict (exit 6)."""
    import lance
    from lance.fragment import DataFile

    ds = table.ds
    fid = ds.lance_schema.field(column).id()
    by_fragment = {f.fragment: f for f in files}
    updated = []
    for frag in ds.get_fragments():
        new = by_fragment.get(int(frag.fragment_id))
        if new is None:
            continue
        meta = frag.metadata
        kept = []
        for f in meta.files:
            if fid in f.fields:
                if len(f.fields) == 1:
                    continue  # the column's own file: replaced
                f.fields = [-2 if i == fid else i for i in f.fields]  # Lance's tombstone
            kept.append(f)
        meta.files = [*kept, DataFile.create(ds, new.file)]
        updated.append(meta)
    op = lance.LanceOperation.Update(
        updated_fragments=updated, fields_modified=[fid], update_mode="rewrite_columns"
    )
    with _lance_errors(table):
        done = lance.LanceDataset.commit(str(table.path), op, read_version=ds.version)
    return int(done.version)


def remove_unreferenced(table_path: Path, prefix: str) -> None:
    """Delete this run's fragment files (``data/<prefix>*``) the table does not read."""
    import lance

    data = table_path / "data"
    mine = sorted(data.glob(f"{prefix}*.lance")) if data.is_dir() else []
    if not mine:
        return
    ds = lance.dataset(str(table_path))
    read = {f.path for frag in ds.get_fragments() for f in frag.metadata.files}
    for path in mine:
        if path.name not in read:
            with contextlib.suppress(OSError):
                path.unlink()


def fill_by_id(
    path: str | os.PathLike[str],
    column: VectorColumn,
    ids: np.ndarray,
    rows: np.ndarray,
    *,
    where: str,
    batch_size: int = 65536,
) -> GalleryTable:
    """Fill ``column`` with ``rows`` (``ids[i]`` names the table row of ``rows[i]``), keeping the
    column's other rows: what ``compat embed`` and ``compat data import`` do to an existing
    table. Every id must be a row of the table (rows are not added; ``where`` names the rows'
    file in the error); under the table's lock."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from compat.io import fingerprint, sha256_bytes

    rows = np.ascontiguousarray(rows, dtype=np.float32)
    incoming = pa.array(np.asarray(ids, dtype=np.str_).tolist(), type=pa.string())
    if pc.count_distinct(incoming).as_py() != len(incoming):
        raise BadInputError(f"{where}: ids: the same id twice; each row names one table row")
    with table_lock(path):
        table = open_table(path)
        have = pa.array(table.ids().tolist(), type=pa.string())
        found = pc.index_in(incoming, value_set=have)
        if found.null_count:
            first = int(np.flatnonzero(~found.is_valid().to_numpy(zero_copy_only=False))[0])
            raise BadInputError(
                f"{where}: ids: {found.null_count} ids are not rows of {table.where} (first: "
                f"{incoming[first].as_py()!r}); a fill adds no rows"
            )
        table = declare_column(table, column)
        existing = column.name in table.ds.schema.names and _has_data(table, column.name)
        read = ["id", column.name] if existing else ["id"]

        def compute(batch: Any, start: int) -> tuple[np.ndarray, np.ndarray]:
            if existing:
                y, ok = vectors_of(batch.column(column.name), column.dim,
                                   f"{table.where}: {column.name}", start)  # fmt: skip
                y, ok = y.copy(), ok.copy()
            else:
                y = np.zeros((batch.num_rows, column.dim), np.float32)
                ok = np.zeros(batch.num_rows, bool)
            pos = pc.index_in(batch.column("id"), value_set=incoming)
            hit = pos.is_valid().to_numpy(zero_copy_only=False)
            y[hit] = rows[pos.drop_null().to_numpy()]
            return y, ok | hit

        tag = fingerprint({"rows": sha256_bytes(rows.tobytes()), "table": table.ds.version,
                           "column": column.name})  # fmt: skip
        files = []
        try:
            for frag in table.fragments():
                name = fragment_file(tag, frag.id)
                files.append(write_fragment_column(table, frag, column, read, compute,
                                                   batch_size=batch_size, name=name))  # fmt: skip
            commit_column(table, column.name, files)
        except BaseException:
            remove_unreferenced(table.path, f"{FILE_PREFIX}{tag}-")
            raise
        return open_table(path)


def _has_data(table: GalleryTable, column: str) -> bool:
    """Whether any fragment has a file holding ``column`` (a declared column has none)."""
    fid = table.ds.lance_schema.field(column).id()
    return any(fid in f.fields for frag in table.ds.get_fragments() for f in frag.metadata.files)


@contextlib.contextmanager
def _lance_errors(table: GalleryTable) -> Any:
    """A Lance commit conflict as exit 6, a full disk as exit 5, naming the table."""
    from lance.commit import CommitConflictError

    try:
        with storage_errors(table.path):
            yield
    except CommitConflictError as err:
        raise ConflictError(
            f"{table.where}: another writer changed the table meanwhile ({' '.join(str(err).split())}); "
            "run again"
        ) from None


__all__ = [
    "FILE_PREFIX",
    "FragmentFile",
    "commit_column",
    "declare_column",
    "fill_by_id",
    "fragment_file",
    "remove_unreferenced",
    "table_lock",
    "write_fragment_column",
]
