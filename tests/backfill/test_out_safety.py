"""What a backfill may touch (issues 30 item 1, 31 items 2-4): an output replaces only what a
backfill wrote, one writer per output, a damaged saved batch is computed again, and nothing is
left behind after a failure, a full disk or a lost race."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import compat.backfill.resume as resume_mod
from compat.backfill.apply import backfill
from compat.backfill.output import OutLock, lock_path_for
from compat.backfill.resume import work_dir_for
from compat.embeddings.bundle import Sidecar, save_sidecar
from compat.embeddings.formats import write_shard
from compat.embeddings.reader import load_gallery
from compat.errors import BadInputError, ConflictError, StorageError, UsageError
from compat.io import sha256_file

SLOW_CLI = Path(__file__).with_name("slow_backfill.py")


def _run(root, gallery=None, out=None, **kw):
    args = {"source": "v1", "target": "v2", "psi_dir": root / "models" / "v2" / "upgrade",
            "batch_size": 16, "progress": False, **kw}  # fmt: skip
    return backfill(gallery or root / "g.npz", out or root / "g2.npz", **args)


def _snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` (hidden ones too) with its sha256."""
    return {
        str(p.relative_to(root)): sha256_file(p) for p in sorted(root.rglob("*")) if p.is_file()
    }


def _shards(folder: Path, bundle, rows: int = 17) -> Path:
    folder.mkdir(parents=True)
    ids = np.asarray(bundle.ids)
    for s in range(0, len(bundle), rows):
        sl = slice(s, s + rows)
        write_shard(folder / f"part-{s:04d}.parquet", ids[sl], bundle.embeddings[sl],
                    bundle.labels[sl], np.full(len(ids[sl]), "v1"))  # fmt: skip
    return folder


# -- an output replaces only what a backfill wrote (issue 30 item 1) ----------------------------


@pytest.mark.parametrize(
    "layout",
    ["gallery-inside-out", "shard-file-inside-out", "out-is-the-gallery", "out-inside-gallery"],
)
def test_out_holding_or_inside_the_input_gallery_is_refused_before_any_work(
    psi_and_gallery, layout
):
    root, _, _, bundle = psi_and_gallery
    data = root / "DIR"
    gallery = _shards(data / "g", bundle)
    (data / "notes.txt").write_text("mine")
    gallery, out = {
        "gallery-inside-out": (gallery, data),
        "shard-file-inside-out": (gallery / "part-0000.parquet", data),
        "out-is-the-gallery": (gallery, gallery),
        "out-inside-gallery": (gallery, gallery / "up"),
    }[layout]
    before = _snapshot(root)
    with pytest.raises(UsageError, match=r"^--out .*the input"):
        _run(root, gallery=gallery, out=out)
    assert _snapshot(root) == before  # nothing deleted, nothing created (no work folder, no lock)


def test_out_folder_holding_other_files_is_refused_and_kept(psi_and_gallery):
    root = psi_and_gallery[0]
    out = root / "up"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    before = _snapshot(root)
    with pytest.raises(UsageError, match=r"holds files that are not a gallery's \(notes\.txt\)"):
        _run(root, out=out)
    assert _snapshot(root) == before
    # an empty folder holds nothing to lose: it becomes the output
    (out / "notes.txt").unlink()
    assert _run(root, out=out).upgraded == 50 and (out / "_compat.json").is_file()


def test_a_parquet_gallery_no_backfill_wrote_is_not_replaced(psi_and_gallery):
    root, _, _, bundle = psi_and_gallery
    theirs = _shards(root / "theirs", bundle, rows=50)
    (theirs / "batch-000000.parquet").write_bytes((theirs / "part-0000.parquet").read_bytes())
    (theirs / "part-0000.parquet").unlink()  # named like compat's shards, but no backfill meta
    before = _snapshot(root)
    with pytest.raises(UsageError, match="not a gallery compat backfill wrote"):
        _run(root, out=theirs)
    assert _snapshot(root) == before


