"""Why compat's writer lock (:mod:`compat.embeddings.lock`) is not :class:`filelock.FileLock`,
checked against the installed filelock (issue 46, "one lock"): the lock file of a refuse-at-once
writer lock must not stay beside the output, and removing it under a filelock lets a run that
starts at that moment be refused although nobody holds the lock. The day a filelock release
behaves otherwise, this test fails and the note in compat/embeddings/lock.py is revisited."""

from __future__ import annotations

import os

import pytest

from compat.embeddings.lock import WriterLock


def test_filelock_keeps_its_file_after_release(tmp_path):
    from filelock import FileLock

    lock = FileLock(str(tmp_path / "x.lock"))
    lock.acquire()
    lock.release()
    assert (tmp_path / "x.lock").exists()  # compat's writer lock leaves nothing behind
    with WriterLock(tmp_path / "y.lock", busy="busy {pid}", cannot="cannot"):
        assert (tmp_path / "y.lock").read_text().strip() == str(os.getpid())
    assert not (tmp_path / "y.lock").exists()


def test_a_filelock_removed_by_its_holder_refuses_a_run_that_starts_as_it_ends(tmp_path):
    """The holder removes its file and releases between the newcomer's open and its flock (the
    race of a lock removed after each run): filelock raises Timeout though the lock is free
    (compat's lock opens the path again: compat.embeddings.lock)."""
    import filelock

    unix = pytest.importorskip("filelock._native._unix")
    if not hasattr(unix, "lock_fd_nonblocking"):
        pytest.skip("this filelock has another internal layout: read its acquire again")
    path = tmp_path / "race.lock"
    holder = filelock.FileLock(str(path))
    holder.acquire()
    real = unix.lock_fd_nonblocking

    def holder_finishes_first(fd: int) -> bool:
        os.unlink(path)
        holder.release()
        return real(fd)

    unix.lock_fd_nonblocking = holder_finishes_first
    try:
        with pytest.raises(filelock.Timeout):
            filelock.FileLock(str(path), blocking=False).acquire()
    finally:
        unix.lock_fd_nonblocking = real
