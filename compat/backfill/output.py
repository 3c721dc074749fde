"""A backfill's output (``--out``): whether a run may write it, one run at a time, and how the
finished output is put in place.

* **The input is never modified**: ``out`` (its ``.npy`` sidecar, the work folder and the lock
  file too) must not be, hold or lie inside a file of the input gallery (:func:`check_apart`).
* **Only its own output is replaced**, through compat's one checked-output path
  (:mod:`compat.outputs`): an existing ``out`` is replaced only when a backfill wrote it (its
  ``meta`` records a ``backfill``; a Parquet folder holds nothing but ``_compat.json`` and
  compat's shards) or it is an empty folder (:func:`check_replaceable`). Anything else, or a
  place no file can be written (:func:`check_out`), is a :class:`~compat.errors.UsageError`
  (exit 2) before any work; a read-only file system is exit 5.
* **One writer per output**: a run holds the lock file ``.<out name>.backfill.lock`` beside the
  output (:class:`OutLock`); a second run into the same ``out`` is a
  :class:`~compat.errors.ConflictError` (exit 6) that writes and removes nothing.
* **Room on disk**: a full disk is refused before any work when the free space already falls
  short (:func:`check_room`, a :class:`~compat.errors.StorageError`, exit 5).
* **Nothing half-written**: the output (a file, or a folder of shards swapped into place) is
  assembled from the saved batches (:mod:`compat.backfill.resume`) only when every block is done
  (:func:`write_output`); a swapped-out folder a killed run left is removed (or put back, when
  nothing took its place) by the next run (:func:`remove_stale_swaps`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from compat.backfill.plan import bundle_version
from compat.backfill.resume import STATE, Parts, work_dir_for
from compat.embeddings.lock import WriterLock
from compat.errors import StorageError, UsageError
from compat.io import atomic_path, free_bytes, human_bytes, storage_error
from compat.outputs import check_owned, check_target, remove_stale, replace_folder


def lock_path_for(out: str | os.PathLike[str]) -> Path:
    """The lock file a backfill into ``out`` holds while it runs."""
    p = Path(out)
    return p.parent / f".{p.name}.backfill.lock"


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file (the same path, or a link to it)."""
    if a.resolve() == b.resolve():
        return True
    try:
        return b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def check_out(out: Path, fmt: str) -> None:
    """Refuse an output that cannot be written (under a file, /proc, a folder where a file
    goes; an ``.npy``'s sidecar too) with a one-line usage error, a read-only file system with
    exit 5, before any work (:func:`compat.outputs.check_target`)."""
    from compat.embeddings.formats import sidecar_of

    check_target(out, "folder" if fmt == "parquet" else "file")
    if fmt == "npy":
        check_target(sidecar_of(out), "file")


def check_apart(reader: Any, out: Path, fmt: str) -> None:
    """``out`` (and, for ``.npy``, its sidecar; and the work folder) must not be, hold or lie
    inside a file of the input gallery: the input is never modified."""
    from compat.embeddings.formats import sidecar_of

    inputs = [f.resolve() for f in reader.files()]
    folder = reader.path.resolve() if reader.path.is_dir() else None
    written = [out, work_dir_for(out), lock_path_for(out)]
    if fmt == "npy":
        written.append(sidecar_of(out))
    for path in written:
        r = path.resolve()
        if folder is not None and (r == folder or r.is_relative_to(folder)):
            raise UsageError(
                f"--out {out}: {path} would be inside the input gallery {reader.path}; "
                "the input is never modified"
            )
        for f in inputs:
            if r == f or same_file(f, path):
                raise UsageError(
                    f"--out {out}: {path} is a file of the input gallery; the input is never "
                    "modified"
                )
            if f.is_relative_to(r):
                raise UsageError(
                    f"--out {out}: the folder holds the input gallery ({f.name}); the input "
                    "is never modified"
                )


def check_replaceable(out: Path, fmt: str) -> None:
    """An existing ``out`` may be replaced only if a backfill wrote it (or it is an empty
    folder): compat's one checked-output path (:func:`compat.outputs.check_owned`) with the
    backfill's own test (:func:`compat.embeddings.gallery_out.gallery_owner`); anything else is
    a usage error before any work."""
    from compat.embeddings.formats import sidecar_of
    from compat.embeddings.gallery_out import gallery_owner

    owner = ("compat backfill",)
    if fmt == "npy" and not out.exists():  # a sidecar alone is replaced only if ours
        check_owned(sidecar_of(out), "file", gallery_owner("npz", owner), "--out", "a gallery")
    kind = "folder" if fmt == "parquet" else "file"
    check_owned(out, kind, gallery_owner(fmt, owner), "--out", "a gallery")


