"""Shared fixtures: a tiny embedded source and split, built once per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


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


@pytest.fixture()
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path