@pytest.mark.parametrize("fmt", ["npz", "npy"])
def test_a_file_no_backfill_wrote_is_not_replaced(psi_and_gallery, kit, fmt):
    root, _, _, bundle = psi_and_gallery
    if fmt == "npz":
        out = root / "mine.npz"
        kit.make_gallery(out, seed=5)  # a user's bundle
    else:
        out = root / "mine.npy"
        np.save(out, bundle.embeddings)
        save_sidecar(root / "mine.meta.npz", Sidecar(bundle.labels, None, None, "v1", None, {}))
    before = _snapshot(root)
    with pytest.raises(UsageError, match="not a gallery compat backfill wrote"):
        _run(root, out=out)
    assert _snapshot(root) == before
    # a backfill's own output is replaced (run twice into the same --out)
    _run(root, out=root / f"ours.{fmt}")
    assert _run(root, out=root / f"ours.{fmt}", batch_size=7).upgraded == 50


def test_npz_out_onto_the_inputs_sidecar_is_refused(psi_and_gallery):
    root, _, _, bundle = psi_and_gallery
    np.save(root / "g.npy", bundle.embeddings)
    save_sidecar(root / "g.meta.npz", Sidecar(bundle.labels, None, None, "v1", None, {}))
    before = _snapshot(root)
    with pytest.raises(UsageError, match="is a file of the input gallery"):
        _run(root, gallery=root / "g.npy", out=root / "g.meta.npz")
    assert _snapshot(root) == before


def test_a_work_folder_compat_did_not_make_is_refused_and_kept(psi_and_gallery):
    root = psi_and_gallery[0]
    work = work_dir_for(root / "g2.npz")
    work.mkdir()
    (work / "thesis.tex").write_text("not a batch")
    before = _snapshot(root)
    with pytest.raises(UsageError, match=r"not a backfill's work folder \(it holds thesis\.tex\)"):
        _run(root)
    assert _snapshot(root) == before


def test_a_killed_runs_swapped_out_folder_is_removed(psi_and_gallery):
    root = psi_and_gallery[0]
    dead = 2**22 + 11  # above the default pid_max: no such process
    stale = root / f".up.old-{dead}"
    stale.mkdir()
    (stale / "batch-000000.parquet").write_bytes(b"old")
    _run(root, out=root / "up")
    _run(root, out=root / "up", batch_size=25)
    assert not stale.exists()
    assert sorted(p.name for p in root.iterdir() if p.name.startswith(".")) == []


# -- nothing left behind after a failure (issue 30 item 3's rule, issue 31 item 4) ----------------


def test_a_failed_run_leaves_no_work_folder_and_no_lock(psi_and_gallery, kit):
    root, _, _, bundle = psi_and_gallery
    emb = bundle.embeddings.copy()
    emb[40, 3] = np.inf  # found in the third block, after two were saved
    np.save(root / "bad.npy", emb)
    save_sidecar(root / "bad.meta.npz", Sidecar(bundle.labels, None, None, "v1", None, {}))
    before = _snapshot(root)
    with pytest.raises(BadInputError, match=r"NaN or inf \(first in row 40\)"):
        _run(root, gallery=root / "bad.npy", out=root / "up")
    assert _snapshot(root) == before


