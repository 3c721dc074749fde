"""Issue 13.7: embeddings of different widths meet by BCT's truncation (or zero padding).

``truncate`` must equal scoring the first d_old coordinates sliced by hand (then
L2-normalised: truncate first, normalise second), in the evaluate stage's matrix as in
``compat score``.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from compat.cli.main import app
from compat.embeddings.bundle import EmbeddingBundle, save_bundle
from compat.embeddings.dims import align_pair, fit_dim
from compat.evaluate.config import EvaluateConfig
from compat.evaluate.report import evaluate_chain


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_truncate_then_normalise_by_hand():
    x = np.array([[3.0, 4.0, 12.0], [1.0, 0.0, 1.0]], dtype=np.float32)
    new = _unit(x)  # stored normalised at 3 dims
    cut = fit_dim(new, 2, "truncate")
    # first 2 coordinates (3, 4) and (1, 0), then L2-normalised: (0.6, 0.8) and (1, 0)
    np.testing.assert_allclose(cut, [[0.6, 0.8], [1.0, 0.0]], atol=1e-6)
    np.testing.assert_allclose(fit_dim(new, 2, "truncate", normalize=False), new[:, :2])


def test_pad_appends_zeros_and_keeps_equal_widths():
    old = _unit(np.array([[1.0, 1.0]], dtype=np.float32))
    np.testing.assert_array_equal(fit_dim(old, 4, "pad"), [[old[0, 0], old[0, 1], 0.0, 0.0]])
    q, g = align_pair(old, old, None)
    assert q is old and g is old
    with pytest.raises(ValueError, match="no dim_mismatch"):
        align_pair(old, fit_dim(old, 4, "pad"), None)
    with pytest.raises(ValueError, match="unknown 'crop'"):
        align_pair(old, fit_dim(old, 4, "pad"), "crop")
    # pad: zeros on the narrow side; the score is the inner product with the first coordinates
    wide = _unit(np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32))
    q, g = align_pair(wide, old, "pad")
    assert q.shape == g.shape == (1, 4)
    assert (q @ g.T).item() == pytest.approx((wide[:, :2] @ old.T).item())


class _Eval(SimpleNamespace):
    pass


def _eval_set(classes: int = 12, per: int = 4):
    items, labels, query, gallery = [], [], [], []
    for c in range(classes):
        for i in range(per):
            (query if i < per // 2 else gallery).append(len(items))
            items.append(f"c{c}/{i}")
            labels.append(f"c{c}")
    pairs = [(k, k + 1, True) for k in range(0, len(items), per)]
    pairs += [(k, (k + per) % len(items), False) for k in range(0, len(items), per)]
    return _Eval(
        items=items, labels=labels, query=query, gallery=gallery, pairs=pairs,
        nonmated_classes=[], fingerprint="f" * 16,
    )  # fmt: skip


def test_evaluate_chain_truncate_equals_slicing_by_hand():
    """A 128 -> 256 pair: M(v2, v1) with truncate is M of v2's first 128 coordinates."""
    manifest = _eval_set()
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(12, 256))
    codes = np.array([int(lab[1:]) for lab in manifest.labels])
    v1 = _unit(centers[codes, :128] + 0.9 * rng.normal(size=(len(codes), 128)))
    v2 = _unit(centers[codes] + 0.7 * rng.normal(size=(len(codes), 256)))
    config = EvaluateConfig(chain=["v1", "v2"], bootstrap=0)
    report = evaluate_chain(manifest, {"v1": v1, "v2": v2}, config, dim_mismatch={"v2": "truncate"})
    by_hand = evaluate_chain(
        manifest, {"v1": v1, "v2": _unit(v2[:, :128])}, config, dim_mismatch={}
    )
    # Exact by construction: fit_dim re-normalises as _unit does (numpy's row norm of the same
    # 128 float32 values, then one division), so both matrices are one computation on one input.
    np.testing.assert_array_equal(fit_dim(v2, 128, "truncate"), _unit(v2[:, :128]))
    for protocol, metrics in by_hand["matrix"].items():
        for metric, rows in metrics.items():
            assert report["matrix"][protocol][metric]["v2"]["v1"] == rows["v2"]["v1"], metric
    assert report["aligned"] == [
        {"query": "v2", "gallery": "v1", "dim_mismatch": "truncate", "dims": [256, 128], "dim": 128}
    ]
    skipped = evaluate_chain(manifest, {"v1": v1, "v2": v2}, config)
    assert skipped["matrix"]["identification"]["top1"]["v2"].get("v1") is None
    assert "v2 declares no dim_mismatch" in skipped["skipped"][0]["reason"]


