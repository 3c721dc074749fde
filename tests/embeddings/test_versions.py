"""Embedding versions through the cache: one lookup per version, the model only on a miss."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from compat.embeddings.cache import EmbeddingCache
from compat.embeddings.versions import data_fingerprint, embed_versions
from compat.errors import BadInputError


class _Pixel(nn.Module):
    def forward(self, x):
        return x.flatten(1)[:, :3] + torch.tensor([0.0, 0.0, 2.0])


def test_embed_versions_caches_by_weights_and_loads_only_on_a_miss(tmp_path, monkeypatch):
    items = [f"i{k}" for k in range(5)]
    images = np.arange(5 * 4 * 3, dtype=np.uint8).reshape(5, 2, 2, 3)
    manifest = SimpleNamespace(items=items)
    labels = np.array([0, 0, 1, 1, 2], dtype=np.int64)
    loaded: list[str] = []

    def load_model(v):
        loaded.append(v)
        return _Pixel()

    cache = EmbeddingCache(tmp_path)
    gets: list[object] = []
    real_get = cache.get
    monkeypatch.setattr(cache, "get", lambda key, **kw: gets.append(key) or real_get(key, **kw))
    fp = data_fingerprint("src", "eval")
    said: list[str] = []
    args = (manifest, labels, lambda ids: images[[items.index(i) for i in ids]], fp, load_model)
    out = embed_versions({"a": "sha-a", "b": "sha-b"}, *args, cache, report=said.append)
    assert loaded == ["a", "b"] and len(gets) == 2  # one lookup per version
    assert out["a"].shape == (5, 3) and np.allclose(np.linalg.norm(out["a"], axis=1), 1)
    assert said[0] == "evaluate: a: embedded (5, 3)"
    loaded.clear()
    again = embed_versions({"a": "sha-a"}, *args, cache, report=said.append, what="promote")
    assert loaded == [] and np.array_equal(again["a"], out["a"])
    assert said[-1] == "promote: a: cached (5, 3)"
    assert cache.get(next(iter(gets)), ids=items).labels.tolist() == labels.tolist()
    with pytest.raises(BadInputError, match="c: card: weights_sha256: missing or empty"):
        embed_versions({"c": ""}, *args, cache)


def test_data_fingerprint_depends_on_pixels_and_items():
    assert data_fingerprint("s", "m") == data_fingerprint("s", "m")
    assert (
        len({data_fingerprint("s", "m"), data_fingerprint("s2", "m"), data_fingerprint("s", "m2")})
        == 3
    )