def _slow(root: Path, out: Path, gallery: str = "g.npz") -> list[str]:
    return [
        sys.executable, str(SLOW_CLI), "backfill", "--gallery", str(root / gallery),
        "--from", "v1", "--to", "v2", "--out", str(out), "--models", str(root / "models"),
        "--batch-size", "10", "--no-progress", "--json",
    ]  # fmt: skip


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "other_input",
    [False, pytest.param(True, marks=pytest.mark.slow)],  # ~12 s each: real processes
)
def test_two_backfills_into_one_out_the_second_exits_6_and_leaves_nothing(
    tmp_path, kit, other_input
):
    """Real processes: a slow backfill holds the output; a second into the same --out (same
    inputs, or another gallery: once it discarded the first's work folder) is refused at once."""
    kit.make_psi(tmp_path / "models" / "v2" / "upgrade")
    kit.make_gallery(tmp_path / "g.npz", n=200)
    kit.make_gallery(tmp_path / "h.npz", n=120, seed=3)
    out = tmp_path / "out"  # Parquet shards, as in the issue
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    release = tmp_path.parent / f"{tmp_path.name}-release"  # the first waits after 2 batches
    first = subprocess.Popen(_slow(tmp_path, out), env={**env, "SLOW_BACKFILL_HOLD": str(release)},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    work = work_dir_for(out)
    deadline = time.time() + 120
    while time.time() < deadline and len(list(work.glob("batch-*.sha256"))) < 2:
        assert first.poll() is None, first.stderr.read().decode()[-2000:]
        time.sleep(0.02)
    # The first's finished files: a ``.tmp`` is a batch it is writing now (renamed when done).
    saved = sorted(p.name for p in work.iterdir() if not p.name.endswith(".tmp"))
    second = subprocess.run(
        [sys.executable, "-m", "compat.cli.main", *_slow(tmp_path, out,
         "h.npz" if other_input else "g.npz")[2:]],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert second.returncode == 6, second.stderr
    assert second.stderr.splitlines() == [
        f"error: --out {out}: another backfill (pid {first.pid}) is writing it; wait for it to "
        "finish, or choose another --out"
    ]
    assert set(saved) <= {p.name for p in work.iterdir()}  # the first's batches are untouched
    assert first.poll() is None, "the first backfill did not hold its output while checked"
    release.touch()
    assert first.wait(timeout=120) == 0, first.stderr.read().decode()[-2000:]
    assert json.loads(first.stdout.read())["upgraded"] == 200
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.npz", "h.npz", "models", "out"]
    assert len(load_gallery(out)) == 200


def test_an_out_in_a_folder_yet_to_be_made_is_written(psi_and_gallery):
    root = psi_and_gallery[0]
    assert _run(root, out=root / "new" / "deeper" / "g2.npz").upgraded == 50
    assert sorted(p.name for p in (root / "new" / "deeper").iterdir()) == ["g2.npz"]


def test_a_held_lock_is_a_conflict_in_process(psi_and_gallery):
    root = psi_and_gallery[0]
    out = root / "g2.npz"
    with OutLock(out):
        with pytest.raises(ConflictError, match=rf"pid {os.getpid()}\) is writing it"):
            _run(root)
        assert not work_dir_for(out).exists()
    assert not lock_path_for(out).exists()
    assert _run(root).upgraded == 50 and not lock_path_for(out).exists()


# -- a damaged saved batch is computed again (issue 31 item 3) -----------------------------------


def _interrupt_after(monkeypatch, batches: int) -> None:
    real = resume_mod.Parts.write
    calls = []

    def write(self, b, block, y):
        if len(calls) == batches:
            raise KeyboardInterrupt  # as if killed while upgrading the next batch
        calls.append(b)
        real(self, b, block, y)

    monkeypatch.setattr(resume_mod.Parts, "write", write)


@pytest.mark.parametrize("damage", ["truncate", "flip-a-byte", "checksum-lost"])
@pytest.mark.parametrize("dst", ["g2.npz", "g2.npy", "g2"])
def test_a_damaged_saved_batch_is_computed_again_with_a_warning(
    psi_and_gallery, monkeypatch, dst, damage
):
    root = psi_and_gallery[0]
    ref = _run(root, out=root / f"ref-{dst}")
    assert ref.upgraded == 50
    out = root / dst
    with monkeypatch.context() as m:
        _interrupt_after(m, 3)
        with pytest.raises(KeyboardInterrupt):
            _run(root, out=out)
    work = work_dir_for(out)
    [batch] = [p for p in work.glob("batch-000001.*") if not p.name.endswith(".sha256")]
    data = batch.read_bytes()
    if damage == "truncate":
        batch.write_bytes(data[: len(data) // 2])
    elif damage == "flip-a-byte":
        batch.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    else:
        (work / f"{batch.name}.sha256").unlink()  # killed between the batch and its checksum
    said: list[str] = []
    res = _run(root, out=out, log=said.append)
    assert res.resumed_batches == 2 and res.upgraded == 50
    warned = [m for m in said if "warning" in m]
    if damage == "checksum-lost":
        assert warned == []  # an unfinished batch, not a damaged one
    else:
        assert warned == [
            f"backfill: warning: {batch}: a saved batch fails its sha256 (damaged on disk); "
            "computing it again"
        ]
    np.testing.assert_array_equal(
        load_gallery(out).embeddings, load_gallery(root / f"ref-{dst}").embeddings
    )
    assert not work.exists() and not lock_path_for(out).exists()
    if dst == "g2":  # the output folder holds the shards and the meta only
        assert sorted(p.name for p in out.iterdir()) == [
            "_compat.json", "batch-000000.parquet", "batch-000001.parquet",
            "batch-000002.parquet", "batch-000003.parquet",
        ]  # fmt: skip


# -- a full disk (issue 31 item 2), injected ---------------------------------------------------


def _enospc(*_a, **_k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("dst", ["g2.npz", "g2.npy", "g2"])
@pytest.mark.parametrize("when", ["a batch", "the output"])
def test_a_full_disk_is_one_storage_error_and_leaves_nothing(
    psi_and_gallery, monkeypatch, dst, when
):
    import compat.embeddings.bundle as bundle_mod
    import compat.embeddings.formats as formats_mod

    root = psi_and_gallery[0]
    before = _snapshot(root)
    calls = []
    if when == "a batch":
        real = formats_mod.write_shard if dst == "g2" else np.save

        def fill_up(*a, **k):
            calls.append(1)
            if len(calls) == 3:
                _enospc()
            real(*a, **k)

        if dst == "g2":
            monkeypatch.setattr(formats_mod, "write_shard", fill_up)
        else:
            monkeypatch.setattr(resume_mod.np, "save", fill_up)
        target = "batch-000002"
    else:
        target = {"g2.npz": "g2.npz", "g2.npy": "g2.npy", "g2": "_compat.json"}[dst]
        if dst == "g2.npz":
            monkeypatch.setattr(bundle_mod.np, "savez", _enospc)
        elif dst == "g2.npy":
            monkeypatch.setattr(formats_mod, "write_npy_header", _enospc)
        else:

            def meta_fills_up(folder, *_a):
                from compat.io import atomic_path

                with atomic_path(folder / "_compat.json") as tmp:
                    tmp.write_bytes(b"{")  # a part of it reached the disk
                    _enospc()

            monkeypatch.setattr(formats_mod, "write_dataset_meta", meta_fills_up)
    with pytest.raises(StorageError) as info:
        _run(root, out=root / dst)
    message = str(info.value)
    assert target in message and "no space left on the device (needs " in message
    assert " bytes)" in message and " free)" in message and "\n" not in message
    assert info.value.exit_code == 5
    assert _snapshot(root) == before  # no output, no work folder, no lock, no temporary


# -- a full disk, for real: a 2 MiB tmpfs (root only) -------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "compat.cli.main", *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip


@pytest.mark.timeout(300)
def test_a_real_full_disk_backfill_is_exit_5_in_one_line(tmp_path, kit, small_disk):
    disk = small_disk("2m")
    kit.make_psi(tmp_path / "models" / "v2" / "upgrade", in_dim=64, out_dim=64, hidden=16)
    kit.make_gallery(tmp_path / "g.npz", n=6000, d=64)  # 1.5 MiB of rows: 3 MiB with the batches
    base = ["backfill", "--gallery", str(tmp_path / "g.npz"), "--from", "v1", "--to", "v2",
            "--models", str(tmp_path / "models"), "--no-progress"]  # fmt: skip
    for out in ("g2.npz", "g2.npy"):  # refused before any work: the space is short already
        r = _cli(*base, "--out", str(disk / out))
        assert r.returncode == 5, r.stderr
        [line] = r.stderr.splitlines()
        assert line.startswith(f"error: {disk / out}: cannot write: no space left on the "
                               "device (the backfill needs about ")  # fmt: skip
        assert list(disk.iterdir()) == []
    # Parquet with long ids: the embeddings fit, the shards do not (found while writing)
    ids = [f"{i:08d}" + "x" * 400 for i in range(6000)]
    g = load_gallery(tmp_path / "g.npz")
    _shards(tmp_path / "long", type(g)(g.embeddings, g.labels, ids=ids, version="v1"), rows=6000)
    r = _cli(*base[:2], str(tmp_path / "long"), *base[3:], "--out", str(disk / "up"),
             "--batch-size", "1000")  # fmt: skip
    assert r.returncode == 5, r.stderr
    [line] = r.stderr.splitlines()
    assert line.startswith(f"error: {disk}/.up.backfill/batch-")
    assert ".parquet: cannot write: no space left on the device (needs " in line
    assert "Traceback" not in r.stderr
    assert list(disk.iterdir()) == []  # the work folder and the lock are gone
