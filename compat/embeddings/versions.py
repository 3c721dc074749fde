"""Embed model versions over a manifest through the embedding cache.

A version is named by its weights digest (``weights_sha256`` of its model card, or the
registry's ``compat.weights_sha256`` tag), so the cache is looked up once per version before
any model loads: ``load_model`` runs only on a miss. Evaluate's runner and promote's assembly
both embed through :func:`embed_versions`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from compat.embeddings.bundle import EmbeddingBundle
from compat.embeddings.cache import EmbeddingCache
from compat.errors import BadInputError
from compat.io import fingerprint

log = logging.getLogger(__name__)

# The model of a version name (any module mapping model-input images to (n, d) rows).
LoadModel = Callable[[str], Any]
LoadImages = Callable[[Sequence[str]], np.ndarray]


class ManifestLike(Protocol):
    items: list[str]


def data_fingerprint(source_fingerprint: str, manifest_fingerprint: str) -> str:
    """What an evaluation-set embedding depends on besides the model: the pixels and the items."""
    return fingerprint({"source": source_fingerprint, "eval": manifest_fingerprint})


def embed_versions(
    weights: Mapping[str, str],
    manifest: ManifestLike,
    labels: np.ndarray,
    load_images: LoadImages,
    data_fp: str,
    load_model: LoadModel,
    cache: EmbeddingCache,
    *,
    batch_size: int = 512,
    device: str | None = None,
    report: Callable[[str], None] | None = None,
    what: str = "evaluate",
) -> dict[str, np.ndarray]:
    """Each version's (len(manifest.items), d) embeddings, keyed by ``weights`` (version ->
    weights sha256): the cache entry when one matches, else ``load_model(version)`` embeds
    ``load_images(items)`` and the result is stored. ``labels`` (int codes, one per item) are
    stored with each new entry; ``what`` prefixes the progress lines."""
    from compat.embeddings.cache import cache_key

    say = report or (lambda msg: log.info(msg))
    ids = list(manifest.items)
    out: dict[str, np.ndarray] = {}
    for version, sha in weights.items():
        if not isinstance(sha, str) or not sha:
            raise BadInputError(f"{version}: card: weights_sha256: missing or empty")

        def compute(version: str = version) -> EmbeddingBundle:
            from compat.embeddings.embed import embed_items

            model = load_model(version)
            emb = embed_items(model, load_images, ids, batch_size, _torch_device(device))
            return EmbeddingBundle(
                embeddings=emb, labels=labels, ids=ids, version=version, fingerprint=data_fp
            )

        bundle, hit = cache.get_or_compute(cache_key(sha, data_fp), compute, ids=ids)
        say(f"{what}: {version}: {'cached' if hit else 'embedded'} {bundle.embeddings.shape}")
        out[version] = bundle.embeddings
    return out


def _torch_device(device: str | None) -> str | None:
    """The search device name also selects where to embed; None keeps the model where it is."""
    if device in (None, "auto"):
        from compat.embeddings.search import resolve_device

        return resolve_device(None)
    return device


__all__ = ["LoadImages", "LoadModel", "data_fingerprint", "embed_versions"]
