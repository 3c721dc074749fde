"""Embeddings as a unit of exchange: one ``.npz`` holding the matrix, its labels and provenance.

An :class:`EmbeddingBundle` is what ``compat score`` reads, what the embedding cache stores and
what a backfilled gallery is written as. The file is a plain ``np.savez`` archive that any NumPy
user can open, and it is always read with ``allow_pickle=False``: a bundle can never run code.

Keys in the archive:

========================  =================================================================
``embeddings``            (n, d) real numbers; stored as float32
``labels``                (n,) integers (an integral float array is accepted and converted)
``ids`` (optional)        (n,) item ids as unicode strings
``version`` (optional)    0-d string: the model version that made the embeddings
``fingerprint`` (opt.)    0-d string: fingerprint of the data that was embedded
``row_versions`` (opt.)   (n,) strings: per-row version for a partially backfilled gallery
``meta`` (optional)       0-d string: a JSON object (e.g. the embedding-cache key)
========================  =================================================================

Every validation failure is a :class:`~compat.errors.BadInputError` whose message reads
``<file>: <field>: <reason>``, so the CLI can print it on one line with exit code 4.
"""

from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from compat.errors import BadInputError, NotFoundError
from compat.io import atomic_path

REQUIRED_KEYS = ("embeddings", "labels")
OPTIONAL_KEYS = ("ids", "version", "fingerprint", "row_versions", "meta")


@dataclass
class EmbeddingBundle:
    """Embeddings of ``n`` items plus what is needed to trust and evaluate them."""

    embeddings: np.ndarray
    labels: np.ndarray
    ids: list[str] | None = None
    version: str | None = None
    fingerprint: str | None = None
    row_versions: list[str] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.embeddings = np.ascontiguousarray(self.embeddings, dtype=np.float32)
        self.labels = np.ascontiguousarray(self.labels, dtype=np.int64)
        n = self.embeddings.shape[0] if self.embeddings.ndim >= 1 else 0
        if self.embeddings.ndim != 2:
            raise ValueError(f"embeddings must be 2-D (n, d), got shape {self.embeddings.shape}")
        if self.labels.shape != (n,):
            raise ValueError(f"labels must have shape ({n},), got {self.labels.shape}")
        for name in ("ids", "row_versions"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise ValueError(f"{name} must have {n} entries, got {len(value)}")

    def __len__(self) -> int:
        return int(self.embeddings.shape[0])

    @property
    def dim(self) -> int:
        return int(self.embeddings.shape[1])


def save_bundle(path: str | os.PathLike[str], bundle: EmbeddingBundle) -> Path:
    """Write ``bundle`` to ``path`` atomically (a reader never sees half a file)."""
    arrays: dict[str, np.ndarray] = {
        "embeddings": np.ascontiguousarray(bundle.embeddings, dtype=np.float32),
        "labels": np.ascontiguousarray(bundle.labels, dtype=np.int64),
    }
    if bundle.ids is not None:
        arrays["ids"] = np.asarray([str(i) for i in bundle.ids], dtype=np.str_)
    if bundle.version is not None:
        arrays["version"] = np.asarray(bundle.version, dtype=np.str_)
    if bundle.fingerprint is not None:
        arrays["fingerprint"] = np.asarray(bundle.fingerprint, dtype=np.str_)
    if bundle.row_versions is not None:
        arrays["row_versions"] = np.asarray([str(v) for v in bundle.row_versions], dtype=np.str_)
    if bundle.meta:
        arrays["meta"] = np.asarray(json.dumps(bundle.meta, sort_keys=True), dtype=np.str_)
    target = Path(path)
    # Write through a file object: np.savez appends ".npz" to bare paths without that suffix.
    with atomic_path(target) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)
    return target


def load_bundle(path: str | os.PathLike[str], *, name: str | None = None) -> EmbeddingBundle:
    """Read and validate a bundle; ``name`` replaces the path in error messages if given."""
    p = Path(path)
    where = name or str(p)
    if not p.is_file():
        raise NotFoundError(f"{where}: file not found")
    with open(p, "rb") as f:
        magic = f.read(4)
    if magic != b"PK\x03\x04" and magic != b"PK\x05\x06":
        raise BadInputError(f"{where}: archive: not an .npz archive (as written by numpy.savez)")
    raw: dict[str, np.ndarray] = {}
    try:
        with np.load(p, allow_pickle=False) as npz:
            for key in npz.files:
                try:
                    raw[key] = npz[key]
                except ValueError:
                    # NumPy refuses object arrays when allow_pickle is False; say which key.
                    raise BadInputError(
                        f"{where}: {key}: stored as Python objects (pickled); "
                        "save plain numeric or string arrays"
                    ) from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        raise BadInputError(
            f"{where}: archive: not a readable .npz file ({_one_line(err)})"
        ) from None
    return _validate(raw, where)


