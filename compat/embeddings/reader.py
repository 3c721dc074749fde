"""Reading a gallery of any format (:mod:`compat.embeddings.formats`: an ``.npz`` bundle, an
``.npy`` matrix with its ``.meta.npz`` sidecar, a folder of Parquet shards, a LanceDB table read
as its rows served: :meth:`compat.embeddings.table.GalleryTable.served_batches`), in row blocks
or whole.

:class:`GalleryReader` reads the header-level facts first (rows, width, provenance, row
versions; an ``.npz`` archive's shapes from its headers, an ``.npy`` matrix's from its header, a
shard's from its Parquet schema), then rows in blocks of bounded size in row order (what a
streaming backfill needs), skipping blocks where the format allows seeking. :func:`load_gallery`
reads one whole into an :class:`~compat.embeddings.bundle.EmbeddingBundle` (what ``compat score``
and ``compat register`` need; a ``.npy`` matrix stays memory-mapped). A wrong schema, a
truncated file, a null or a NaN is a one-line :class:`~compat.errors.BadInputError` naming the
file and the field (exit 4).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from compat.embeddings.formats import DATASET_META, SHARD_GLOB, format_of, sidecar_of
from compat.errors import BadInputError, NotFoundError
from compat.files import check_regular


@dataclass
class Block:
    """Rows ``start .. start + len(embeddings)`` of a gallery."""

    start: int
    embeddings: np.ndarray  # (b, d) float32
    ids: np.ndarray | None  # (b,) str
    labels: np.ndarray | None  # (b,) int64


class GalleryReader:
    """Header-level facts of a gallery plus block-wise reading of its rows.

    Attributes: ``n``, ``dim``, ``version``, ``fingerprint``, ``meta``, ``row_versions``
    ((n,) strings or None), ``format``. :meth:`blocks` yields :class:`Block` s in row order.
    """

    def __init__(self, path: str | os.PathLike[str], *, labels: bool = True) -> None:
        """``labels=False``: an ``.npz`` without labels is read too (its :attr:`labels` None),
        for a caller that ignores them (``compat adapt --no-labels``)."""
        self.path = Path(path)
        self._want_labels = labels
        self.where = str(self.path)
        self.format = format_of(self.path)
        if not self.path.exists():
            raise NotFoundError(f"{self.path}: file not found")
        if not self.path.is_dir():  # a FIFO, socket or device: exit 4 before a read could block
            check_regular(self.path, "a gallery file or a folder of Parquet shards")
        self.version: str | None = None
        self.fingerprint: str | None = None
        self.meta: dict[str, Any] = {}
        self.row_versions: np.ndarray | None = None
        self._labels: np.ndarray | None = None
        self._ids: np.ndarray | None = None
        getattr(self, f"_open_{self.format}")()

    # ------------------------------------------------------------------ opening
    def _open_npz(self) -> None:
        from compat.embeddings.bundle import load_bundle

        b = load_bundle(self.path, labels=self._want_labels)
        self._bundle = b
        self.n, self.dim = len(b), b.dim
        self.version, self.fingerprint, self.meta = b.version, b.fingerprint, dict(b.meta)
        if b.row_versions is not None:
            self.row_versions = np.asarray(b.row_versions, dtype=np.str_)
        self._labels = None if (b.labels < 0).all() and not self._want_labels else b.labels
        self._ids = None if b.ids is None else np.asarray(b.ids, dtype=np.str_)

    def _open_npy(self) -> None:
        from compat.embeddings.bundle import load_sidecar

        if not self.path.is_file():
            raise BadInputError(f"{self.where}: embeddings: not a file")
        with open(self.path, "rb") as f:
            shape, fortran, dtype = _npy_header(f, self.where, "embeddings")
            self._offset = f.tell()
        if len(shape) != 2 or shape[0] == 0 or shape[1] == 0:
            raise BadInputError(
                f"{self.where}: embeddings: expected a 2-D array (n, d), got {shape}"
            )
        if fortran:
            raise BadInputError(
                f"{self.where}: embeddings: stored in Fortran order; save a C-ordered array "
                "(numpy.ascontiguousarray) so rows can be read in blocks"
            )
        if not (np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.integer)):
            raise BadInputError(f"{self.where}: embeddings: expected real numbers, got {dtype}")
        self.n, self.dim = int(shape[0]), int(shape[1])
        self._dtype = dtype
        need = self._offset + self.n * self.dim * dtype.itemsize
        if self.path.stat().st_size < need:
            raise BadInputError(
                f"{self.where}: embeddings: truncated: the header declares {self.n} x {self.dim} "
                f"{dtype} ({need} bytes) but the file holds {self.path.stat().st_size}"
            )
        side = sidecar_of(self.path)
        if side.is_file():
            s = load_sidecar(side, self.n)
            self.version, self.fingerprint, self.meta = s.version, s.fingerprint, s.meta
            self._labels, self._ids = s.labels, s.ids
            self.row_versions = s.row_versions

    def _open_parquet(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.path.is_file():
            shards = [self.path]
        else:
            shards = sorted(self.path.glob(SHARD_GLOB))
            if not shards:
                raise BadInputError(f"{self.where}: shards: no *.parquet file in the folder")
        self.shards = shards
        self.n, dim, has = 0, None, None
        self._rows: list[int] = []
        for shard in shards:
            try:
                pf = pq.ParquetFile(shard)
            except (OSError, pa.ArrowException) as err:
                raise BadInputError(
                    f"{shard}: not a readable Parquet file ({_one_line(err)})"
                ) from None
            d, cols = _check_schema(pf.schema_arrow, str(shard))
            if dim is not None and d != dim:
                raise BadInputError(f"{shard}: embedding: {d} dims, but {shards[0]} has {dim}")
            if has is not None and cols != has:
                raise BadInputError(
                    f"{shard}: columns: {sorted(cols)}, but {shards[0]} has {sorted(has)}"
                )
            dim, has = d, cols
            self._rows.append(pf.metadata.num_rows)
            self.n += pf.metadata.num_rows
        if self.n == 0:
            raise BadInputError(f"{self.where}: embedding: the shards hold no rows")
        self.dim = int(dim or 0)
        self._columns = has or set()
        meta_file = self.path / DATASET_META if self.path.is_dir() else None
        if meta_file is not None and meta_file.is_file():
            self._read_dataset_meta(meta_file)
        if "row_version" in self._columns:
            col = self._column("row_version")
            if col.null_count:
                raise BadInputError(f"{self.where}: row_version: {col.null_count} null values")
            self.row_versions = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.str_)

    def _open_lance(self) -> None:
        from compat.embeddings.table import open_table

        t = open_table(self.path)
        self._table = t
        self.n, self.dim = t.n, t.served_dim()
        self.fingerprint, self.meta = t.fingerprint, dict(t.meta)
        versions = t.row_versions()
        distinct = np.unique(versions)
        self.version = str(distinct[0]) if len(distinct) == 1 else None
        self.row_versions = None if self.version is not None else versions
        self._ids, self._labels = t.ids(), t.labels()

    def _read_dataset_meta(self, meta_file: Path) -> None:
        try:
            raw = json.loads(meta_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise BadInputError(f"{meta_file}: not a JSON object ({_one_line(err)})") from None
        if not isinstance(raw, dict):
            raise BadInputError(f"{meta_file}: not a JSON object")
        for key in raw:
            if key not in ("version", "fingerprint", "meta"):
                raise BadInputError(
                    f"{meta_file}: {key}: unknown key (known: version, fingerprint, meta)"
                )
        for key in ("version", "fingerprint"):
            if raw.get(key) is not None and not isinstance(raw[key], str):
                raise BadInputError(f"{meta_file}: {key}: expected a string")
        if not isinstance(raw.get("meta", {}), dict):
            raise BadInputError(f"{meta_file}: meta: expected a JSON object")
        self.version, self.fingerprint = raw.get("version"), raw.get("fingerprint")
        self.meta = dict(raw.get("meta", {}))

    def _column(self, name: str) -> Any:
        import pyarrow as pa
        import pyarrow.parquet as pq

        chunks = []
        for shard in self.shards:
            try:
                chunks.append(pq.read_table(shard, columns=[name]).column(name).combine_chunks())
            except (OSError, pa.ArrowException) as err:
                raise _unreadable(shard, [name], err) from None
        return pa.chunked_array(chunks).combine_chunks()

    # ------------------------------------------------------------------ reading
    @property
    def labels(self) -> np.ndarray | None:
        """(n,) int64 labels, or None when the gallery has none (read on first use)."""
        if self._labels is None and self.format == "parquet" and "label" in self._columns:
            col = self._column("label")
            if col.null_count:
                raise BadInputError(f"{self.where}: label: {col.null_count} null values")
            self._labels = col.to_numpy().astype(np.int64)
        return self._labels

    @property
    def ids(self) -> np.ndarray | None:
        """(n,) string ids, or None when the gallery has none (read on first use)."""
        if self._ids is None and self.format == "parquet":
            col = self._column("id")
            if col.null_count:
                raise BadInputError(f"{self.where}: id: {col.null_count} null values")
            self._ids = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.str_)
        return self._ids

    def files(self) -> list[Path]:
        """Every file whose bytes make up the gallery (for its digest)."""
        if self.format == "lance":  # the data files its current version reads
            return [self.path / "data" / name for name in sorted(self._table.data_files())]
        if self.format == "parquet":
            extra = [self.path / DATASET_META] if self.path.is_dir() else []
            return [*self.shards, *(p for p in extra if p.is_file())]
        files = [self.path]
        if self.format == "npy" and sidecar_of(self.path).is_file():
            files.append(sidecar_of(self.path))
        return files

    def sha256(self) -> str:
        """One digest over the gallery's files (their names and bytes)."""
        from compat.io import sha256_file

        if self.format not in ("parquet", "lance") and len(self.files()) == 1:
            return sha256_file(self.path)
        h = hashlib.sha256()
        for f in self.files():
            h.update(f.name.encode() + b"\0" + sha256_file(f).encode())
        return h.hexdigest()

    def memmap(self) -> np.ndarray:
        """The whole (n, d) matrix: a read-only memory map for ``.npy``, else read into memory."""
        if self.format == "npy" and self._dtype == np.float32:
            return np.load(self.path, mmap_mode="r")
        if self.format == "npz":
            return self._bundle.embeddings
        out = np.empty((self.n, self.dim), dtype=np.float32)
        for b in self.blocks(65536, with_columns=False):
            out[b.start : b.start + len(b.embeddings)] = b.embeddings
        return out

    def blocks(
        self, size: int, *, skip: set[int] | frozenset[int] = frozenset(), with_columns: bool = True
    ) -> Iterator[Block]:
        """Blocks of ``size`` rows in row order (block ``b`` holds rows ``b*size ..``); blocks
        in ``skip`` are not read where the format allows seeking (they are not yielded)."""
        if self.format == "parquet":
            yield from self._parquet_blocks(size, skip, with_columns)
            return
        if self.format == "lance":
            yield from self._lance_blocks(size, skip, with_columns)
            return
        for b, start in enumerate(range(0, self.n, size)):
            if b in skip:
                continue
            stop = min(start + size, self.n)
            if self.format == "npz":
                emb = self._bundle.embeddings[start:stop]
            else:
                emb = self._read_npy(start, stop)
            ids = self._ids[start:stop] if self._ids is not None and with_columns else None
            labels = self._labels[start:stop] if self._labels is not None and with_columns else None
            yield Block(start, emb, ids, labels)

    def _lance_blocks(self, size: int, skip: Any, with_columns: bool) -> Iterator[Block]:
        """The served rows in blocks of exactly ``size`` (a table's batches end with its
        fragments)."""
        pending: list[np.ndarray] = []
        have, b = 0, 0
        for _, emb, _ in self._table.served_batches(size):
            pending.append(emb)
            have += len(emb)
            while have >= size or (have and have + b * size == self.n):
                rows = np.concatenate(pending) if len(pending) > 1 else pending[0]
                head, rest = rows[:size], rows[size:]
                pending, have = ([rest] if len(rest) else []), len(rest)
                if b not in skip:
                    start, stop = b * size, b * size + len(head)
                    ids = self._ids[start:stop] if with_columns and self._ids is not None else None
                    lab = (
                        self._labels[start:stop]
                        if with_columns and self._labels is not None
                        else None
                    )
                    yield Block(start, head, ids, lab)
                b += 1

    def _read_npy(self, start: int, stop: int) -> np.ndarray:
        with open(self.path, "rb") as f:
            f.seek(self._offset + start * self.dim * self._dtype.itemsize)
            x = np.fromfile(f, dtype=self._dtype, count=(stop - start) * self.dim)
        x = x.reshape(stop - start, self.dim)
        if x.dtype != np.float32:
            with np.errstate(over="ignore"):
                x = x.astype(np.float32)
        return _finite(x, self.where, start)

    def _parquet_blocks(self, size: int, skip: Any, with_columns: bool) -> Iterator[Block]:
        import pyarrow as pa

        cols = ["embedding"]
        if with_columns:
            cols += ["id"] + (["label"] if "label" in self._columns else [])
        pending: list[Any] = []
        have, start, b = 0, 0, 0

        def emit(table: Any) -> Block | None:
            nonlocal start, b
            block_start, block_no = start, b
            start += table.num_rows
            b += 1
            if block_no in skip:
                return None
            return self._to_block(table, block_start, with_columns)

        for shard in self.shards:
            for batch in _shard_batches(shard, size, cols):
                if not pending and batch.num_rows == size:  # the usual case: no copy
                    out = emit(pa.Table.from_batches([batch]))
                    if out is not None:
                        yield out
                    continue
                pending.append(pa.Table.from_batches([batch]))
                have += batch.num_rows
                while have >= size:
                    table = pa.concat_tables(pending).combine_chunks()
                    head, rest = table.slice(0, size), table.slice(size)
                    pending, have = ([rest] if rest.num_rows else []), rest.num_rows
                    out = emit(head)
                    if out is not None:
                        yield out
        if have:
            out = emit(pa.concat_tables(pending).combine_chunks())
            if out is not None:
                yield out

    def _to_block(self, table: Any, start: int, with_columns: bool) -> Block:
        col = table.column("embedding").combine_chunks()
        if col.null_count:
            raise BadInputError(f"{self.where}: embedding: null rows (first near row {start})")
        flat = col.flatten().to_numpy(zero_copy_only=False)
        if len(flat) != table.num_rows * self.dim:
            raise BadInputError(f"{self.where}: embedding: null values inside rows near {start}")
        emb = _finite(
            np.ascontiguousarray(flat, dtype=np.float32).reshape(-1, self.dim), self.where, start
        )
        ids = labels = None
        if with_columns:
            idc = table.column("id").combine_chunks()
            if idc.null_count:
                raise BadInputError(f"{self.where}: id: null values near row {start}")
            ids = np.asarray(idc.to_numpy(zero_copy_only=False), dtype=np.str_)
            if "label" in self._columns:
                lab = table.column("label").combine_chunks()
                if lab.null_count:
                    raise BadInputError(f"{self.where}: label: null values near row {start}")
                labels = lab.to_numpy().astype(np.int64)
        return Block(start, emb, ids, labels)


