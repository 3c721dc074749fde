"""Disk cache of evaluation-set embeddings, keyed by what they depend on.

An entry is valid only for the exact key it was made for: the model's weights (sha256), the
data that was embedded (fingerprint), the image -> tensor transform (``TRANSFORM_ID``) and how
the model runs (``EMBEDDER_ID``). The file name is a digest of the key, but the name is never
trusted: the key is stored inside the entry and compared on every read, together with a digest
of the stored arrays, so a copied, renamed, stale or edited file is treated as a miss and
recomputed, never used.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from compat.embeddings.bundle import EmbeddingBundle, load_bundle, save_bundle
from compat.errors import CompatError, StorageError

log = logging.getLogger(__name__)


# How a model computes embeddings (compat.embeddings.embed.inference_model): part of every key,
# so entries computed another way (before BatchNorm was folded into the convolutions: other last
# bits) are misses, never mixed with new ones.
EMBEDDER_ID = "conv-bn-folded"


@dataclass(frozen=True)
class CacheKey:
    weights_sha256: str
    data_fingerprint: str
    transform_id: str
    embedder: str = EMBEDDER_ID

    def as_dict(self) -> dict[str, str]:
        return asdict(self)

    def digest(self) -> str:
        blob = json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()[:32]


def cache_key(weights_sha256: str, data_fingerprint: str) -> CacheKey:
    """The cache key of a model's embeddings of a dataset under the current transform
    (torch-free: a gate on cached embeddings needs the key, never the model)."""
    from compat.data.transforms import TRANSFORM_ID

    return CacheKey(weights_sha256, data_fingerprint, TRANSFORM_ID)


def content_digest(embeddings: np.ndarray, labels: np.ndarray) -> str:
    """sha256 over shapes and bytes of the arrays an entry serves."""
    h = hashlib.sha256()
    for arr in (
        np.ascontiguousarray(embeddings, np.float32),
        np.ascontiguousarray(labels, np.int64),
    ):
        h.update(repr(arr.shape).encode())
        h.update(arr.tobytes())
    return h.hexdigest()


class EmbeddingCache:
    """``root/<digest of key>.npz`` bundles carrying their key and a content digest in ``meta``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def path(self, key: CacheKey) -> Path:
        return self.root / f"{key.digest()}.npz"

    def get(self, key: CacheKey, *, ids: Sequence[str] | None = None) -> EmbeddingBundle | None:
        """The entry for ``key`` (and, if given, exactly these item ``ids``), else None."""
        path = self.path(key)
        if not path.is_file():
            return None
        try:
            bundle = load_bundle(path)
        except CompatError as err:
            log.warning("ignoring unreadable embedding cache entry %s: %s", path, err)
            return None
        problem = self._mismatch(bundle, key, ids)
        if problem:
            log.warning("ignoring embedding cache entry %s: %s", path, problem)
            return None
        return bundle

    @staticmethod
    def _mismatch(bundle: EmbeddingBundle, key: CacheKey, ids: Sequence[str] | None) -> str | None:
        stored = bundle.meta.get("cache_key")
        if stored != key.as_dict():
            return f"made for key {stored}, not {key.as_dict()}"
        if bundle.meta.get("content_sha256") != content_digest(bundle.embeddings, bundle.labels):
            return "content digest does not match (file changed after it was written)"
        if ids is not None and (bundle.ids is None or list(bundle.ids) != list(ids)):
            return "holds a different list of items"
        return None

    def put(self, key: CacheKey, bundle: EmbeddingBundle) -> EmbeddingBundle:
        """Store ``bundle`` under ``key`` (atomically); return it with the key in ``meta``."""
        meta = {
            **bundle.meta,
            "cache_key": key.as_dict(),
            "content_sha256": content_digest(bundle.embeddings, bundle.labels),
        }
        stored = replace(bundle, meta=meta)
        try:
            save_bundle(self.path(key), stored)
        except StorageError as err:  # a full disk: the result stands, uncached
            log.warning("warning: %s; going on without caching it", err)
        except OSError as err:  # a cache root that is a file, unwritable: the same
            why = " ".join(str(err.strerror or err).split())
            log.warning("warning: %s: cannot cache (%s); going on without it", self.path(key), why)
        return stored

    def get_or_compute(
        self,
        key: CacheKey,
        compute: Callable[[], EmbeddingBundle],
        *,
        ids: Sequence[str] | None = None,
    ) -> tuple[EmbeddingBundle, bool]:
        """``(bundle, hit)``: the cached entry, or ``compute()`` stored under ``key``."""
        cached = self.get(key, ids=ids)
        if cached is not None:
            return cached, True
        bundle = compute()
        if ids is not None and list(bundle.ids or []) != list(ids):
            raise ValueError("compute() returned embeddings of other items than requested")
        return self.put(key, bundle), False