def _validate(raw: dict[str, np.ndarray], where: str) -> EmbeddingBundle:
    for key in REQUIRED_KEYS:
        if key not in raw:
            present = ", ".join(sorted(raw)) or "none"
            raise BadInputError(f"{where}: {key}: missing key (keys present: {present})")
    embeddings = _embeddings(raw["embeddings"], where)
    n = embeddings.shape[0]
    labels = _labels(raw["labels"], where)
    if labels.shape[0] != n:
        raise BadInputError(f"{where}: labels: {labels.shape[0]} labels for {n} embedding rows")
    ids = _strings(raw, "ids", where, n)
    row_versions = _strings(raw, "row_versions", where, n)
    meta: dict[str, Any] = {}
    if "meta" in raw:
        try:
            meta = json.loads(_scalar_string(raw["meta"], "meta", where))
        except json.JSONDecodeError as err:
            raise BadInputError(f"{where}: meta: not a JSON object ({err.msg})") from None
        if not isinstance(meta, dict):
            raise BadInputError(f"{where}: meta: not a JSON object")
    version = _scalar_string(raw["version"], "version", where) if "version" in raw else None
    fp = _scalar_string(raw["fingerprint"], "fingerprint", where) if "fingerprint" in raw else None
    return EmbeddingBundle(
        embeddings=embeddings,
        labels=labels,
        ids=ids,
        version=version,
        fingerprint=fp,
        row_versions=row_versions,
        meta=meta,
    )


def _embeddings(arr: np.ndarray, where: str) -> np.ndarray:
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise BadInputError(f"{where}: embeddings: expected real numbers, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise BadInputError(
            f"{where}: embeddings: expected a 2-D array (n, d), got shape {tuple(arr.shape)}"
        )
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise BadInputError(f"{where}: embeddings: empty array of shape {tuple(arr.shape)}")
    # Convert first: a finite float64 beyond float32's range becomes inf and must be caught too.
    with np.errstate(over="ignore"):
        out = np.ascontiguousarray(arr, dtype=np.float32)
    finite = np.isfinite(out)
    if not finite.all():
        row = int(np.argwhere(~finite)[0, 0])
        raise BadInputError(f"{where}: embeddings: NaN or inf (first in row {row})")
    return out


def _labels(arr: np.ndarray, where: str) -> np.ndarray:
    if arr.ndim != 1:
        raise BadInputError(f"{where}: labels: expected a 1-D array, got shape {tuple(arr.shape)}")
    if arr.shape[0] == 0:
        raise BadInputError(f"{where}: labels: empty array")
    if arr.dtype == np.bool_:
        raise BadInputError(f"{where}: labels: expected integers, got booleans")
    if np.issubdtype(arr.dtype, np.integer):
        if arr.dtype == np.uint64 and (arr > np.iinfo(np.int64).max).any():
            raise BadInputError(f"{where}: labels: values exceed the int64 range")
        return arr.astype(np.int64)
    if np.issubdtype(arr.dtype, np.floating):
        if not np.isfinite(arr).all():
            raise BadInputError(f"{where}: labels: NaN or inf")
        bad = arr != np.round(arr)
        if bad.any():
            i = int(np.argmax(bad))
            raise BadInputError(f"{where}: labels: not an integer ({arr[i]!r} at row {i})")
        if (np.abs(arr) > 2**53).any():
            raise BadInputError(f"{where}: labels: values too large to be exact integers")
        return arr.astype(np.int64)
    raise BadInputError(f"{where}: labels: expected integers, got dtype {arr.dtype}")


def _strings(raw: dict[str, np.ndarray], key: str, where: str, n: int) -> list[str] | None:
    if key not in raw:
        return None
    arr = raw[key]
    if arr.ndim != 1 or arr.shape[0] != n or arr.dtype.kind not in "US":
        raise BadInputError(f"{where}: {key}: expected {n} strings, got {arr.dtype} {arr.shape}")
    return [str(s) for s in arr.tolist()]


def _scalar_string(arr: np.ndarray, key: str, where: str) -> str:
    if arr.ndim != 0 or arr.dtype.kind not in "US":
        raise BadInputError(f"{where}: {key}: expected a string, got {arr.dtype} {arr.shape}")
    return str(arr.item())


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())