def _shard_batches(shard: Path, size: int, cols: list[str]) -> Iterator[Any]:
    """The record batches of one shard; what Arrow cannot decode (a null fixed-size list row,
    a damaged page) is a one-line error naming the shard and the column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        # No pre-buffering: whole column chunks held ahead of decoding would double memory.
        pf = pq.ParquetFile(shard, pre_buffer=False, buffer_size=1 << 20)
        yield from pf.iter_batches(batch_size=size, columns=cols, use_threads=False)
    except (OSError, pa.ArrowException) as err:
        raise _unreadable(shard, cols, err) from None


def _unreadable(shard: Path, cols: list[str], err: BaseException) -> BadInputError:
    """The error for a shard Arrow failed to decode, naming the first column that fails alone."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    column = cols[0]
    if len(cols) > 1:
        for name in cols:
            try:
                pf = pq.ParquetFile(shard, pre_buffer=False, buffer_size=1 << 20)
                for _ in pf.iter_batches(batch_size=65536, columns=[name], use_threads=False):
                    pass
            except (OSError, pa.ArrowException):
                column = name
                break
    hint = "; null rows?" if column == "embedding" else ""
    return BadInputError(f"{shard}: {column}: cannot be read ({_one_line(err)}{hint})")


def _finite(x: np.ndarray, where: str, start: int) -> np.ndarray:
    ok = np.isfinite(x)
    if not ok.all():
        row = int(np.argwhere(~ok)[0, 0]) + start
        raise BadInputError(f"{where}: embeddings: NaN or inf (first in row {row})")
    return x


