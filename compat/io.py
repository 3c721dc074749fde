"""Small file helpers: nothing is ever half-written (temporary file in the same folder + rename).

Durable too: the temporary file is flushed to disk (``fsync``) before the rename and its folder
after it, so a write survives a power loss or an OS crash, not only a killed process.

The temporary file is named ``.<name>.<pid>.<random>.tmp``: a process killed before its rename
leaves one behind, and the next write into the same folder removes it once the pid that made it
is gone (a live writer's file is left alone). The renamed file gets the mode a plain ``open`` would
have given it (0666 less the umask), or keeps the mode of the file it replaces.

A full disk (ENOSPC), a spent quota (EDQUOT) or a read-only file system (EROFS) met while
writing is a :class:`~compat.errors.StorageError` (exit 5) naming the path, the bytes needed and
the bytes free, raised after the temporary is removed: the target is untouched.

Scratch folders (:func:`scratch_dir`) live in the temporary directory as
``compat-<what>-<random>.pid<pid>``; each is removed when its block ends, however it ends, and
one left by a killed process is removed by the next scratch folder made once that pid is gone.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from compat.errors import StorageError

# The errors that mean "this storage cannot take the file", not "this program is wrong".
STORAGE_ERRNOS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "over the disk quota",
    errno.EROFS: "a read-only file system",
}


def current_umask() -> int:
    """The process's umask, read without changing it where Linux allows (``os.umask`` both sets
    and returns it, which would race with other threads creating files)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def _writer_pid(name: str) -> int | None:
    """The pid in a temporary file name ``.<name>.<pid>.<random>.tmp``; None for other names."""
    if not (name.startswith(".") and name.endswith(".tmp")):
        return None
    parts = name[: -len(".tmp")].rsplit(".", 2)
    if len(parts) != 3 or len(parts[0]) < 2 or not parts[1].isdigit() or not parts[2]:
        return None
    return int(parts[1])


def remove_stale_temporaries(target: Path) -> list[Path]:
    """Delete the temporary files in ``target``'s folder whose writing process no longer exists.

    Not only ``target``'s own: a run killed while writing one file (say an epoch checkpoint) and
    started again may never write that same name again, and its temporary must not stay behind.
    """
    removed = []
    for tmp in sorted(target.parent.glob(".*.tmp")):
        pid = _writer_pid(tmp.name)
        if pid is not None and pid != os.getpid() and not _pid_alive(pid):
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
                removed.append(tmp)
    return removed


