"""One writer at a time: a lock file held (``flock``) for a whole run and removed after it.

What a backfill's ``--out`` (:class:`compat.backfill.output.OutLock`) and a table gallery
(:func:`compat.embeddings.table_fill.table_lock`: every compat command that writes a table) hold:
a second run is refused at once (:class:`~compat.errors.ConflictError`, exit 6), naming the pid
of the holder, and writes and removes nothing.

Not :class:`filelock.FileLock` (compat's lock elsewhere), for two things it lacks here:

* the holder's pid, which the refusal names: filelock 3.12 to 3.29 (pyproject.toml's
  ``filelock>=3.12`` allows them) open the lock file with ``O_TRUNC`` on every attempt, so a
  refused run would erase the pid the holder wrote; only 3.30 stopped truncating and added
  ``on_acquired`` to write it under the lock;
* a refusal only while another run holds the lock: a non-blocking ``acquire`` that opens the
  lock file just before its previous holder removes it (this lock file is removed after every
  run) drops the flock it got on the removed file and raises ``Timeout``, the same exception as
  for a live holder (filelock 4.3.2), so a run started as another ends would be refused (exit
  6); this lock opens the path again instead. Not removing the file is no way out: filelock's
  Unix lock keeps its file after ``release`` (4.3.2), so every output would keep a
  ``.<name>.backfill.lock`` beside it. tests/test_lock_choice.py checks both against the
  installed filelock, so this note is revisited the day a release closes the gap.

The registry's locks (``promote.lock``, the schema lock) are :class:`filelock.FileLock`: they
wait, with a timeout, for the holder to finish, and their files may stay in ``registry/``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from compat.errors import ConflictError, UsageError
from compat.io import storage_errors


class WriterLock:
    """The lock file ``path``: ``busy`` (with ``{pid}``) is the conflict's message, ``cannot``
    the usage error's prefix when no file can be made there."""

    def __init__(self, path: Path, *, busy: str, cannot: str) -> None:
        self.path, self.busy, self.cannot = path, busy, cannot
        self.fd: int | None = None

    def __enter__(self) -> WriterLock:
        import fcntl

        while True:
            try:
                with storage_errors(self.path):
                    self.path.parent.mkdir(parents=True, exist_ok=True)  # --out new/g2.npz
                    fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as err:
                raise UsageError(f"{self.cannot} ({' '.join(str(err).split())})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
                os.close(fd)
                raise ConflictError(self.busy.format(pid=holder)) from None
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


__all__ = ["WriterLock"]