def _check_schema(schema: Any, where: str) -> tuple[int, set[str]]:
    """(dim, columns present) of a shard; a wrong schema names the shard and the column."""
    import pyarrow as pa

    names = set(schema.names)
    for required in ("id", "embedding"):
        if required not in names:
            raise BadInputError(
                f"{where}: {required}: missing column (columns present: {', '.join(schema.names)})"
            )
    emb = schema.field("embedding").type
    if not pa.types.is_fixed_size_list(emb) or emb.value_type != pa.float32():
        raise BadInputError(f"{where}: embedding: expected fixed_size_list<float32>[d], got {emb}")
    if emb.list_size == 0:
        raise BadInputError(f"{where}: embedding: zero-width rows")
    if not (
        pa.types.is_string(schema.field("id").type)
        or pa.types.is_large_string(schema.field("id").type)
    ):
        raise BadInputError(f"{where}: id: expected strings, got {schema.field('id').type}")
    if "label" in names and not pa.types.is_integer(schema.field("label").type):
        raise BadInputError(f"{where}: label: expected integers, got {schema.field('label').type}")
    if "row_version" in names:
        t = schema.field("row_version").type
        if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_dictionary(t)):
            raise BadInputError(f"{where}: row_version: expected strings, got {t}")
    return int(emb.list_size), names & {"id", "embedding", "label", "row_version"}


