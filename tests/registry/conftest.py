"""A tiny project for registry tests: an evaluation manifest, contracts and embedding bundles.

Versions are registered from embeddings bundles (the path for teams that train elsewhere), so
these tests need no training. The MLflow schema is created once per session and copied.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from compat.embeddings.bundle import EmbeddingBundle, save_bundle

sys.path.insert(0, str(Path(__file__).resolve().parent))  # pgserver, a helper module

DIM = 16
CLASSES = 40
PER_CLASS = 6


def contract(
    version: str,
    parent: str | None = None,
    dim: int = DIM,
    transitive: tuple[str, ...] = (),
    paragon: str | None = None,
    confidence: float | None = 0.95,
) -> str:
    lines = [f"version: {version}", f"embedding_dim: {dim}", "head: cosface"]
    if parent:
        lines += [
            f"parent: {parent}",
            "criteria:",
            "  - protocol: identification",
            "    metric: top1",
            "    require: cross > self_parent",
        ]
        if confidence:
            lines.append(f"    confidence: {confidence}")
        lines += [
            "  - protocol: verification",
            "    metric: tar@far=0.1",
            "    require: cross > self_parent",
        ]
    if transitive:
        lines.append(f"transitive: [{', '.join(transitive)}]")
    if paragon:
        lines.append(f"paragon: {paragon}")
    return "\n".join(lines) + "\n"


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        rng = np.random.default_rng(0)
        self.centers = rng.normal(size=(CLASSES, DIM))
        items, labels, query, gallery = [], [], [], []
        for c in range(CLASSES):
            for i in range(PER_CLASS):
                (query if i < PER_CLASS // 2 else gallery).append(len(items))
                items.append(f"c{c:02d}/{i}")
                labels.append(f"c{c:02d}")
        self.items, self.labels = items, labels
        pairs = sorted(
            {(a, a + 1, True) for a in range(0, len(items), PER_CLASS)}
            | {(a, a + PER_CLASS, False) for a in range(0, len(items) - PER_CLASS, PER_CLASS)}
        )
        manifest = {
            "fingerprint": "f" * 16,
            "source_fingerprint": "s" * 16,
            "items": items,
            "labels": labels,
            "query": query,
            "gallery": gallery,
            "nonmated_classes": [],
            "pairs": [list(p) for p in pairs],
        }
        (root / "splits").mkdir()
        (root / "splits" / "eval.json").write_text(json.dumps(manifest))
        (root / "contracts").mkdir()
        (root / "bundles").mkdir()
        self.codes = np.array([int(lab[1:]) for lab in labels])

    def embeddings(self, noise: float, seed: int, rotate: bool = False) -> np.ndarray:
        rng = np.random.default_rng(seed)
        x = self.centers[self.codes] + noise * rng.normal(size=(len(self.items), DIM))
        if rotate:
            q, _ = np.linalg.qr(np.random.default_rng(99).normal(size=(DIM, DIM)))
            x = x @ q
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    def bundle(self, version: str, emb: np.ndarray) -> Path:
        path = self.root / "bundles" / f"{version}.npz"
        save_bundle(
            path,
            EmbeddingBundle(
                embeddings=emb, labels=self.codes, ids=list(self.items), version=version
            ),
        )
        return path

    def contract(self, version: str, **kw) -> Path:
        path = self.root / "contracts" / f"{version}.yaml"
        path.write_text(contract(version, **kw))
        return path

    def register(
        self, version: str, parent: str | None = None, noise: float = 0.8, seed: int = 2
    ) -> None:
        """Write ``version``'s contract and bundle and register it through the CLI (exit 0)."""
        from typer.testing import CliRunner

        from compat.cli.main import app

        self.contract(version, parent=parent)
        bundle = self.bundle(version, self.embeddings(noise, seed))
        r = CliRunner().invoke(app, ["register", version, "--embeddings", str(bundle)])
        assert r.exit_code == 0, r.output


@pytest.fixture(scope="session")
def registry_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A registry folder whose MLflow schema already exists (creating it takes seconds)."""
    from compat.registry.store import Registry

    root = tmp_path_factory.mktemp("registry-template") / "registry"
    Registry(root=root).versions()
    return root


@pytest.fixture()
def project(tmp_path: Path, registry_template: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    shutil.copytree(registry_template, tmp_path / "registry")
    p = Project(tmp_path)
    return p


@pytest.fixture(scope="module")
def shared_server() -> Iterator[object]:
    """A real PostgreSQL and a real ``mlflow server`` on it, one per test module."""
    from pgserver import Shared, skip_reason

    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    shared = Shared()
    try:
        yield shared
    finally:
        shared.stop()


@pytest.fixture(autouse=True)
def _no_registry_from_the_environment(monkeypatch):
    """Each test starts with no registry named by the environment. MLflow's fluent API (the
    pyfunc loader, artifact downloads) can leave ``MLFLOW_TRACKING_URI`` naming an earlier
    test's store in this process; a test that wants a server sets these itself (``shared``)."""
    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "COMPAT_REGISTRY_DATABASE",
                "COMPAT_LOCAL_LOCK"):  # fmt: skip
        monkeypatch.delenv(key, raising=False)
