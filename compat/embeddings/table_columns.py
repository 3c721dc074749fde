"""A table gallery's vector columns (:mod:`compat.embeddings.table`): one ``vec_<version>``
column per version, a fixed-size list of float32, null where that version has no row yet.

* **Naming**: :func:`column_for` (``v2`` -> ``vec_v2``; a version's dots become underscores,
  ``v1.2`` -> ``vec_v1_2``: Lance column names cannot hold a dot).
* **Metadata**: :class:`VectorColumn`, stored as the field's metadata (key ``compat``): the
  ``version``, ``dim``, the version's model ``weights_sha256`` (when known) and ``sources``: how
  its rows came to be, each once (``embedded`` by the version's weights, ``imported`` from a
  file, or ``map``: the map that moved rows of another column into it, with its kind, folder and
  weights sha256, from :meth:`compat.maps.space.SpaceMap.provenance`). A ``vec_*`` field without
  that metadata (a table made without compat) is read as the version its name gives
  (:func:`parse_vector_field`); a field of another type, a name that is no version, metadata
  that disagrees with its field (version, width) is bad input naming the table and the column.
* **Values**: :func:`vectors_of` (Arrow -> numpy rows and a valid mask; null values inside a
  row, NaN or inf are bad input naming the row) and :func:`arrow_vectors` (numpy -> Arrow).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from compat.errors import BadInputError

VEC_PREFIX = "vec_"
META_KEY = "compat"


def column_for(version: str) -> str:
    """The vector column of ``version`` (``v2`` -> ``vec_v2``; ``v1.2`` -> ``vec_v1_2``)."""
    return VEC_PREFIX + version.replace(".", "_")


def fsl_type(dim: int) -> Any:
    """The Arrow type of a ``dim``-wide vector column."""
    import pyarrow as pa

    return pa.list_(pa.float32(), dim)


@dataclass
class VectorColumn:
    """One ``vec_<version>`` column: its name, version, width and field metadata."""

    name: str
    version: str
    dim: int
    weights_sha256: str | None = None
    sources: list[dict[str, Any]] = field(default_factory=list)

    def metadata(self) -> dict[str, str]:
        """Its field metadata, as Lance stores it."""
        body = {
            "version": self.version,
            "dim": self.dim,
            "weights_sha256": self.weights_sha256,
            "sources": self.sources,
        }
        return {META_KEY: json.dumps(body, sort_keys=True)}


def vectors_of(col: Any, dim: int, where: str, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A fixed-size-list Arrow array as ((b, dim) float32 rows, (b,) valid); null rows are
    zeros. A null value inside a row, NaN or inf is bad input naming the row."""
    import pyarrow as pa

    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    b = len(col)
    valid = (
        np.ones(b, dtype=bool)
        if col.null_count == 0
        else np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    )
    values = col.values.slice(col.offset * dim, b * dim)
    x = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float32).reshape(b, dim)
    if values.null_count:  # null rows may hold null values; a row that is not null may not
        inner = ~np.asarray(values.is_valid().to_numpy(zero_copy_only=False)).reshape(b, dim)
        if (inner & valid[:, None]).any():
            row = int(np.flatnonzero((inner & valid[:, None]).any(axis=1))[0]) + start
            raise BadInputError(f"{where}: null values inside row {row}")
    x = np.where(valid[:, None], x, np.float32(0)) if not valid.all() else x
    ok = np.isfinite(x)
    if not ok.all():
        row = int(np.argwhere(~ok)[0, 0]) + start
        raise BadInputError(f"{where}: NaN or inf (first in row {row})")
    return np.ascontiguousarray(x), valid


def arrow_vectors(x: np.ndarray, valid: np.ndarray | None = None) -> Any:
    """(b, d) float32 rows as a fixed-size-list array, null where ``valid`` is False."""
    import pyarrow as pa

    x = np.ascontiguousarray(x, dtype=np.float32)
    values = pa.array(x.reshape(-1))
    if valid is None or valid.all():
        return pa.FixedSizeListArray.from_arrays(values, x.shape[1])
    return pa.FixedSizeListArray.from_arrays(values, x.shape[1], mask=pa.array(~valid))


def parse_vector_field(f: Any, where: str) -> VectorColumn:
    """A ``vec_*`` field as a :class:`VectorColumn`, its type, name and metadata checked."""
    import pyarrow as pa

    from compat.names import name_problem

    t = f.type
    if not pa.types.is_fixed_size_list(t) or t.value_type != pa.float32():
        raise BadInputError(f"{where}: expected fixed_size_list<float32>[d], got {t}")
    if t.list_size == 0:
        raise BadInputError(f"{where}: zero-width rows")
    raw = (f.metadata or {}).get(META_KEY.encode())
    if raw is None:
        version = f.name[len(VEC_PREFIX) :]
        problem = name_problem(version)
        if problem:
            raise BadInputError(f"{where}: not named for a version ({problem})")
        return VectorColumn(f.name, version, int(t.list_size))
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise BadInputError(f"{where}: metadata {META_KEY}: not JSON ({_one_line(err)})") from None
    if not isinstance(body, dict) or not isinstance(body.get("version"), str):
        raise BadInputError(f"{where}: metadata {META_KEY}: no version")
    version = body["version"]
    problem = name_problem(version)
    if problem:
        raise BadInputError(f"{where}: metadata {META_KEY}: version: {problem}")
    if column_for(version) != f.name:
        raise BadInputError(
            f"{where}: metadata {META_KEY}: version {version!r} belongs in column "
            f"{column_for(version)}, not {f.name}"
        )
    dim = body.get("dim", t.list_size)
    if dim != t.list_size:
        raise BadInputError(
            f"{where}: {t.list_size}-dim rows, but its metadata records {dim} (the wrong width)"
        )
    sources = body.get("sources") or []
    if not isinstance(sources, list) or not all(isinstance(s, dict) for s in sources):
        raise BadInputError(f"{where}: metadata {META_KEY}: sources: expected a list of objects")
    sha = body.get("weights_sha256")
    return VectorColumn(f.name, version, int(t.list_size), sha if isinstance(sha, str) else None,
                        sources)  # fmt: skip


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


__all__ = [
    "META_KEY",
    "VEC_PREFIX",
    "VectorColumn",
    "arrow_vectors",
    "column_for",
    "fsl_type",
    "parse_vector_field",
    "vectors_of",
]
