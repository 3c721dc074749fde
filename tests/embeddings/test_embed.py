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
    }
    assert second.version == "v1"


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
