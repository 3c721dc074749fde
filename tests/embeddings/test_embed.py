"""Embedding extraction and the embedding cache (a cache entry never serves another key)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from torch import nn

from compat.data.transforms import TRANSFORM_ID, to_tensor
from compat.embeddings.bundle import EmbeddingBundle, load_bundle, save_bundle
from compat.embeddings.embed import CacheKey, EmbeddingCache, cache_key, embed_images, embed_items
from compat.errors import BadInputError


def _model(d=5, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(4 * 4 * 1, d), nn.BatchNorm1d(d))


def _images(n=13, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, 4, 4, 1), dtype=np.uint8)


def test_embeddings_are_float32_unit_norm_and_batch_independent():
    model = _model()
    model.train()
    imgs = _images()
    a = embed_images(model, imgs, batch_size=4)
    b = embed_images(model, imgs, batch_size=100)
    assert a.shape == (13, 5) and a.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(a, b, atol=1e-6)  # eval mode: BatchNorm uses running stats
    assert model.training  # the caller's mode is restored
    with torch.no_grad():
        model.eval()
        ref = nn.functional.normalize(model(to_tensor(imgs)), dim=1).numpy()
    np.testing.assert_allclose(a, ref, atol=1e-6)


def test_each_layer_gets_its_own_mode_back():
    # a model training with its BatchNorm kept in eval mode (bn_stats: frozen) keeps it so
    model = _model().train()
    model[2].eval()
    embed_images(model, _images(), batch_size=4)
    assert [m.training for m in model.modules()] == [True, True, True, False]


def test_embed_items_reads_batches_through_the_loader():
    imgs = _images(10)
    ids = [f"x{i}" for i in range(10)]
    calls = []

    def load(batch):
        calls.append(list(batch))
        return imgs[[int(i[1:]) for i in batch]]

    out = embed_items(_model(), load, ids, batch_size=4)
    assert [len(c) for c in calls] == [4, 4, 2]
    np.testing.assert_allclose(out, embed_images(_model(), imgs), atol=1e-6)


def test_bad_images_and_bad_model_outputs():
    with pytest.raises(BadInputError, match="images: expected uint8"):
        embed_images(_model(), np.zeros((2, 4, 4, 1), np.float32))
    with pytest.raises(BadInputError, match="images: empty"):
        embed_images(_model(), np.zeros((0, 4, 4, 1), np.uint8))

    class NaNModel(nn.Module):
        def forward(self, x):
            return torch.full((x.shape[0], 3), float("nan"))

    with pytest.raises(BadInputError, match=r"NaN or inf for rows 0\.\.1"):
        embed_images(NaNModel(), _images(2))

    class Flat(nn.Module):
        def forward(self, x):
            return x.sum()

    with pytest.raises(BadInputError, match=r"expected shape \(2, d\)"):
        embed_images(Flat(), _images(2))


# -------------------------------------------------------------------------- cache


def _bundle(seed=0, ids=("a", "b", "c")):
    rng = np.random.default_rng(seed)
    return EmbeddingBundle(
        rng.standard_normal((len(ids), 4)), np.arange(len(ids)), ids=list(ids), version="v1"
    )


def test_cache_key_names_the_transform():
    key = cache_key("ab" * 32, "fp")
    assert key == CacheKey("ab" * 32, "fp", TRANSFORM_ID)
    assert key.digest() != CacheKey("ab" * 32, "fp", "other-transform").digest()


def test_cache_round_trip_and_get_or_compute(tmp_path):
    cache = EmbeddingCache(tmp_path)
    key = CacheKey("w1", "d1", "t1")
    assert cache.get(key) is None
    calls = []

    def compute():
        calls.append(1)
        return _bundle()

    first, hit1 = cache.get_or_compute(key, compute, ids=["a", "b", "c"])
    second, hit2 = cache.get_or_compute(key, compute, ids=["a", "b", "c"])
    assert (hit1, hit2, len(calls)) == (False, True, 1)
    np.testing.assert_array_equal(first.embeddings, second.embeddings)
    assert second.meta["cache_key"] == {
        "weights_sha256": "w1",
        "data_fingerprint": "d1",
        "transform_id": "t1",
        "embedder": "conv-bn-folded",
    }
    assert second.version == "v1"


def test_a_cache_that_cannot_be_written_is_a_warning_not_a_traceback(tmp_path, caplog):
    """A --cache that is a file (issue 45 item 5): the embeddings stand, uncached."""
    (tmp_path / "afile").write_text("mine")
    cache = EmbeddingCache(tmp_path / "afile")
    got, hit = cache.get_or_compute(CacheKey("w1", "d1", "t1"), _bundle, ids=["a", "b", "c"])
    assert not hit and got.embeddings.shape[0] == 3
    assert "cannot cache" in caplog.text and (tmp_path / "afile").read_text() == "mine"


@pytest.mark.parametrize(
    "other", [CacheKey("w2", "d1", "t1"), CacheKey("w1", "d2", "t1"), CacheKey("w1", "d1", "t2")]
)
def test_entry_copied_to_another_keys_path_is_never_used(tmp_path, other):
    cache = EmbeddingCache(tmp_path)
    key = CacheKey("w1", "d1", "t1")
    cache.put(key, _bundle())
    shutil.copy(cache.path(key), cache.path(other))  # e.g. renamed or stale file
    assert cache.get(other) is None
    assert cache.get(key) is not None
    # get_or_compute recomputes and overwrites the bad entry.
    _fresh, hit = cache.get_or_compute(other, lambda: _bundle(seed=9))
    assert not hit and cache.get(other).meta["cache_key"]["weights_sha256"] == other.weights_sha256


def test_tampered_entries_are_misses(tmp_path):
    cache = EmbeddingCache(tmp_path)
    key = CacheKey("w1", "d1", "t1")
    stored = cache.put(key, _bundle())
    # Edited embeddings, key metadata intact: the content digest no longer matches.
    edited = EmbeddingBundle(
        stored.embeddings + 1, stored.labels, ids=stored.ids, meta=dict(stored.meta)
    )
    save_bundle(cache.path(key), edited)
    assert cache.get(key) is None
    # Key metadata rewritten to claim another key's identity: still a miss for that key.
    forged = dict(stored.meta, cache_key={"weights_sha256": "w1", "data_fingerprint": "d1"})
    save_bundle(cache.path(key), EmbeddingBundle(stored.embeddings, stored.labels, meta=forged))
    assert cache.get(key) is None
    # Garbage bytes.
    cache.path(key).write_bytes(b"garbage")
    assert cache.get(key) is None
    # A valid entry for different items.
    cache.put(key, _bundle())
    assert cache.get(key, ids=["a", "b", "c"]) is not None
    assert cache.get(key, ids=["a", "b", "x"]) is None


def test_compute_for_other_items_is_refused(tmp_path):
    cache = EmbeddingCache(tmp_path)
    with pytest.raises(ValueError, match="other items"):
        cache.get_or_compute(CacheKey("w", "d", "t"), _bundle, ids=["z"])


def test_cache_files_are_plain_bundles(tmp_path):
    cache = EmbeddingCache(tmp_path)
    key = CacheKey("w1", "d1", "t1")
    cache.put(key, _bundle())
    assert load_bundle(cache.path(key)).ids == ["a", "b", "c"]


def _bn_model():
    """A small-cnn with BatchNorm statistics and affine weights that are not the identity, so a
    wrong fold would show."""
    from compat.models import build_embedding_model

    torch.manual_seed(3)
    model = build_embedding_model("small-cnn", 16, in_channels=1, image_size=16)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d | nn.BatchNorm1d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    return model


def test_inference_model_folds_batchnorm_into_the_convolutions():
    from compat.embeddings.embed import inference_model

    model = _bn_model().train()
    folded = inference_model(model)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in folded.modules())
    assert any(isinstance(m, nn.BatchNorm2d) for m in model.modules())  # the caller's model
    assert model.training and not folded.training
    x = to_tensor(np.random.default_rng(0).integers(0, 256, (9, 16, 16, 1), dtype=np.uint8))
    with torch.inference_mode():
        model.eval()
        np.testing.assert_allclose(folded(x).numpy(), model(x).numpy(), rtol=1e-4, atol=1e-5)


def test_embeddings_through_the_folded_model_match_the_plain_forward():
    """The fast path against the slow one: embed_images (folded) against the model's own
    eval-mode forward, normalised."""
    model = _bn_model()
    imgs = np.random.default_rng(1).integers(0, 256, (37, 16, 16, 1), dtype=np.uint8)
    fast = embed_images(model, imgs, batch_size=8)
    slow = embed_images(model, imgs, batch_size=8, fold=False)
    with torch.inference_mode():
        model.eval()
        ref = nn.functional.normalize(model(to_tensor(imgs)), dim=1).numpy()
    np.testing.assert_allclose(slow, ref, atol=1e-6)
    np.testing.assert_allclose(fast, ref, atol=1e-5)


class _Untraceable(nn.Module):
    """Data-dependent control flow: torch.fx cannot trace it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, padding=1)
        self.bn = nn.BatchNorm2d(2)  # a pair to fold, so tracing is tried (and fails)

    def forward(self, x):
        x = self.bn(self.conv(x)).flatten(1)
        return x if bool(x.sum() > 0) else -x


def test_a_model_fx_cannot_trace_runs_as_it_is():
    from compat.embeddings.embed import inference_model

    model = _Untraceable()
    assert inference_model(model) is model
    imgs = _images()
    np.testing.assert_array_equal(embed_images(model, imgs), embed_images(model, imgs, fold=False))


def test_the_cache_key_names_how_embeddings_were_computed():
    from compat.embeddings.cache import EMBEDDER_ID

    key = cache_key("ab" * 32, "fp")
    assert key.embedder == EMBEDDER_ID
    older = CacheKey("ab" * 32, "fp", TRANSFORM_ID, "unfolded")
    assert key.digest() != older.digest()  # an entry computed the old way is a miss
