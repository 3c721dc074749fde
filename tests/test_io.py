"""compat.io: atomic writes keep the user's umask and leave no temporary file behind."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from compat.io import atomic_path, current_umask, remove_stale_temporaries, write_text


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
