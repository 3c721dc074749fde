"""compat.io: atomic writes keep the user's umask and leave no temporary file behind; a full disk
is one line naming the path and the bytes; scratch folders never outlive their process."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from compat.errors import StorageError
from compat.io import (
    atomic_path,
    current_umask,
    remove_stale_temporaries,
    scratch_dir,
    write_bytes,
    write_text,
)


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture()
def umask():
    before = os.umask(0o022)
    os.umask(before)

    def set_mask(mask: int) -> None:
        os.umask(mask)

    yield set_mask
    os.umask(before)


@pytest.mark.parametrize(("mask", "expected"), [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_new_files_follow_the_umask(tmp_path, umask, mask, expected):
    umask(mask)
    assert current_umask() == mask
    write_text(tmp_path / "a.json", "{}")
    assert _mode(tmp_path / "a.json") == expected


def test_a_replaced_file_keeps_its_mode(tmp_path, umask):
    umask(0o022)
    target = tmp_path / "a.txt"
    target.write_text("old")
    target.chmod(0o664)
    write_text(target, "new")
    assert target.read_text() == "new" and _mode(target) == 0o664


def test_failure_leaves_the_target_and_no_temporary(tmp_path):
    target = tmp_path / "a.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_a_killed_writers_temporary_is_removed_by_the_next_write(tmp_path):
    target = tmp_path / "weights.bin"
    # A process that creates its temporary file and is killed before the rename.
    code = (
        "import os, signal, sys\n"
        "from compat.io import atomic_path\n"
        "with atomic_path(sys.argv[1]) as tmp:\n"
        "    tmp.write_bytes(b'x' * 1000)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(target)], check=False)
    assert proc.returncode == -9
    left = list(tmp_path.glob(".weights.bin.*.tmp"))
    assert len(left) == 1 and not target.exists()
    write_text(target, "done")
    assert target.read_text() == "done"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["weights.bin"]


def test_a_live_writers_temporary_is_left_alone(tmp_path):
    target = tmp_path / "a.txt"
    live = tmp_path / f".a.txt.{os.getppid()}.abc123.tmp"  # our parent: alive
    dead_pid = 2**22 + 7  # above the default pid_max: no such process
    dead = tmp_path / f".a.txt.{dead_pid}.abc123.tmp"
    other_live = tmp_path / f".b.txt.{os.getppid()}.abc.tmp"  # another target's, writer alive
    other_dead = tmp_path / f".c.npy.{dead_pid}.x_1.tmp"  # another target's, writer gone
    unrelated = [tmp_path / n for n in (".notes.tmp", ".a.b.tmp", "a.txt.7.x.tmp", ".x.7..tmp")]
    for p in (live, dead, other_live, other_dead, *unrelated):
        p.write_text("x")
    assert remove_stale_temporaries(target) == [dead, other_dead]
    assert live.exists() and other_live.exists() and all(p.exists() for p in unrelated)
    assert not dead.exists() and not other_dead.exists()


# -- a full disk, a spent quota, a read-only file system (issue 31 item 2) ----------------------


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (errno.ENOSPC, "no space left on the device"),
        (errno.EDQUOT, "over the disk quota"),
        (errno.EROFS, "a read-only file system"),
    ],
)
def test_a_storage_error_inside_a_write_is_one_line_and_leaves_the_target(tmp_path, code, reason):
    target = tmp_path / "a.bin"
    target.write_bytes(b"old")
    with pytest.raises(StorageError) as info, atomic_path(target, size=5000) as tmp:
        tmp.write_bytes(b"x" * 100)  # a part reached the disk
        raise OSError(code, os.strerror(code))
    message = str(info.value)
    assert message.startswith(f"{target}: cannot write: {reason} (needs 4.9 KiB (5000 bytes)")
    assert ("free)" in message) == (code != errno.EROFS) and "\n" not in message
    assert info.value.exit_code == 5
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin"]


def test_without_a_size_the_bytes_written_are_named(tmp_path):
    wanted = r"needs more than the 100 B \(100 bytes\) written"
    with pytest.raises(StorageError, match=wanted), atomic_path(tmp_path / "a.bin") as tmp:
        tmp.write_bytes(b"x" * 100)
        raise OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28]")
    assert list(tmp_path.iterdir()) == []


def test_other_errors_pass_unchanged(tmp_path):
    with pytest.raises(PermissionError), atomic_path(tmp_path / "a.bin"):
        raise PermissionError(errno.EACCES, "denied")
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_folder_is_a_storage_error_before_the_temporary(tmp_path, monkeypatch):
    import compat.io as io_mod

    def mkstemp(**_kw):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(tmp_path))

    monkeypatch.setattr(io_mod.tempfile, "mkstemp", mkstemp)
    with pytest.raises(StorageError, match=r"a\.json: cannot write: a read-only file system"):
        write_text(tmp_path / "a.json", "{}")


def test_write_bytes_names_its_exact_size(tmp_path, monkeypatch):
    import pathlib

    def full(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pathlib.Path, "write_bytes", full)
    with pytest.raises(StorageError, match=r"needs 1\.0 MiB \(1048576 bytes\), .* free\)$"):
        write_bytes(tmp_path / "a.bin", b"\0" * (1 << 20))


# -- scratch folders (issue 30 item 3) -----------------------------------------------------------


def test_a_scratch_folder_is_removed_on_success_and_on_failure(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    with scratch_dir("x") as folder:
        assert folder.parent == tmp_path and folder.name.startswith("compat-x-")
        assert folder.name.endswith(f".pid{os.getpid()}")
        (folder / "f").write_text("x")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError), scratch_dir("y"):
        raise RuntimeError("refused")
    assert list(tmp_path.iterdir()) == []


def test_a_killed_processes_scratch_folder_is_removed_by_the_next(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    code = (
        "import os, signal\n"
        "from compat.io import make_scratch_dir\n"
        "(make_scratch_dir('emb') / 'big.npz').write_bytes(b'x' * 1000)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, check=False)
    assert proc.returncode == -9
    [left] = tmp_path.iterdir()
    assert left.name.startswith("compat-emb-")
    live = tmp_path / f"compat-emb-abc.pid{os.getppid()}"  # a live process's: kept
    live.mkdir()
    mine = tmp_path / "compat-notes"  # not a scratch folder's name: kept
    mine.mkdir()
    rerun = "from compat.io import scratch_dir\nwith scratch_dir('emb'):\n    pass\n"
    subprocess.run([sys.executable, "-c", rerun], env=env, check=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, mine.name])


def test_a_write_is_flushed_to_disk_before_and_after_its_rename(tmp_path, monkeypatch):
    """fsync of the temporary file's data, then the rename, then fsync of the folder: what a
    power loss cannot undo (a killed process alone would not need it)."""
    from compat import io

    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(a, b):
        events.append(("replace", str(b)))
        real_replace(a, b)

    monkeypatch.setattr(io.os, "fsync", fsync)
    monkeypatch.setattr(io.os, "replace", replace)
    target = tmp_path / "out.json"
    io.write_json(target, {"a": 1})
    kinds = [kind for kind, _ in events]
    assert kinds == ["fsync", "replace", "fsync"]
    assert Path(events[0][1]).name.startswith(".out.json.") and events[0][1].endswith(".tmp")
    assert events[1][1] == str(target) and events[2][1] == str(tmp_path)
    assert json.loads(target.read_text()) == {"a": 1}
