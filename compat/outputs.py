"""The one checked-output path: what every command that writes a file or folder the user names
(``--out``, ``--cache``) goes through, before any work and while it writes.

* **A place that can hold the output** (:func:`check_target`): a path under a regular file,
  inside a kernel file system (``/proc``, ``/sys``, ``/dev``), a folder where a file goes, a file
  where a folder goes, a symbolic link, a FIFO or device, or a folder the user may not write is
  a :class:`~compat.errors.UsageError` (exit 2) naming the option and the path; a read-only file
  system is a :class:`~compat.errors.StorageError` (exit 5), as a full disk is when met writing.
* **Only what compat wrote is replaced** (:func:`check_owned`): an existing output is replaced
  only when the caller's ``owns`` test says compat wrote it (a folder may also be empty);
  anything else is a usage error (exit 2) naming what it holds, before any work. So a user's
  file is never deleted, and nothing beside an output is touched.
* **Nothing half-written** (:func:`new_folder`; files through :func:`compat.io.atomic_path`): a
  folder output is built in ``.<name>.new-<pid>`` beside it and swapped in whole at the end (the
  folder it replaces moved to ``.<name>.old-<pid>``, then removed); a failure removes the new
  folder and leaves the old one in place. A killed run's leftovers are cleared by the next write
  of the same output once the process that made them is gone (:func:`remove_stale`): a new
  folder is removed, a swapped-out old one put back when nothing took its place.

:func:`claim` is the first two in one call: every writing command makes it before it reads or
computes anything (``compat embed``, ``adapt``, ``backfill``, ``data preview``, ``data export``),
and each writer makes it again when it writes (a stage calls the writer directly).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

from compat.errors import StorageError, UsageError
from compat.io import _pid_alive, fsync_dir, fsync_file, storage_error, storage_errors

Kind = Literal["file", "folder"]
KERNEL_FILE_SYSTEMS = ("/proc", "/sys", "/dev")

# ``owns(path)``: None when compat wrote the existing output at ``path`` (it may be replaced),
# else what it is, for the refusal ("a .npz no compat command wrote", "holds notes.txt").
Owns = Callable[[Path], str | None]


def _what(kind: Kind) -> str:
    return "a file" if kind == "file" else "a folder"


def _non_regular(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device"


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def check_target(path: str | os.PathLike[str], kind: Kind, option: str = "--out") -> Path:
    """``path`` if a ``kind`` output (a file or a folder) can be written there; else a
    :class:`UsageError` (exit 2) or, on a read-only file system, a :class:`StorageError` (exit
    5), each one line naming ``option`` and the path. Nothing is created."""
    p = Path(path)
    where = f"{option} {p}"
    absolute = Path(os.path.abspath(p))
    real = p.resolve()
    for root in KERNEL_FILE_SYSTEMS:
        if any(q == Path(root) or q.is_relative_to(root) for q in (absolute, real)):
            raise UsageError(f"{where}: not a place for files (a kernel file system)")
    if p.is_symlink():
        raise UsageError(
            f"{where}: a symbolic link; compat writes only a path it can replace whole"
        )
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        mode = None
    except NotADirectoryError:  # a/b with a a file: named below, at a
        mode = None
    except OSError as err:
        raise UsageError(f"{where}: cannot be written ({err.strerror or err})") from None
    if mode is not None:
        if stat.S_ISDIR(mode) and kind == "file":
            raise UsageError(f"{where}: a folder; this output is a file")
        if stat.S_ISREG(mode) and kind == "folder":
            raise UsageError(f"{where}: a file; this output is a folder")
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
            raise UsageError(f"{where}: {_non_regular(mode)}, not {_what(kind)}")
    for folder in absolute.parents:
        if not os.path.lexists(folder):
            continue
        if not folder.is_dir():
            raise UsageError(f"{where}: {folder} is a file, not a folder")
        if _read_only(folder):
            raise StorageError(f"{where}: cannot write: a read-only file system ({folder})")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise UsageError(f"{where}: {folder} is not writable")
        break
    return p


def check_owned(
    path: str | os.PathLike[str],
    kind: Kind,
    owns: Owns,
    option: str = "--out",
    what: str = "an output",
) -> None:
    """Refuse (:class:`UsageError`, exit 2) an existing output at ``path`` that ``owns`` does
    not claim for compat (``what`` names the output in the message); a missing path or an empty
    folder is free to write."""
    p = Path(path)
    if not os.path.lexists(p):
        return
    if kind == "folder" and p.is_dir() and not any(p.iterdir()):
        return
    reason = owns(p)
    if reason is not None:
        raise UsageError(
            f"{option} {p}: {reason}; compat replaces only {what} it wrote: remove it or "
            f"choose another {option}"
        )


def claim(
    path: str | os.PathLike[str],
    kind: Kind,
    owns: Owns | None = None,
    option: str = "--out",
    what: str = "an output",
) -> Path:
    """:func:`check_target`, then (with ``owns``) :func:`check_owned`: the one test every
    writing command makes before any work."""
    p = check_target(path, kind, option)
    if owns is not None:
        check_owned(p, kind, owns, option, what)
    return p


def folder_entries(
    folder: Path, allowed: Callable[[str], bool], whose: str = "compat's"
) -> str | None:
    """None when every entry of ``folder`` is a regular file whose name ``allowed`` accepts;
    else what else it holds (``the folder holds files that are not a map's (notes.txt, x and 2
    more)``), for an ``owns``."""
    foreign = sorted(
        e.name
        for e in folder.iterdir()
        if not (allowed(e.name) and e.is_file() and not e.is_symlink())
    )
    if not foreign:
        return None
    more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
    return f"the folder holds files that are not {whose} ({', '.join(foreign[:3])}{more})"


def _marked(target: Path, mark: str) -> list[tuple[Path, int]]:
    """The ``.<name>.<mark>-<pid>`` entries beside ``target`` with their pids."""
    prefix = f".{target.name}.{mark}-"
    out = []
    try:
        entries = list(target.parent.iterdir())
    except OSError:
        return out
    for entry in entries:
        pid = entry.name[len(prefix) :] if entry.name.startswith(prefix) else ""
        if pid.isdigit():
            out.append((entry, int(pid)))
    return out


def remove_stale(target: str | os.PathLike[str]) -> list[Path]:
    """Clear what a killed write of ``target`` left, once its process is gone: a half-built
    ``.<name>.new-<pid>`` is removed; a swapped-out ``.<name>.old-<pid>`` is put back when
    nothing took its place (the kill fell between the two renames), else removed."""
    t = Path(target)
    cleared = []
    for mark in ("new", "old"):
        for entry, pid in _marked(t, mark):
            if pid == os.getpid() or _pid_alive(pid):
                continue
            if mark == "old" and not os.path.lexists(t):
                with contextlib.suppress(OSError):
                    os.replace(entry, t)
                    continue
            shutil.rmtree(entry, ignore_errors=True)
            with contextlib.suppress(OSError):
                entry.unlink()
            cleared.append(entry)
    return cleared


def replace_folder(new: Path, target: Path) -> None:
    """Put folder ``new`` at ``target`` (same file system); an existing ``target`` is swapped out
    to ``.<name>.old-<pid>`` first and removed after, and put back if the second rename fails."""
    old = None
    if os.path.lexists(target):
        old = target.parent / f".{target.name}.old-{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
    try:
        os.replace(new, target)
    except OSError:
        if old is not None:
            os.replace(old, target)  # the previous output stays where it was
        raise
    fsync_dir(target.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def new_folder(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A fresh folder ``.<name>.new-<pid>`` beside ``path`` for the block to fill; swapped in
    at ``path`` when the block succeeds (:func:`replace_folder`), removed when it fails. A full
    disk, spent quota or read-only file system is a :class:`StorageError` naming ``path``."""
    target = Path(path)
    remove_stale(target)
    tmp = target.parent / f".{target.name}.new-{os.getpid()}"
    with storage_errors(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    try:
        yield tmp
        for f in sorted(tmp.rglob("*")):
            if f.is_file() and not f.is_symlink():
                fsync_file(f)  # the bytes on disk before the swap makes them the output
        fsync_dir(tmp)
        replace_folder(tmp, target)
    except OSError as err:
        full = storage_error(err, target)
        if full is None:
            raise
        raise full from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


__all__ = [
    "KERNEL_FILE_SYSTEMS",
    "Owns",
    "check_owned",
    "check_target",
    "claim",
    "folder_entries",
    "new_folder",
    "remove_stale",
    "replace_folder",
]
