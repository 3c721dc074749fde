"""compat's one checked-output path (:mod:`compat.outputs`), and the writers on it (a gallery in
each format, :func:`compat.embeddings.gallery_out.write_gallery`, which ``embed``, ``data
export`` and ``backfill``'s checks share; a map folder, :func:`compat.maps.store.save_map`,
``adapt``'s and the adapt stage's): property tests over random folders of other people's
files and random output paths. Whatever is there, a write either replaces only what compat
wrote, or is refused (exit 2; 5 on a read-only file system) with nothing changed; nothing it
did not write is touched; no temporary is left, after success, failure or a kill."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compat.embeddings.gallery_out import write_gallery
from compat.errors import StorageError, UsageError
from compat.outputs import check_target, claim, new_folder, remove_stale

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAMES = ["a", "b.npz", "c.npy", "c.meta.npz", "d", "e.parquet", "_compat.json", "notes.txt",
         "part-000000.parquet", "weights.safetensors", "card.json"]  # fmt: skip


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes())
        for p in sorted(root.rglob("*"))
    }


@st.composite
def trees(draw) -> list[tuple[str, str]]:
    """(relative path, "file" or "dir") entries, parents before children."""
    out: list[tuple[str, str]] = []
    for first in draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=5)):
        kind = draw(st.sampled_from(["file", "dir"]))
        out.append((first, kind))
        if kind == "dir":
            for second in draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=3)):
                out.append((f"{first}/{second}", "file"))
    return out


def _make(root: Path, tree: list[tuple[str, str]]) -> None:
    for rel, kind in tree:
        p = root / rel
        if kind == "dir":
            p.mkdir(parents=True, exist_ok=True)
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(f"user's {rel}".encode())


def _rows(n: int = 6, d: int = 3):
    x = np.random.default_rng(0).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _leftovers(root: Path) -> list[str]:
    return [p.name for p in root.rglob("*") if ".new-" in p.name or ".old-" in p.name
            or p.name.endswith(".tmp")]  # fmt: skip


@FAST
@given(trees(), st.sampled_from([*NAMES, "a/b.npz", "d/e", "a/x/y.npy", "z", "z.npz"]))
def test_a_gallery_write_never_touches_what_compat_did_not_write(tmp_path_factory, tree, target):
    root = tmp_path_factory.mktemp("out")
    _make(root, tree)
    out = root / target
    if out.suffix == ".parquet":
        out = out.with_suffix("")  # a Parquet gallery is a folder (a .parquet file is an input)
    before = _snapshot(root)
    x = _rows()
    meta = {"items": "split:v2"}
    try:
        write_gallery(out, 6, 3, [(0, x)], ids=np.asarray(list("abcdef")), labels=np.arange(6),
                      version="v1", meta=meta)  # fmt: skip
    except (UsageError, StorageError) as err:
        assert "\n" not in str(err)
        assert _snapshot(root) == before  # refused: nothing changed
    else:
        after = _snapshot(root)
        written = {out, out.with_name(out.stem + ".meta.npz")} if out.suffix == ".npy" else {out}
        mine = {str(p.relative_to(root)) for p in written}
        for rel, data in before.items():  # everything else is as it was
            if not any(rel == m or rel.startswith(m + "/") for m in mine):
                assert after.get(rel, "gone") == data, rel
        # and it is compat's now: writing it again is allowed
        write_gallery(out, 6, 3, [(0, x)], ids=np.asarray(list("abcdef")), labels=np.arange(6),
                      version="v1", meta=meta)  # fmt: skip
    assert _leftovers(root) == []


@functools.cache
def _fitted():
    from compat.maps import CheckConfig, fit_map

    x = _rows(40, 4)
    return fit_map("procrustes", x, x[:, ::-1].copy(), from_name="v2", to_name="v1",
                   check=CheckConfig(resamples=50))  # fmt: skip


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees(), st.sampled_from(["m", "d", "a", "notes.txt", "b.npz", "new/m"]))
def test_a_map_save_never_touches_what_compat_did_not_write(tmp_path_factory, tree, target):
    from compat.maps import save_map

    root = tmp_path_factory.mktemp("maps")
    _make(root, tree)
    out = root / target
    before = _snapshot(root)
    fitted = _fitted()
    try:
        save_map(out, fitted)
    except (UsageError, StorageError):
        assert _snapshot(root) == before
    else:
        assert sorted(p.name for p in out.iterdir()) == ["card.json", "weights.safetensors"]
        for rel, data in before.items():
            if not (rel == target or rel.startswith(target + "/")):
                assert _snapshot(root).get(rel, "gone") == data, rel
        save_map(out, fitted)  # its own map is replaced
    assert _leftovers(root) == []


def test_places_that_cannot_hold_an_output(tmp_path):
    (tmp_path / "f").write_text("x")
    (tmp_path / "dir.npz").mkdir()
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    cases = [
        (tmp_path / "f" / "g.npz", "file", "is a file, not a folder"),
        (tmp_path / "f", "folder", "a file; this output is a folder"),
        (tmp_path / "dir.npz", "file", "a folder; this output is a file"),
        (tmp_path / "pipe", "file", r"a FIFO \(named pipe\), not a file"),
        (tmp_path / "link", "file", "a symbolic link"),
        (Path("/proc/self/x"), "file", "a kernel file system"),
        (Path("/dev/null"), "file", "a kernel file system"),
    ]
    for path, kind, said in cases:
        with pytest.raises(UsageError, match=said):
            check_target(path, kind)
    assert check_target(tmp_path / "new" / "deeper" / "g.npz", "file") == tmp_path / "new" / "deeper" / "g.npz"  # fmt: skip
    with pytest.raises(UsageError, match=r"^--out .*/notes: the folder holds files that are not x"):
        (tmp_path / "notes").mkdir()
        (tmp_path / "notes" / "n.txt").write_text("n")
        claim(tmp_path / "notes", "folder", lambda p: "the folder holds files that are not x")


def test_a_failed_folder_write_leaves_the_old_output_and_no_temporary(tmp_path):
    out = tmp_path / "g"
    with new_folder(out) as tmp:
        (tmp / "part-000000.parquet").write_text("one")
    with pytest.raises(RuntimeError), new_folder(out) as tmp:
        (tmp / "part-000000.parquet").write_text("two")
        raise RuntimeError("the writer failed")
    assert (out / "part-000000.parquet").read_text() == "one"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g"]


KILLED = """
import os, sys
from pathlib import Path
from compat.outputs import new_folder, replace_folder
out = Path(sys.argv[1])
if sys.argv[2] == "mid-write":
    with new_folder(out) as tmp:
        (tmp / "part-000000.parquet").write_text("half")
        os._exit(9)  # killed while writing
# killed between the two renames of the swap: the old output aside, the new one not in place
new = out.parent / f".{out.name}.new-{os.getpid()}"
new.mkdir()
os.replace(out, out.parent / f".{out.name}.old-{os.getpid()}")
os._exit(9)
"""


@pytest.mark.parametrize("when", ["mid-write", "mid-swap"])
def test_what_a_killed_write_leaves_is_cleared_by_the_next(tmp_path, when):
    out = tmp_path / "g"
    with new_folder(out) as tmp:
        (tmp / "part-000000.parquet").write_text("previous")
    r = subprocess.run([sys.executable, "-c", KILLED, str(out), when], capture_output=True)
    assert r.returncode == 9, r.stderr
    assert any(".new-" in p.name or ".old-" in p.name for p in tmp_path.iterdir())
    remove_stale(out)  # the next write of g does this first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g"]
    assert (out / "part-000000.parquet").read_text() == "previous"  # put back when the swap was cut
