"""Only regular files are read: a name that leads to a FIFO, a socket, a device or a folder is
refused before any read can block.

A plain ``open`` of a FIFO waits for a writer forever (a params file, a manifest or an image
path pointing at one hung a stage). Every file compat reads by name (params, contracts,
``data/source.json``, ``splits/*.json``, images) goes through :func:`open_regular` or
:func:`read_regular_bytes`; readers that must open by name (a memory map) call
:func:`check_regular` first. These functions refuse bad input (exit 4, naming the file); they
never shape what a stage writes.
"""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

from compat.errors import BadInputError


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device"


def open_regular(path: str | os.PathLike[str], what: str = "file") -> io.BufferedReader:
    """``path`` opened for binary reading if it is a regular file (after symlinks); a FIFO,
    socket, device or folder is a :class:`BadInputError` naming it. Opened without blocking and
    checked on the open file, so nothing swapped in after a check can make the read hang (a plain
    ``open`` of a FIFO waits for a writer forever). ``what`` names what was expected, for the
    message ("an image", "a YAML file"). A missing file raises FileNotFoundError as ``open``."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise BadInputError(f"{path}: {_kind(mode)}, not a regular file; expected {what}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_regular(path: str | os.PathLike[str], what: str = "file") -> Path:
    """``path`` if it names a regular file (after symlinks), else :class:`BadInputError` as
    :func:`open_regular`; for readers that must open by name (a memory map). A missing path
    raises FileNotFoundError."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise BadInputError(f"{path}: {_kind(mode)}, not a regular file; expected {what}")
    return Path(path)


def read_regular_bytes(path: str | os.PathLike[str], what: str = "file") -> bytes:
    """The bytes of ``path``, a regular file (:func:`open_regular`)."""
    with open_regular(path, what) as f:
        return f.read()


__all__ = ["check_regular", "open_regular", "read_regular_bytes"]
