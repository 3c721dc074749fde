"""Shared fixtures: a tiny embedded source and split, built once per test session."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# Under pytest-xdist each worker gets its share of the cores for torch and BLAS (set before
# either is imported, and inherited by the processes tests start): N workers each running
# threads for every core would oversubscribe the machine.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    share = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, str(share))


@pytest.fixture(scope="session")
def tiny_source(tmp_path_factory: pytest.TempPathFactory):
    """40 kanji classes x 6 images at 16 px, rendered into a temporary data folder."""
    from compat.data.config import EmbeddedData
    from compat.data.sources import build_source

    root = tmp_path_factory.mktemp("tiny-data")
    params = EmbeddedData(
        classes=40, images_per_class=6, size=16, workers=1, cache=str(root / "cache")
    )
    return build_source(params, root / "data")


def one_line_error(r, code: int, *words: str) -> str:
    """A CLI result (typer's runner) that failed as the project promises bad input fails: exit
    ``code``, no traceback, exactly one stderr line, ``error: ...``, holding each of ``words``;
    returns that line."""
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("error: "), line
    for w in words:
        assert w in line, line
    return line


@pytest.fixture()
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


HEAVY = ("torch", "faiss", "sklearn", "mlflow")


@pytest.fixture()
def heavy_imports() -> Callable[..., list[str]]:
    """``heavy_imports("compat.x", ...)``: which of ``heavy`` (default: torch, faiss, sklearn,
    mlflow) importing those modules in a fresh interpreter loads; [] for an import-light module."""

    def loaded(*modules: str, heavy: tuple[str, ...] = HEAVY) -> list[str]:
        code = (
            f"import sys; import {', '.join(modules)}; "
            f"print(','.join(m for m in {heavy!r} if m in sys.modules))"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        return [m for m in out.stdout.strip().split(",") if m]

    return loaded


@pytest.fixture()
def small_disk(tmp_path: Path):
    """``small_disk(size="2m")``: a fresh tmpfs of that size under ``tmp_path`` (a real full disk:
    ENOSPC from the kernel); skips where mounting is not allowed (not root, no CAP_SYS_ADMIN)."""
    mounted: list[Path] = []

    def mount(size: str = "2m") -> Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        mnt = tmp_path / f"disk{len(mounted)}"
        mnt.mkdir()
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
        mounted.append(mnt)
        return mnt

    yield mount
    for mnt in mounted:
        subprocess.run(["umount", str(mnt)], check=False)


def tiny_folder_split(root: Path, items: int = 48, classes: int = 8):
    """A folder source of ``items`` random 8 px grey images in ``classes`` classes under
    ``root/imgs`` (data stage output in ``root/data``) and the training split
    ``root/splits/v2.json`` holding all of them; returns that split (a ``TrainManifest``)."""
    import numpy as np
    from PIL import Image

    from compat.data.config import FolderData
    from compat.data.sources import build_source
    from compat.data.split import TrainManifest
    from compat.io import fingerprint, write_json

    rng = np.random.default_rng(0)
    names, labels = [], []
    for k in range(items):
        lab = f"c{k % classes}"
        path = root / "imgs" / lab / f"{k:03d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(path)
        names.append(f"{lab}/{k:03d}.png")
        labels.append(lab)
    source = build_source(FolderData(kind="folder", root=str(root / "imgs"), size=8), root / "data")
    body = {"name": "v2", "scenario": "test", "source_fingerprint": source.fingerprint,
            "classes": sorted(set(labels)), "items": names, "labels": labels}  # fmt: skip
    manifest = TrainManifest(**body, fingerprint=fingerprint(body))
    write_json(root / "splits" / "v2.json", manifest.model_dump())
    return manifest
