"""Small file helpers: nothing is ever half-written (temporary file in the same folder + rename).

The temporary file is named ``.<name>.<pid>.<random>.tmp``: a process killed before its rename
leaves one behind, and the next write into the same folder removes it once the pid that made it
is gone (a live writer's file is left alone). The renamed file gets the mode a plain ``open`` would
have given it (0666 less the umask), or keeps the mode of the file it replaces.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


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


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds."""
    target = Path(path)
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
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike[str], obj: Any, indent: int | None = 2) -> None:
    """Write JSON deterministically (sorted keys) so equal content gives equal bytes."""
    write_text(path, json.dumps(obj, indent=indent, sort_keys=True) + "\n")


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