def _npy_header(f: Any, where: str, field: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran_order, dtype) from a ``.npy`` header, without reading the data."""
    from numpy.lib import format as npformat

    try:
        major, _minor = npformat.read_magic(f)
        if major == 1:
            shape, fortran, dtype = npformat.read_array_header_1_0(f)
        elif major in (2, 3):
            shape, fortran, dtype = npformat.read_array_header_2_0(f)
        else:
            raise ValueError(f"unsupported .npy version {major}")
    except (ValueError, OSError, EOFError) as err:
        raise BadInputError(
            f"{where}: {field}: not a readable .npy header ({_one_line(err)})"
        ) from None
    if dtype.hasobject:
        raise BadInputError(f"{where}: {field}: stored as Python objects (pickled)")
    return tuple(int(s) for s in shape), bool(fortran), dtype


def load_gallery(path: str | os.PathLike[str]) -> Any:
    """A whole gallery of any format as an :class:`~compat.embeddings.bundle.EmbeddingBundle`
    (labels required; a ``.npy`` matrix stays memory-mapped)."""
    from compat.embeddings.bundle import EmbeddingBundle, load_bundle

    if format_of(path) == "npz":
        return load_bundle(path)
    r = GalleryReader(path)
    labels = r.labels
    if labels is None:
        hint = f"a sidecar {sidecar_of(r.path).name}" if r.format == "npy" else "a label column"
        raise BadInputError(f"{r.where}: labels: the gallery has no labels (add {hint})")
    if r.format == "npy":
        for _ in r.blocks(65536, with_columns=False):  # NaN/inf check without holding a copy
            pass
    ids = r.ids
    return EmbeddingBundle(
        embeddings=r.memmap(),
        labels=labels,
        ids=None if ids is None else ids.tolist(),
        version=r.version,
        fingerprint=r.fingerprint,
        row_versions=None if r.row_versions is None else r.row_versions.tolist(),
        meta=r.meta,
    )


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


__all__ = ["Block", "GalleryReader", "load_gallery"]
