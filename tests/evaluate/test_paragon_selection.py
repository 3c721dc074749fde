"""Issue 13.4: each version's update gain is measured against its own paragon."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from compat.evaluate.config import EvaluateConfig
from compat.evaluate.report import evaluate_chain


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _eval_set(classes: int, per: int) -> SimpleNamespace:
    items = [f"c{c}/{i}" for c in range(classes) for i in range(per)]
    labels = [item.split("/")[0] for item in items]
    query = [k for k in range(len(items)) if k % per < per // 2]
    gallery = [k for k in range(len(items)) if k % per >= per // 2]
    return SimpleNamespace(
        items=items, labels=labels, query=query, gallery=gallery, pairs=[],
        nonmated_classes=[], fingerprint="f" * 16,
    )  # fmt: skip


def test_each_version_gain_uses_its_own_paragon():
    manifest = _eval_set(classes=12, per=4)
    rng = np.random.default_rng(3)
    centers = rng.normal(size=(12, 16))
    codes = np.array([int(lab[1:]) for lab in manifest.labels])

    def version(noise: float, seed: int) -> np.ndarray:
        r = np.random.default_rng(seed)
        return _unit(centers[codes] + noise * r.normal(size=(len(codes), 16)))

    embeddings = {
        "v1": version(1.6, 1), "v2": version(1.2, 2), "v3": version(0.9, 3),
        "v2p": version(1.0, 4), "v3p": version(0.6, 5),
    }  # fmt: skip
    config = EvaluateConfig(
        chain=["v1", "v2", "v3"], paragon={"v2": "v2p", "v3": "v3p"}, bootstrap=0,
        protocols=["identification"],
    )  # fmt: skip
    report = evaluate_chain(manifest, embeddings, config)
    m = report["matrix"]["identification"]["top1"]
    gain = report["gain"]["identification"]["top1"]
    assert m["v2p"]["v2p"] != m["v3p"]["v3p"]  # the two paragons differ, so the choice shows
    for new, old, paragon in (("v2", "v1", "v2p"), ("v3", "v2", "v3p"), ("v3", "v1", "v3p")):
        expected = (m[new][old] - m[old][old]) / (m[paragon][paragon] - m[old][old])  # BCT Eq. 9
        assert gain[new][old]["paragon"] == paragon
        assert gain[new][old]["value"] == pytest.approx(expected)
