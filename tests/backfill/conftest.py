"""Tiny versions, upgrade modules and galleries for the backfill tests (no training needed:
psi and the checks only care about shapes, versions and digests)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from compat.embeddings.bundle import EmbeddingBundle, save_bundle
from compat.maps.psi import UpgradeModule, save_upgrade


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def trained_bn(psi: UpgradeModule, in_dim: int, seed: int = 0) -> UpgradeModule:
    """Give every BatchNorm non-trivial running statistics (a fresh one is the identity)."""
    g = torch.Generator().manual_seed(seed)
    psi.train()
    with torch.no_grad():
        for _ in range(5):
            psi(torch.randn(64, in_dim, generator=g) * 2 + 0.5)
    return psi.eval()


def make_psi(
    folder: Path,
    source: str = "v1",
    target: str = "v2",
    in_dim: int = 8,
    out_dim: int = 8,
    hidden: int = 16,
    seed: int = 0,
    from_sha: str = "a" * 64,
    to_sha: str = "b" * 64,
) -> tuple[UpgradeModule, dict]:
    torch.manual_seed(seed)
    psi = trained_bn(UpgradeModule(in_dim, out_dim, hidden), in_dim, seed)
    card = save_upgrade(
        folder,
        psi,
        {
            "from": source,
            "to": target,
            "from_weights_sha256": from_sha,
            "to_weights_sha256": to_sha,
            "loss": "mse",
            "data_fingerprint": "d" * 16,
        },
    )
    return psi, card


def make_gallery(
    path: Path,
    n: int = 50,
    d: int = 8,
    version: str | None = "v1",
    row_versions: list[str] | None = None,
    seed: int = 0,
    meta: dict | None = None,
) -> EmbeddingBundle:
    rng = np.random.default_rng(seed)
    bundle = EmbeddingBundle(
        embeddings=unit(rng.standard_normal((n, d))),
        labels=np.arange(n) % 7,
        ids=[f"item{i}" for i in range(n)],
        version=version,
        fingerprint="f" * 16,
        row_versions=row_versions,
        meta=meta or {},
    )
    save_bundle(path, bundle)
    return bundle


@pytest.fixture()
def psi_and_gallery(tmp_path: Path):
    psi, card = make_psi(tmp_path / "models" / "v2" / "upgrade")
    bundle = make_gallery(tmp_path / "g.npz")
    return tmp_path, psi, card, bundle


@pytest.fixture()
def kit():
    """The helpers above, for test modules (conftest is not importable under importlib mode)."""
    from types import SimpleNamespace

    return SimpleNamespace(
        unit=unit, trained_bn=trained_bn, make_psi=make_psi, make_gallery=make_gallery
    )


@pytest.fixture(scope="module")
def local_ray():
    """A real local Ray runtime (one CPU) for a module's engine tests (tests/backfill/test_ray.py,
    test_table_ray.py; both slow: starting Ray and its workers takes 30-90 s on a busy host)."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield
    ray.shutdown()
