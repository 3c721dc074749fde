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

Only these members are ever read, each after its ``.npy`` header was checked
(:func:`check_archive`: shape, dtype, size against the member, decompression ratio, free memory,
compression method and encryption); any other member of the archive is never decompressed.

Every validation failure is a :class:`~compat.errors.BadInputError` whose message reads
``<file>: <field>: <reason>``, so the CLI can print it on one line with exit code 4.
"""

from __future__ import annotations

import json
import lzma
import os
import zipfile
import zlib
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
    with atomic_path(target, size=archive_size(arrays)) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)
    return target


def archive_size(arrays: dict[str, np.ndarray]) -> int:
    """The bytes ``np.savez`` writes for ``arrays`` (stored, not compressed): data, ``.npy``
    headers and zip entries."""
    return sum(int(a.nbytes) + 256 + 2 * len(k) for k, a in arrays.items()) + 22


def load_bundle(
    path: str | os.PathLike[str], *, name: str | None = None, labels: bool = True
) -> EmbeddingBundle:
    """Read and validate a bundle; ``name`` replaces the path in error messages if given.
    ``labels=False``: a bundle without ``labels`` is read too (its labels are then all -1, for
    a caller that ignores them: ``compat adapt --no-labels``)."""
    from compat.files import open_regular

    p = Path(path)
    where = name or str(p)
    if not p.exists():
        raise NotFoundError(f"{where}: file not found")
    # a FIFO, device or folder named as a bundle is bad input (exit 4), refused before a read
    # could block (compat.files)
    with open_regular(p, "an .npz bundle") as f:
        magic = f.read(4)
    if magic != b"PK\x03\x04" and magic != b"PK\x05\x06":
        raise BadInputError(f"{where}: archive: not an .npz archive (as written by numpy.savez)")
    check_archive(p, where, required=REQUIRED_KEYS if labels else ("embeddings",))
    raw = read_members(p, where, REQUIRED_KEYS + OPTIONAL_KEYS)
    if not labels and "labels" not in raw and "embeddings" in raw:
        raw["labels"] = np.full(len(raw["embeddings"]), -1, dtype=np.int64)
    return _validate(raw, where)


# What reading an archive member can raise besides a clean ValueError: a damaged deflate stream
# (zlib.error), LZMA data (LZMAError), an encrypted member (RuntimeError), a compression method
# zipfile lacks (NotImplementedError), a CRC mismatch (BadZipFile).
_READ_ERRORS = (
    OSError,
    ValueError,
    EOFError,
    zipfile.BadZipFile,
    zlib.error,
    lzma.LZMAError,
    RuntimeError,
    NotImplementedError,
)
# The compression methods read: numpy.savez's (stored), numpy.savez_compressed's (deflate) and
# the two others Python's zipfile decodes. Anything else (deflate64, PPMd, ...) is refused by name.
_METHODS = {
    zipfile.ZIP_STORED: "stored",
    zipfile.ZIP_DEFLATED: "deflate",
    zipfile.ZIP_BZIP2: "bzip2",
    zipfile.ZIP_LZMA: "LZMA",
}
_METHOD_NAMES = {9: "deflate64", 98: "PPMd", 93: "Zstandard", 95: "XZ", 97: "WavPack"}


def read_members(path: Path, where: str, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The arrays of the members ``<key>.npy`` that exist, and no other member: an archive's
    other members are never decompressed. Call :func:`check_archive` first."""
    from numpy.lib import format as npformat

    raw: dict[str, np.ndarray] = {}
    key = "archive"
    try:
        with zipfile.ZipFile(path) as z:
            infos = {info.filename: info for info in z.infolist()}  # the last of a name wins
            for key in keys:
                info = infos.get(f"{key}.npy")
                if info is None:
                    continue
                with z.open(info) as f:
                    try:
                        raw[key] = npformat.read_array(f, allow_pickle=False)
                    except ValueError as err:
                        if "allow_pickle" not in str(err):
                            raise
                        # NumPy refuses object arrays when allow_pickle is False; say which key.
                        raise BadInputError(
                            f"{where}: {key}: stored as Python objects (pickled); "
                            "save plain numeric or string arrays"
                        ) from None
    except _READ_ERRORS as err:
        raise BadInputError(
            f"{where}: {key}: not a readable .npz member ({_one_line(err)})"
        ) from None
    return raw