def _bundle(path, emb, labels):
    save_bundle(path, EmbeddingBundle(embeddings=emb, labels=labels))
    return str(path)


def test_score_truncate_equals_scoring_the_first_coordinates(tmp_path):
    rng = np.random.default_rng(1)
    labels = np.repeat(np.arange(10), 4)
    centers = rng.normal(size=(10, 16))
    old = centers[labels, :8] + 0.8 * rng.normal(size=(40, 8))
    new = centers[labels] + 0.6 * rng.normal(size=(40, 16))
    g = _bundle(tmp_path / "old.npz", old.astype(np.float32), labels)
    q = _bundle(tmp_path / "new.npz", new.astype(np.float32), labels)
    sliced = _bundle(tmp_path / "sliced.npz", new[:, :8].astype(np.float32), labels)
    runner = CliRunner()
    r = runner.invoke(app, ["score", "-q", q, "-g", g, "--json"])
    assert r.exit_code == 4 and "--dim-mismatch" in r.output
    r = runner.invoke(app, ["score", "-q", q, "-g", g, "--json", "--dim-mismatch", "truncate"])
    assert r.exit_code == 0, r.output
    by_hand = runner.invoke(app, ["score", "-q", sliced, "-g", g, "--json"])
    assert json.loads(r.stdout)["protocols"] == json.loads(by_hand.stdout)["protocols"]
    r = runner.invoke(app, ["score", "-q", q, "-g", g, "--json", "--dim-mismatch", "pad"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["score", "-q", q, "-g", g, "--dim-mismatch", "crop"])
    assert r.exit_code == 2


def test_a_128_to_256_pair_trained_with_bct_is_evaluated_by_truncation(tmp_path):
    """BCT's wider new model, trained for real (tiny backbone, one epoch): its card records
    ``dim_mismatch: truncate``, and the evaluate stage's M(v2, v1) is M of v2's first 128
    coordinates (re-normalised) against v1's gallery."""
    import torch

    from compat.models import load_version
    from compat.models.card import dim_mismatch
    from compat.train import DataInfo, TrainConfig, train_arrays

    rng = np.random.default_rng(0)
    classes, per = 6, 8
    patterns = rng.integers(0, 256, (classes, 8, 8, 1))
    images = np.clip(patterns.repeat(per, 0) + rng.normal(0, 25, (classes * per, 8, 8, 1)), 0, 255)
    images = images.astype(np.uint8)
    labels = [f"c{c}" for c in range(classes) for _ in range(per)]
    base = dict(backbone="tiny", batch_size=16, epochs=1, seed=1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for version, kw in (
            ("v1", {"dim": 128}),
            ("v2", {"dim": 256, "method": "bct", "parent": "v1", "seed": 2}),
        ):
            info = DataInfo(version, f"fp-{version}", "src", sorted(set(labels)))
            train_arrays(version, TrainConfig(**{**base, **kw}), images, labels, info,
                         models_dir=tmp_path, quiet=True, checkpoint_dir=tmp_path / "ck" / version)  # fmt: skip
        embedded, cards = {}, {}
        x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0
        for version in ("v1", "v2"):
            model, cards[version] = load_version(tmp_path / version)
            with torch.no_grad():
                embedded[version] = _unit(model(x).numpy())
    finally:
        torch.set_num_threads(threads)
    assert (cards["v1"].dim, cards["v2"].dim) == (128, 256)
    assert dim_mismatch(cards["v2"]) == "truncate"
    manifest = _eval_set(classes=classes, per=per)
    config = EvaluateConfig(chain=["v1", "v2"], bootstrap=0)
    modes = {v: dim_mismatch(c) for v, c in cards.items()}
    report = evaluate_chain(manifest, embedded, config, dim_mismatch=modes)
    by_hand = evaluate_chain(
        manifest, {"v1": embedded["v1"], "v2": _unit(embedded["v2"][:, :128])}, config
    )
    # the same rows bit for bit (as above), so the two matrices are one computation
    np.testing.assert_array_equal(
        fit_dim(embedded["v2"], 128, "truncate"), _unit(embedded["v2"][:, :128])
    )
    for protocol, metrics in by_hand["matrix"].items():
        for metric, rows in metrics.items():
            assert protocol == "open-set" or rows["v2"]["v1"] is not None  # no open classes here
            assert report["matrix"][protocol][metric]["v2"]["v1"] == rows["v2"]["v1"], metric