def check_room(
    out: Path, work: Path, n: int, width: int, n_batches: int, done: int, fmt: str
) -> None:
    """A full disk is refused before any work when the free space already falls short of the
    batches still to save plus the output assembled from them (exit 5)."""
    rows = n * width * 4
    need = rows * (n_batches - done) // max(n_batches, 1) + (0 if fmt == "parquet" else rows)
    free = free_bytes(work)
    if free is not None and need > free:
        raise StorageError(
            f"{out}: cannot write: no space left on the device (the backfill needs about "
            f"{human_bytes(need)} ({need} bytes) for its batches and the output, "
            f"{human_bytes(free)} free)"
        )


class OutLock(WriterLock):
    """The lock file beside ``out`` (``flock``, :class:`compat.embeddings.lock.WriterLock`),
    held for a whole run and removed after it: a second run into the same ``out`` is refused at
    once (exit 6), writing and removing nothing."""

    def __init__(self, out: Path) -> None:
        self.out = out
        super().__init__(
            lock_path_for(out),
            busy=f"--out {out}: another backfill (pid {{pid}}) is writing it; wait for it to "
            "finish, or choose another --out",
            cannot=f"--out {out}: cannot write beside it",
        )


def remove_stale_swaps(out: Path) -> None:
    """What killed runs left beside ``out`` (:func:`compat.outputs.remove_stale`)."""
    remove_stale(out)


def write_output(
    parts: Parts,
    reader: Any,
    out: Path,
    n_batches: int,
    bs: int,
    versions: np.ndarray,
    meta: dict[str, Any],
) -> None:
    """Assemble the finished blocks into ``out`` (atomically), then drop the work folder."""
    from compat.embeddings.bundle import EmbeddingBundle, Sidecar, save_bundle, save_sidecar
    from compat.embeddings.formats import sidecar_of, write_dataset_meta, write_npy_header

    n, width, work = reader.n, parts.width, parts.work
    version = bundle_version(np.unique(versions).tolist())
    rows = [min(bs, n - b * bs) for b in range(n_batches)]
    try:
        if parts.fmt == "parquet":
            write_dataset_meta(work, version, reader.fingerprint, meta)
            (work / STATE).unlink()
            for checksum in work.glob("batch-*.sha256"):
                checksum.unlink()
            replace_folder(work, out)
            return
        if parts.fmt == "npy":
            # The matrix is written first and renamed last: a failure in either leaves
            # neither (the sidecar is written only once the whole matrix is on disk).
            with atomic_path(out, size=128 + n * width * 4) as tmp:
                with open(tmp, "wb") as f:
                    write_npy_header(f, n, width)
                    for b in range(n_batches):
                        f.write(parts.read(b, rows[b]).data)
                save_sidecar(
                    sidecar_of(out),
                    Sidecar(
                        labels=reader.labels,
                        ids=reader.ids,
                        row_versions=versions,
                        version=version,
                        fingerprint=reader.fingerprint,
                        meta=meta,
                    ),
                )
        else:
            embeddings = np.empty((n, width), dtype=np.float32)
            for b in range(n_batches):
                embeddings[b * bs : b * bs + rows[b]] = parts.read(b, rows[b])
            ids = reader.ids
            save_bundle(
                out,
                EmbeddingBundle(
                    embeddings=embeddings,
                    labels=reader.labels,
                    ids=None if ids is None else ids.tolist(),
                    version=version,
                    fingerprint=reader.fingerprint,
                    row_versions=versions.tolist(),
                    meta=meta,
                ),
            )
    except OSError as err:
        full = storage_error(err, out)
        if full is not None:
            raise full from None
        raise UsageError(f"--out {out}: cannot write ({_one_line(err)})") from None
    shutil.rmtree(work, ignore_errors=True)


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


__all__ = [
    "OutLock",
    "check_apart",
    "check_out",
    "check_replaceable",
    "check_room",
    "lock_path_for",
    "remove_stale_swaps",
    "same_file",
    "write_output",
]
