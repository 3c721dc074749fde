"""Nothing a user wrote is ever deleted (issue 45): every command that writes an output goes
through compat's one checked-output path (:mod:`compat.outputs`). For each writing command a
foreign file sits in its output folder and survives, byte for byte; an output path holding
something compat did not write is refused (exit 2) and left as it was; a path that cannot hold
the output is exit 2, a read-only file system exit 5, each in one line, before any work."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from compat.cli.main import app
from compat.embeddings.bundle import EmbeddingBundle, save_bundle
from tests.conftest import tiny_folder_split

runner = CliRunner()
FOREIGN = {"notes.txt": b"mine", "theirs.parquet": b"PAR1 not ours", "user.npz": b"PK user"}


def _cli(*args):
    return runner.invoke(app, [str(a) for a in args])


def _foreign(folder: Path) -> dict[str, bytes]:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in FOREIGN.items():
        (folder / name).write_bytes(data)
    return dict(FOREIGN)


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def _kept(folder: Path) -> None:
    for name, data in FOREIGN.items():
        assert (folder / name).read_bytes() == data, name


def _refused(r, code: int = 2, *words: str) -> None:
    assert r.exit_code == code, r.output
    line = r.stderr.strip()
    assert line.startswith("error: ") and "\n" not in line and "Traceback" not in r.output
    for w in words:
        assert w in line, line


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """Models v1 (6-dim) and v2 (8-dim), a folder source of 24 images, splits/v2.json."""
    import torch

    from compat.models.embedding import build_embedding_model
    from compat.models.version import save_version

    root = tmp_path_factory.mktemp("foreign")
    tiny_folder_split(root, 24, 4)
    for seed, (version, dim) in enumerate([("v1", 6), ("v2", 8)]):
        torch.manual_seed(seed)
        model = build_embedding_model("tiny", dim, in_channels=1, image_size=8)
        save_version(root / "models" / version, model, None,
                     {"version": version, "backbone": "tiny", "dim": dim, "in_channels": 1,
                      "image_size": 8, "pooling": "avg"})  # fmt: skip
    return root


@pytest.fixture()
def here(project, monkeypatch):
    monkeypatch.chdir(project)
    return project


@pytest.mark.parametrize("name", ["g.npz", "g.npy", "g_parquet"])
def test_embed_keeps_what_it_did_not_write(here, name):
    d = here / f"D-{name.replace('.', '-')}"
    _foreign(d)
    r = _cli("embed", "v2", "--split", "v2", "--out", d / name, "--quiet")
    assert r.exit_code == 0, r.output
    _kept(d)
    assert _cli("embed", "v2", "--split", "v2", "--out", d / name, "--quiet").exit_code == 0
    _kept(d)  # its own output replaced, the rest untouched
    before = _snapshot(here)
    # the folder itself (issue 45: --out <existing folder> deleted every *.parquet), '.'
    _refused(_cli("embed", "v2", "--split", "v2", "--out", d), 2, "notes.txt")
    _refused(_cli("embed", "v2", "--split", "v2", "--out", "."), 2, "compat replaces only")
    # a file there no compat command wrote
    np.savez(d / "theirs.npz", embeddings=np.eye(3, dtype=np.float32), labels=np.arange(3))
    before = _snapshot(here)
    _refused(_cli("embed", "v2", "--split", "v2", "--out", d / "theirs.npz"), 2, "theirs.npz")
    assert _snapshot(here) == before


def test_adapt_keeps_what_it_did_not_write(here):
    d = here / "D-adapt"
    _foreign(d)
    args = ["adapt", "--new-version", "v2", "--old-version", "v1", "--split", "v2", "--kind",
            "affine", "--val-fraction", "0.5", "--allow-refused"]  # fmt: skip
    r = _cli(*args, "--out", d / "map")
    assert r.exit_code == 0, r.output
    _kept(d)
    assert sorted(p.name for p in (d / "map").iterdir()) == ["card.json", "weights.safetensors"]
    assert _cli(*args, "--out", d / "map").exit_code == 0  # a map folder is replaced whole
    before = _snapshot(here)
    _refused(_cli(*args, "--out", d), 2, "not a map's", "notes.txt")
    assert _snapshot(here) == before


@pytest.mark.parametrize("name", ["up.npz", "up.npy", "up_parquet"])
def test_backfill_keeps_what_it_did_not_write(tmp_path, monkeypatch, name):
    import torch

    from compat.maps.psi import UpgradeModule, save_upgrade

    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    save_upgrade(tmp_path / "models" / "v2" / "upgrade", UpgradeModule(8, 8, hidden=16).eval(),
                 {"from": "v1", "to": "v2", "loss": "mse"})  # fmt: skip
    x = np.random.default_rng(0).standard_normal((30, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    save_bundle(tmp_path / "g.npz", EmbeddingBundle(x, np.arange(30), version="v1"))
    d = tmp_path / "D"
    _foreign(d)
    base = ["backfill", "--gallery", "g.npz", "--from", "v1", "--to", "v2", "--no-progress"]
    r = _cli(*base, "--out", d / name)
    assert r.exit_code == 0, r.output
    _kept(d)
    before = _snapshot(tmp_path)
    _refused(_cli(*base, "--out", d), 2, "notes.txt")
    _refused(_cli(*base, "--out", d / "user.npz"), 2, "not a gallery compat backfill wrote")
    assert _snapshot(tmp_path) == before


def test_data_preview_keeps_what_it_did_not_write(tiny_source, tmp_path):
    source = Path(tiny_source.root) / "source.json"
    d = tmp_path / "D"
    _foreign(d)
    r = _cli("data", "preview", "--source", source, "--out", d / "p.png", "--classes", "2")
    assert r.exit_code == 0, r.output
    _kept(d)
    assert _cli("data", "preview", "--source", source, "--out", d / "p.png").exit_code == 0
    (d / "photo.png").write_bytes((d / "p.png").read_bytes()[:8] + b"a user's picture")
    before = _snapshot(tmp_path)
    _refused(_cli("data", "preview", "--source", source, "--out", d / "photo.png"), 2,
             "not a PNG compat data preview wrote")  # fmt: skip
    _refused(_cli("data", "preview", "--source", source, "--out", d / "notes.txt"), 2)
    _refused(_cli("data", "preview", "--source", source, "--out", d), 2, "a folder")
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("name", ["e.npz", "e_parquet"])
def test_data_import_and_export_keep_what_they_did_not_write(tmp_path, name):
    pytest.importorskip("lancedb")
    x = np.random.default_rng(0).standard_normal((20, 4)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    save_bundle(tmp_path / "g.npz", EmbeddingBundle(x, np.arange(20) % 3,
                                                    ids=[f"i{k}" for k in range(20)], version="v1"))  # fmt: skip
    db, d = tmp_path / "db", tmp_path / "D"
    _foreign(db)
    _foreign(d)
    r = _cli("data", "import", "--gallery", tmp_path / "g.npz", "--out", db / "g.lance")
    assert r.exit_code == 0, r.output
    _kept(db)
    r = _cli("data", "export", "--gallery", db / "g.lance", "--out", d / name)
    assert r.exit_code == 0, r.output
    _kept(d)
    assert _cli("data", "export", "--gallery", db / "g.lance", "--out", d / name).exit_code == 0
    before = _snapshot(tmp_path)
    _refused(_cli("data", "export", "--gallery", db / "g.lance", "--out", d), 2, "notes.txt")
    _refused(_cli("data", "export", "--gallery", db / "g.lance", "--out", d / "user.npz"), 2)
    assert _snapshot(tmp_path) == before


# ------------------------------------------------- places that cannot hold the output (item 5)


def test_unwritable_outputs_are_one_line_before_any_work(here):
    (here / "afile").write_text("x")
    (here / "d.npz").mkdir(exist_ok=True)
    (here / "s.meta.npz").mkdir(exist_ok=True)
    embed = ["embed", "v2", "--split", "v2", "--quiet"]
    before = _snapshot(here)
    _refused(_cli(*embed, "--out", "afile/g.npz"), 2, "afile is a file, not a folder")
    _refused(_cli(*embed, "--out", "afile/g"), 2, "afile is a file, not a folder")
    _refused(_cli(*embed, "--out", "d.npz"), 2, "a folder; this output is a file")
    _refused(_cli(*embed, "--out", "s.npy"), 2, "s.meta.npz: a folder")
    _refused(_cli(*embed, "--out", "/proc/g.npz"), 2, "a kernel file system")
    _refused(_cli(*embed, "--out", "g.npz", "--cache", "afile"), 2, "--cache afile: a file")
    adapt = ["adapt", "--new-version", "v2", "--old-version", "v1", "--split", "v2", "--kind",
             "affine"]  # fmt: skip
    _refused(_cli(*adapt, "--out", "afile/m"), 2, "afile is a file, not a folder")
    _refused(_cli(*adapt, "--out", "afile"), 2, "a file; this output is a folder")
    _refused(_cli(*adapt, "--out", "m", "--cache", "afile"), 2, "--cache afile")
    assert _snapshot(here) == before


@pytest.fixture()
def read_only(tmp_path):
    """A read-only tmpfs under ``tmp_path`` (skips where mounting is not allowed)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "ro"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)  # fmt: skip
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.parametrize("name", ["g.npz", "g.npy", "g_parquet"])
def test_a_read_only_file_system_is_exit_5_for_every_format(here, read_only, name):
    r = _cli("embed", "v2", "--split", "v2", "--quiet", "--out", read_only / name)
    _refused(r, 5, "read-only file system")


@pytest.mark.parametrize("name", ["g.npz", "g.npy", "g_parquet"])
def test_a_full_disk_is_exit_5_and_leaves_nothing(here, small_disk, name):
    disk = small_disk("1m")
    with open(disk / "filler", "wb") as f:  # every byte taken
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    r = _cli("embed", "v2", "--split", "v2", "--quiet", "--out", disk / name)
    _refused(r, 5, "no space left on the device")
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]
