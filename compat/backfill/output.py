"""A backfill's output (``--out``): whether a run may write it, one run at a time, and how the
finished output is put in place.

* **The input is never modified**: ``out`` (its ``.npy`` sidecar, the work folder and the lock
  file too) must not be, hold or lie inside a file of the input gallery (:func:`check_apart`).
* **Only its own output is replaced**: an existing ``out`` is replaced only when a backfill
  wrote it (its ``meta`` records a ``backfill``; a Parquet folder holds nothing but
  ``_compat.json`` and ``batch-*.parquet`` shards) or it is an empty folder
  (:func:`check_replaceable`). Anything else, or a place no file can be written
  (:func:`check_out`), is a :class:`~compat.errors.UsageError` (exit 2) before any work.
* **One writer per output**: a run holds the lock file ``.<out name>.backfill.lock`` beside the
  output (:class:`OutLock`); a second run into the same ``out`` is a
  :class:`~compat.errors.ConflictError` (exit 6) that writes and removes nothing.
* **Room on disk**: a full disk is refused before any work when the free space already falls
  short (:func:`check_room`, a :class:`~compat.errors.StorageError`, exit 5).
* **Nothing half-written**: the output (a file, or a folder of shards swapped into place) is
  assembled from the saved batches (:mod:`compat.backfill.resume`) only when every block is done
  (:func:`write_output`); a swapped-out folder a killed run left is removed by the next run
  (:func:`remove_stale_swaps`).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from compat.backfill.plan import bundle_version
from compat.backfill.resume import STATE, Parts, work_dir_for
from compat.errors import ConflictError, StorageError, UsageError
from compat.io import atomic_path, free_bytes, human_bytes, storage_error, storage_errors

_SHARD = re.compile(r"batch-\d{6}\.parquet")


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
    goes) with a one-line usage error, before any work."""
    parent = out.parent
    for p in [parent, *parent.parents]:
        if p.exists():
            if not p.is_dir():
                raise UsageError(f"--out {out}: {p} is a file, not a folder")
            if not os.access(p, os.W_OK):
                raise UsageError(f"--out {out}: {p} is not writable")
            break
    if str(out.resolve()).startswith(("/proc/", "/sys/", "/dev/")):
        raise UsageError(f"--out {out}: not a place for files (a kernel file system)")
    if fmt != "parquet" and out.is_dir():
        raise UsageError(f"--out {out}: a folder; a .npz or .npy output must be a file")
    if fmt == "parquet" and out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: a file; a Parquet output is a folder of shards")


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


def _by_backfill(meta: Any) -> bool:
    """Whether a gallery's ``meta`` says a backfill wrote it."""
    return (
        isinstance(meta, dict) and isinstance(meta.get("backfill"), list) and bool(meta["backfill"])
    )


def check_replaceable(out: Path, fmt: str) -> None:
    """An existing ``out`` may be replaced only if a backfill wrote it (or it is an empty
    folder); anything else is a usage error before any work."""
    from compat.embeddings.bundle import read_bundle_meta
    from compat.embeddings.formats import DATASET_META, sidecar_of
    from compat.errors import CompatError

    hint = "compat replaces only a gallery a backfill wrote; remove it or choose another --out"
    if out.is_symlink():
        raise UsageError(f"--out {out}: a symbolic link; {hint}")
    if fmt == "parquet":
        if not out.exists():
            return
        names = sorted(p.name for p in out.iterdir())
        if not names:
            return
        foreign = [
            n
            for n in names
            if n != DATASET_META and not (_SHARD.fullmatch(n) and (out / n).is_file())
        ]
        if foreign:
            more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
            raise UsageError(
                f"--out {out}: the folder holds files a backfill did not write "
                f"({', '.join(foreign[:3])}{more}); {hint}"
            )
        try:
            meta = json.loads((out / DATASET_META).read_text(encoding="utf-8")).get("meta")
        except (OSError, UnicodeDecodeError, ValueError, AttributeError):
            meta = None
        if not _by_backfill(meta):
            raise UsageError(
                f"--out {out}: a Parquet gallery no backfill wrote ({DATASET_META} records no "
                f"backfill); {hint}"
            )
        return
    owner = sidecar_of(out) if fmt == "npy" else out
    if not out.exists() and not owner.exists():
        return
    if owner.is_symlink() or not owner.is_file():
        raise UsageError(f"--out {out}: {owner.name} is missing or not a file; {hint}")
    try:
        meta = read_bundle_meta(owner)
    except CompatError:
        meta = None
    if not _by_backfill(meta):
        what = f"a file ({owner.name} records no backfill)" if owner != out else "a file"
        raise UsageError(f"--out {out}: {what} a backfill did not write; {hint}")


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


class OutLock:
    """The lock file beside ``out`` (``flock``), held for a whole run and removed after it: a
    second run into the same ``out`` is refused at once, writing and removing nothing.

    Not :class:`filelock.FileLock` (compat's lock elsewhere), for two things it lacks here:

    * the holder's pid, which the refusal names: filelock 3.12 to 3.29 (pyproject.toml's
      ``filelock>=3.12`` allows them) open the lock file with ``O_TRUNC`` on every attempt, so a
      refused run would erase the pid the holder wrote; only 3.30 stopped truncating and added
      ``on_acquired`` to write it under the lock;
    * a refusal only while another run holds the lock: a non-blocking ``acquire`` that opens
      the lock file just before its previous holder removes it (this lock file is removed after
      every run) drops the flock it got on the removed file and raises ``Timeout``, the same
      exception as for a live holder (filelock 4.3.2), so a run started as another ends would
      be refused (exit 6); this lock opens the path again instead.
    """

    def __init__(self, out: Path) -> None:
        self.out, self.path = out, lock_path_for(out)
        self.fd: int | None = None

    def __enter__(self) -> OutLock:
        import fcntl

        while True:
            try:
                with storage_errors(self.path):
                    self.path.parent.mkdir(parents=True, exist_ok=True)  # --out new/g2.npz
                    fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as err:
                raise UsageError(
                    f"--out {self.out}: cannot write beside it ({_one_line(err)})"
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
                os.close(fd)
                raise ConflictError(
                    f"--out {self.out}: another backfill (pid {holder}) is writing it; wait for "
                    "it to finish, or choose another --out"
                ) from None
            try:  # the holder before us may have removed (and another run re-made) the file
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)  # while still holding it: a waiting run re-opens the path
        if self.fd is not None:
            os.close(self.fd)


def _swap_name(target: Path, pid: int) -> Path:
    return target.parent / f".{target.name}.old-{pid}"


def _replace_folder(new: Path, target: Path) -> None:
    """Put folder ``new`` at ``target``; an existing ``target`` folder (one a backfill wrote:
    :func:`check_replaceable`) is swapped out, then removed."""
    old = None
    if target.exists():
        old = _swap_name(target, os.getpid())
        os.replace(target, old)
    try:
        os.replace(new, target)
    except OSError:
        if old is not None:
            os.replace(old, target)  # the previous output stays where it was
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def remove_stale_swaps(out: Path) -> None:
    """Remove the swapped-out outputs (``.<name>.old-<pid>``) of killed runs."""
    from compat.io import _pid_alive

    for old in out.parent.glob(f".{glob.escape(out.name)}.old-*"):
        pid = old.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)


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
            _replace_folder(work, out)
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