# An archive member that decompresses past this size must be plausibly compressed: embeddings
# (float noise) compress a little, never 100:1; a member beyond that is a decompression bomb.
BOMB_MIN_BYTES = 64 << 20
BOMB_RATIO = 100


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def check_archive(path: Path, where: str, *, required: tuple[str, ...] = REQUIRED_KEYS) -> None:
    """Shapes, dtypes and sizes from the ``.npy`` headers inside the archive, before anything is
    decompressed: a small file declaring billions of values is refused in milliseconds."""
    from numpy.lib import format as npformat

    shapes: dict[str, tuple[int, ...]] = {}
    key = "archive"
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                name = info.filename.removesuffix(".npy")
                if not info.filename.endswith(".npy") or name not in REQUIRED_KEYS + OPTIONAL_KEYS:
                    continue  # never read: compat decompresses only the members it needs
                key = name
                if info.flag_bits & 0x1:
                    raise BadInputError(
                        f"{where}: {key}: the member is encrypted; save the bundle with "
                        "numpy.savez (no password)"
                    )
                if info.compress_type not in _METHODS:
                    method = _METHOD_NAMES.get(info.compress_type, "an unknown method")
                    raise BadInputError(
                        f"{where}: {key}: compressed with {method} (zip method "
                        f"{info.compress_type}), which compat cannot decompress; save it with "
                        "numpy.savez or numpy.savez_compressed"
                    )
                with z.open(info) as f:
                    major, _ = npformat.read_magic(f)
                    read = (
                        npformat.read_array_header_1_0
                        if major == 1
                        else npformat.read_array_header_2_0
                    )
                    shape, _fortran, dtype = read(f)
                    header = f.tell()
                if dtype.hasobject:
                    raise BadInputError(
                        f"{where}: {key}: stored as Python objects (pickled); "
                        "save plain numeric or string arrays"
                    )
                nbytes = int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
                if info.file_size < header + nbytes:
                    raise BadInputError(
                        f"{where}: {key}: header declares shape {tuple(shape)} ({nbytes} bytes) "
                        f"but the member holds {info.file_size - header}"
                    )
                if nbytes > BOMB_MIN_BYTES and nbytes > BOMB_RATIO * max(1, info.compress_size):
                    raise BadInputError(
                        f"{where}: {key}: declares shape {tuple(shape)} ({nbytes / 2**30:.1f} GiB) "
                        f"compressed into {info.compress_size / 2**20:.1f} MiB "
                        f"(over {BOMB_RATIO}:1): not plausible data; refused before decompressing"
                    )
                avail = _mem_available()
                if avail is not None and nbytes > avail:
                    raise BadInputError(
                        f"{where}: {key}: shape {tuple(shape)} needs {nbytes / 2**30:.1f} GiB, "
                        f"more than the {avail / 2**30:.1f} GiB of free memory; store large "
                        "galleries as .npy or Parquet shards (read in blocks)"
                    )
                shapes[key] = tuple(int(x) for x in shape)
            key = "archive"
    except _READ_ERRORS as err:
        what = "not a readable .npz file" if key == "archive" else "not a readable .npz member"
        raise BadInputError(f"{where}: {key}: {what} ({_one_line(err)})") from None
    for key in required:
        if key not in shapes:
            present = ", ".join(sorted(shapes)) or "none"
            raise BadInputError(f"{where}: {key}: missing key (keys present: {present})")
    emb = shapes.get("embeddings")
    if emb is not None and len(emb) != 2:
        raise BadInputError(f"{where}: embeddings: expected a 2-D array (n, d), got shape {emb}")


@dataclass
class Sidecar:
    """What a ``.npy`` gallery keeps beside its matrix (see :mod:`compat.embeddings.formats`)."""

    labels: np.ndarray | None
    ids: np.ndarray | None
    row_versions: np.ndarray | None
    version: str | None
    fingerprint: str | None
    meta: dict[str, Any]


def load_sidecar(path: str | os.PathLike[str], n: int) -> Sidecar:
    """Read a ``.meta.npz`` sidecar of a gallery of ``n`` rows (every key optional)."""
    p = Path(path)
    where = str(p)
    check_archive(p, where, required=())
    raw = read_members(p, where, (*OPTIONAL_KEYS, "labels"))
    labels = _labels(raw["labels"], where) if "labels" in raw else None
    if labels is not None and labels.shape[0] != n:
        raise BadInputError(f"{where}: labels: {labels.shape[0]} labels for {n} embedding rows")
    ids = _strings(raw, "ids", where, n)
    rv = _strings(raw, "row_versions", where, n)
    meta = _meta(raw, where)
    return Sidecar(
        labels=labels,
        ids=None if ids is None else np.asarray(ids, dtype=np.str_),
        row_versions=None if rv is None else np.asarray(rv, dtype=np.str_),
        version=_scalar_string(raw["version"], "version", where) if "version" in raw else None,
        fingerprint=(
            _scalar_string(raw["fingerprint"], "fingerprint", where)
            if "fingerprint" in raw
            else None
        ),
        meta=meta,
    )


def save_sidecar(path: str | os.PathLike[str], side: Sidecar) -> None:
    """Write a ``.meta.npz`` sidecar atomically."""
    arrays: dict[str, np.ndarray] = {}
    if side.labels is not None:
        arrays["labels"] = np.ascontiguousarray(side.labels, dtype=np.int64)
    if side.ids is not None:
        arrays["ids"] = np.asarray(side.ids, dtype=np.str_)
    if side.row_versions is not None:
        arrays["row_versions"] = np.asarray(side.row_versions, dtype=np.str_)
    if side.version is not None:
        arrays["version"] = np.asarray(side.version, dtype=np.str_)
    if side.fingerprint is not None:
        arrays["fingerprint"] = np.asarray(side.fingerprint, dtype=np.str_)
    if side.meta:
        arrays["meta"] = np.asarray(json.dumps(side.meta, sort_keys=True), dtype=np.str_)
    with atomic_path(Path(path), size=archive_size(arrays)) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)


def read_bundle_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``meta`` object of a bundle or sidecar, reading no other member ({} without one)."""
    p = Path(path)
    where = str(p)
    check_archive(p, where, required=())
    return _meta(read_members(p, where, ("meta",)), where)


def _meta(raw: dict[str, np.ndarray], where: str) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if "meta" in raw:
        try:
            meta = json.loads(_scalar_string(raw["meta"], "meta", where))
        except json.JSONDecodeError as err:
            raise BadInputError(f"{where}: meta: not a JSON object ({err.msg})") from None
        if not isinstance(meta, dict):
            raise BadInputError(f"{where}: meta: not a JSON object")
    return meta


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
    meta = _meta(raw, where)
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