def human_bytes(n: int) -> str:
    """``2457600`` -> ``"2.3 MiB"``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def storage_errno(err: BaseException) -> int | None:
    """ENOSPC, EDQUOT or EROFS when ``err`` is one of them (also when a library put only its
    number in the message, as ``[errno 28]``), else None."""
    if not isinstance(err, OSError):
        return None
    if err.errno in STORAGE_ERRNOS:
        return err.errno
    text = str(err).lower()
    for code in STORAGE_ERRNOS:
        if f"[errno {code}]" in text or os.strerror(code).lower() in text:
            return code
    return None


def free_bytes(path: str | os.PathLike[str]) -> int | None:
    """Bytes free to this user on the file system of ``path`` (its nearest existing folder)."""
    p = Path(path).absolute()
    for folder in (p, *p.parents):
        try:
            if folder.is_dir():
                st = os.statvfs(folder)
                return st.f_bavail * st.f_frsize
        except OSError:
            continue
    return None


def storage_error(
    err: BaseException,
    path: str | os.PathLike[str],
    *,
    need: int | None = None,
    written: int | None = None,
) -> StorageError | None:
    """The one-line :class:`StorageError` for a full disk, spent quota or read-only file system
    met writing ``path``; None for any other error. ``need``: the bytes the file takes, when the
    writer knows them; else ``written``: what reached the disk before it filled."""
    code = storage_errno(err)
    if code is None:
        return None
    if need is not None and need > 0:
        needs = f"needs {human_bytes(need)} ({need} bytes)"
    elif written:
        needs = (
            f"needs more than the {human_bytes(written)} ({written} bytes) written before it failed"
        )
    else:
        needs = "needs room for a new file"
    free = free_bytes(path)
    room = f", {human_bytes(free)} free" if free is not None and code != errno.EROFS else ""
    return StorageError(f"{path}: cannot write: {STORAGE_ERRNOS[code]} ({needs}{room})")


@contextlib.contextmanager
def storage_errors(path: str | os.PathLike[str], need: int | None = None) -> Iterator[None]:
    """Turn a full disk, spent quota or read-only file system met in the block into a
    :class:`StorageError` naming ``path`` (other errors pass unchanged)."""
    try:
        yield
    except OSError as err:
        full = storage_error(err, path, need=need)
        if full is None:
            raise
        raise full from None


def fsync_file(path: str | os.PathLike[str]) -> None:
    """Flush ``path``'s data to its disk (``fsync``): a rename after this cannot leave the new
    name pointing at an empty or partial file after a power loss or an OS crash."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """Flush a folder's entries (a rename or a new file in it) to disk. Where a folder cannot be
    opened for this (not POSIX), there is nothing to flush it with: skipped."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as err:
        if err.errno not in (errno.EINVAL, errno.ENOTSUP):  # a file system without folder fsync
            raise
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], size: int | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds.

    ``size``: the bytes the file will take, when the caller knows them (named if the disk is
    full). A full disk, spent quota or read-only file system is a :class:`StorageError`.
    """
    target = Path(path)
    with storage_errors(target, size):
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(target)
        fd, tmp = tempfile.mkstemp(
            prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=target.parent
        )
        os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp creates 0600; give the file the mode the user expects of a new (or the
        # replaced) file.
        try:
            mode = target.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o666 & ~current_umask()
        os.chmod(tmp_path, mode)
        fsync_file(tmp_path)  # the bytes on disk before the name points at them
        os.replace(tmp_path, target)
        fsync_dir(target.parent)  # the rename itself survives a power loss
    except OSError as err:
        if storage_errno(err) is None:
            raise
        try:
            written = tmp_path.stat().st_size
        except OSError:
            written = None
        with contextlib.suppress(OSError):
            tmp_path.unlink()  # first, so the free space named is what the disk really has
        raise storage_error(err, target, need=size, written=written) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            if tmp_path.exists():
                tmp_path.unlink()


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_path(path, size=len(data)) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike[str], obj: Any, indent: int | None = 2) -> None:
    """Write JSON deterministically (sorted keys) so equal content gives equal bytes."""
    write_text(path, json.dumps(obj, indent=indent, sort_keys=True) + "\n")


_SCRATCH = "compat-"


def _scratch_pid(name: str) -> int | None:
    """The pid in a scratch folder name ``compat-<what>-<random>.pid<pid>``; None for others."""
    if not name.startswith(_SCRATCH):
        return None
    head, sep, pid = name.rpartition(".pid")
    return int(pid) if sep and head and pid.isdigit() else None


def remove_stale_scratch(root: str | os.PathLike[str] | None = None) -> list[Path]:
    """Delete this user's scratch folders in ``root`` (default: the temporary directory) whose
    process no longer exists."""
    folder = Path(root or tempfile.gettempdir())
    removed = []
    try:
        entries = sorted(folder.glob(f"{_SCRATCH}*.pid*"))
    except OSError:
        return removed
    for entry in entries:
        pid = _scratch_pid(entry.name)
        if pid is None or pid == os.getpid() or _pid_alive(pid):
            continue
        try:
            if entry.is_symlink() or not entry.is_dir() or entry.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def make_scratch_dir(what: str) -> Path:
    """A new scratch folder ``compat-<what>-<random>.pid<pid>`` in the temporary directory (the
    caller removes it; :func:`scratch_dir` does so itself). Stale ones are removed first."""
    remove_stale_scratch()
    with storage_errors(tempfile.gettempdir()):
        return Path(tempfile.mkdtemp(prefix=f"{_SCRATCH}{what}-", suffix=f".pid{os.getpid()}"))


@contextlib.contextmanager
def scratch_dir(what: str) -> Iterator[Path]:
    """A scratch folder for the block, removed when it ends (success or exception)."""
    folder = make_scratch_dir(what)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def fingerprint(obj: Any) -> str:
    """A short stable digest of a JSON-able object (params, manifests)."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]
