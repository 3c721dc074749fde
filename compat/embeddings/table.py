"""A gallery as a LanceDB table: one row per item, one vector column per version.

A table is named by its path, ``<database folder>/<name>.lance``: LanceDB (embedded, no server)
opens it as ``lancedb.connect("<database folder>").open_table("<name>")``; compat reads and
writes it with Lance (``pylance``), LanceDB's storage layer. Its columns:

=====================  ===========================================================================
``id``                 string, one per row, never null, no two alike (the row's item)
``label`` (optional)   integer identity, what ``compat score`` ranks by
``vec_<version>``      fixed-size list of float32, one column per version that embedded (or a map
                       moved) the rows; null where that version has no row yet (a partial
                       backfill). A version's dots become underscores (``v1.2`` -> ``vec_v1_2``):
                       Lance column names cannot hold a dot
anything else          the user's payload, kept as it is (compat never rewrites it)
=====================  ===========================================================================

Metadata (Lance schema metadata, key ``compat``): ``layout`` (:data:`LAYOUT`), the data
``fingerprint`` and the gallery's ``meta`` (class names, ...). Each vector column's field
metadata records its version, width, the version's weights and where its rows came from
(:mod:`compat.embeddings.table_columns`).

Which version serves a row: the last vector column, in the table's column order (the order in
which versions were added), that is not null in that row (:meth:`GalleryTable.row_versions`).
A row with no vector at all is bad input.

Rows are in the table's order (its fragments in order, deleted rows skipped): row ``r`` of a
table is row ``r`` of the file it was imported from or exported to, which is what makes a
table's backfill row for row the file backfill's (:mod:`compat.models.rowblocks`).

Bad input is one line naming the table and the field (exit 4): no ``id`` column, null or
duplicate ids, a ``vec_*`` column that is not a fixed-size list of float32 or is not named for a
version, metadata that disagrees with its column (version, width), NaN or inf rows.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from compat.embeddings.table_columns import (
    META_KEY,
    VEC_PREFIX,
    VectorColumn,
    parse_vector_field,
    vectors_of,
)
from compat.errors import BadInputError, NotFoundError, UsageError

SUFFIX = ".lance"
LAYOUT = "compat-gallery/1"
SCAN_BATCH = 65536  # rows per scanned batch where a caller does not say
# Bytes a scan reads ahead: Lance's default (2 GiB) would let a big table's reads outrun the
# map and hold them all; 64 MiB kept a 4M-row backfill's peak flat (docs/findings.md).
IO_BUFFER = 64 << 20


def lance_module() -> Any:
    """The ``lance`` module (``pylance``, LanceDB's storage layer), or a usage error (exit 2)
    naming the extra to install: LanceDB is optional, and compat opens no table before this."""
    try:
        import lance
    except ImportError:
        raise UsageError(
            "a LanceDB table needs LanceDB, an optional dependency: pip install 'compat[lance]'"
        ) from None
    return lance


def is_table(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a LanceDB table (``<folder>/<name>.lance``)."""
    return Path(path).suffix == SUFFIX


def table_name(path: str | os.PathLike[str]) -> tuple[Path, str]:
    """(database folder, table name) of a table path: what ``lancedb.connect`` and
    ``open_table`` take."""
    p = Path(path)
    return p.parent, p.name[: -len(SUFFIX)]


def check_version(version: str, option: str = "version") -> str:
    """A version named on the command line: the registry's name rule, else a usage error."""
    from compat.names import name_problem

    problem = name_problem(version)
    if problem:
        raise UsageError(f"{option} {version!r}: {problem}")
    return version


@dataclass(frozen=True)
class Fragment:
    """A fragment of the table: its id, the table row of its first live row, its live and
    physical rows (a deleted row keeps its physical slot)."""

    id: int
    start: int
    rows: int
    physical: int


class GalleryTable:
    """An opened, checked table gallery (module docstring).

    Attributes: ``path``, ``where`` (as errors name it), ``ds`` (the Lance dataset), ``n``,
    ``vectors`` (``{column: VectorColumn}`` in column order), ``has_label``, ``payload`` (the
    other columns), ``fingerprint``, ``meta``."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        version: int | None = None,
        *,
        named: bool = True,
        where: str | None = None,
    ) -> None:
        lance = lance_module()
        self.path = Path(path)
        self.where = where or str(self.path)
        if named and not is_table(self.path):
            raise UsageError(f"{self.path}: a table path ends in {SUFFIX} (<folder>/<name>.lance)")
        if not self.path.exists():
            raise NotFoundError(f"{self.path}: table not found")
        if not self.path.is_dir():
            raise BadInputError(f"{self.path}: not a Lance table (a file, not a folder)")
        try:
            self.ds = lance.dataset(str(self.path), version=version)
        except (OSError, ValueError, RuntimeError) as err:
            raise BadInputError(
                f"{self.path}: not a readable Lance table ({_one_line(err)})"
            ) from None
        self._check_schema()
        self.n = int(self.ds.count_rows())
        if self.n == 0:
            raise BadInputError(f"{self.where}: id: the table holds no rows")
        self._ids: np.ndarray | None = None

    # ------------------------------------------------------------------ schema
    def _check_schema(self) -> None:
        import pyarrow as pa

        schema = self.ds.schema
        names = schema.names
        if "id" not in names:
            raise BadInputError(
                f"{self.where}: id: missing column (columns present: {', '.join(names)})"
            )
        t = schema.field("id").type
        if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
            raise BadInputError(f"{self.where}: id: expected strings, got {t}")
        self.has_label = "label" in names
        if self.has_label and not pa.types.is_integer(schema.field("label").type):
            raise BadInputError(
                f"{self.where}: label: expected integers, got {schema.field('label').type}"
            )
        self.vectors: dict[str, VectorColumn] = {}
        for f in schema:
            if not f.name.startswith(VEC_PREFIX):
                continue
            col = parse_vector_field(f, f"{self.where}: {f.name}")
            for other in self.vectors.values():
                if other.version == col.version:
                    raise BadInputError(
                        f"{self.where}: {f.name}: version {col.version} has a column already "
                        f"({other.name})"
                    )
            self.vectors[f.name] = col
        if not self.vectors:
            raise BadInputError(
                f"{self.where}: {VEC_PREFIX}*: no vector column (one {VEC_PREFIX}<version> "
                "column per version, a fixed-size list of float32)"
            )
        self.payload = [n for n in names if n not in ("id", "label") and n not in self.vectors]
        raw = (schema.metadata or {}).get(META_KEY.encode())
        body: Any = {}
        if raw is not None:
            try:
                body = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as err:
                raise BadInputError(
                    f"{self.where}: metadata {META_KEY}: not JSON ({_one_line(err)})"
                ) from None
            if not isinstance(body, dict) or not isinstance(body.get("meta", {}), dict):
                raise BadInputError(f"{self.where}: metadata {META_KEY}: not a JSON object")
        fp = body.get("fingerprint")
        self.fingerprint: str | None = fp if isinstance(fp, str) else None
        self.meta: dict[str, Any] = dict(body.get("meta", {}))

    def column(self, version: str) -> VectorColumn | None:
        """The vector column of ``version``, or None."""
        return next((c for c in self.vectors.values() if c.version == version), None)

    def versions(self) -> list[str]:
        """Every version with a column, in column order."""
        return [c.version for c in self.vectors.values()]

    # ------------------------------------------------------------------ rows
    def fragments(self) -> list[Fragment]:
        """The table's fragments in row order, with the table row each starts at."""
        out, start = [], 0
        for frag in self.ds.get_fragments():
            meta = frag.metadata
            rows = int(frag.count_rows())
            out.append(Fragment(int(frag.fragment_id), start, rows, int(meta.physical_rows)))
            start += rows
        return out

    def batches(
        self,
        columns: list[str],
        batch_size: int = SCAN_BATCH,
        *,
        fragment: Fragment | None = None,
        with_address: bool = False,
    ) -> Iterator[tuple[int, Any]]:
        """``(first table row, RecordBatch)`` of ``columns`` in row order, of the whole table
        or of one fragment; readahead kept small so memory stays near a few batches."""
        frags = [fragment] if fragment is not None else self.fragments()
        for frag in frags:
            start = frag.start
            scanner = self.ds.scanner(
                columns=columns,
                batch_size=batch_size,
                batch_readahead=1,
                fragment_readahead=1,
                io_buffer_size=IO_BUFFER,
                scan_in_order=True,
                fragments=[self.ds.get_fragment(frag.id)],
                with_row_address=with_address,
            )
            for batch in scanner.to_batches():
                if batch.num_rows:
                    yield start, batch
                    start += batch.num_rows

    def ids(self) -> np.ndarray:
        """(n,) ids as strings, checked (:meth:`check_ids`; read once)."""
        if self._ids is None:
            col = self._id_column()
            self._ids = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.str_)
        return self._ids

    def check_ids(self) -> None:
        """Ids checked never null and unique, without keeping them: sorted by Arrow and each
        compared with the next (at 4M ids ~130 MB at peak, a hash set took twice that); the
        memory Arrow's pool kept of it is handed back."""
        import pyarrow as pa

        self._id_column()
        pa.default_memory_pool().release_unused()

    def _id_column(self) -> Any:
        import pyarrow.compute as pc

        col = self.ds.to_table(columns=["id"]).column("id").combine_chunks()
        if col.null_count:
            first = int(np.flatnonzero(~col.is_valid().to_numpy(zero_copy_only=False))[0])
            raise BadInputError(
                f"{self.where}: id: {col.null_count} null ids (first in row {first})"
            )
        if len(col) > 1:
            order = pc.sort_indices(col)
            ranked = col.take(order)
            same = pc.equal(ranked.slice(1), ranked.slice(0, len(ranked) - 1))
            if pc.any(same).as_py():
                k = int(np.flatnonzero(same.to_numpy(zero_copy_only=False))[0])
                dup = ranked[k].as_py()
                rows = sorted(int(order[i].as_py()) for i in (k, k + 1))
                raise BadInputError(
                    f"{self.where}: id: duplicate id {dup!r} (rows {rows[0]} and {rows[1]})"
                )
        return col

    def labels(self) -> np.ndarray | None:
        """(n,) int64 labels, or None without a label column."""
        if not self.has_label:
            return None
        col = self.ds.to_table(columns=["label"]).column("label").combine_chunks()
        if col.null_count:
            raise BadInputError(f"{self.where}: label: {col.null_count} null values")
        return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.int64)

    def valid(self, columns: list[str], batch_size: int = SCAN_BATCH) -> dict[str, np.ndarray]:
        """Which rows each vector column holds (not null), read batch by batch."""
        out = {c: np.zeros(self.n, dtype=bool) for c in columns}
        for start, batch in self.batches(columns, batch_size):
            for c in columns:
                col = batch.column(c)
                stop = start + batch.num_rows
                out[c][start:stop] = (
                    True if col.null_count == 0 else col.is_valid().to_numpy(zero_copy_only=False)
                )
        return out

    def row_versions(self, columns: list[str] | None = None) -> np.ndarray:
        """Each row's version: that of the last column (of ``columns``, default all, in column
        order) not null in the row; a row with none is bad input."""
        names = list(self.vectors) if columns is None else columns
        masks = self.valid(names)
        out = np.full(self.n, "", dtype=object)
        for name in names:  # later columns win
            out[masks[name]] = self.vectors[name].version
        missing = np.flatnonzero(out == "")
        if missing.size:
            raise BadInputError(
                f"{self.where}: {', '.join(names)}: row {int(missing[0])} (id "
                f"{str(self.ids()[int(missing[0])])!r}) has no vector in "
                f"{'any of these columns' if len(names) > 1 else 'this column'}"
            )
        return np.asarray(out.tolist(), dtype=np.str_)

    def read(self, column: str, batch_size: int = SCAN_BATCH) -> tuple[np.ndarray, np.ndarray]:
        """A whole vector column: ((n, d) float32 rows, zeros where null; (n,) valid)."""
        col = self.vectors[column]
        x = np.zeros((self.n, col.dim), dtype=np.float32)
        valid = np.zeros(self.n, dtype=bool)
        for start, batch in self.batches([column], batch_size):
            rows, ok = vectors_of(batch.column(column), col.dim, f"{self.where}: {column}", start)
            x[start : start + len(rows)] = rows
            valid[start : start + len(rows)] = ok
        return x, valid

    def served_dim(self, columns: list[str] | None = None) -> int:
        """The width every row is served at; columns of several widths cannot make one matrix
        (bad input naming them: read one version's column instead)."""
        names = list(self.vectors) if columns is None else columns
        dims = {self.vectors[c].dim for c in names}
        if len(dims) > 1:
            widths = ", ".join(f"{c} {self.vectors[c].dim}" for c in names)
            raise BadInputError(
                f"{self.where}: {', '.join(names)}: rows of several widths ({widths}) make no "
                "one matrix; name one version"
            )
        return dims.pop()

    def served_batches(
        self, batch_size: int = SCAN_BATCH, columns: list[str] | None = None
    ) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """``(first row, rows (b, d), versions (b,))``: each row from the last column (of
        ``columns``, default all) that is not null in it, batch by batch."""
        names = list(self.vectors) if columns is None else columns
        d = self.served_dim(names)
        for start, batch in self.batches(names, batch_size):
            x = np.zeros((batch.num_rows, d), dtype=np.float32)
            v = np.full(batch.num_rows, "", dtype=object)
            for name in names:
                rows, ok = vectors_of(batch.column(name), d, f"{self.where}: {name}", start)
                x[ok], v[ok] = rows[ok], self.vectors[name].version
            missing = np.flatnonzero(v == "")
            if missing.size:
                row = start + int(missing[0])
                raise BadInputError(
                    f"{self.where}: {', '.join(names)}: row {row} (id {str(self.ids()[row])!r}) has "
                    "no vector in these columns"
                )
            yield start, x, np.asarray(v.tolist(), dtype=np.str_)

    def data_files(self) -> set[str]:
        """The data files (names under ``data/``) the table's current version reads."""
        return {f.path for frag in self.ds.get_fragments() for f in frag.metadata.files}


def open_table(path: str | os.PathLike[str], version: int | None = None) -> GalleryTable:
    """The table at ``path`` (its latest version, or ``version``), checked (module docstring)."""
    return GalleryTable(path, version)


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


__all__ = [
    "LAYOUT",
    "SUFFIX",
    "Fragment",
    "GalleryTable",
    "check_version",
    "is_table",
    "lance_module",
    "open_table",
    "table_name",
]
