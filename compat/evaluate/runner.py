"""The evaluate stage's work, minus file locations: embed every version (through the cache),
then fill the matrix, and with gallery maps configured (``evaluate.forward``: psi), the forward
section. ``stages/evaluate.py`` only wires params, files and this together, and tests drive it
with fake models.

The gallery maps are opened and applied by the caller (:class:`compat.maps.gallery.ForwardMaps`,
passed to :func:`run_evaluation` as ``gallery_maps``): this floor never imports
:mod:`compat.maps`, which sits above it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from compat.embeddings.cache import EmbeddingCache
from compat.embeddings.versions import LoadImages, data_fingerprint, embed_versions
from compat.evaluate.config import EvaluateConfig
from compat.evaluate.manifest import EvalSetLike, label_codes
from compat.evaluate.report import evaluate_chain
from compat.io import fingerprint
from compat.models.card import check_paragon

# (model, card) for a version name; the card has a ``weights_sha256`` (a ModelCard does).
LoadModel = Callable[[str], tuple[Any, Any]]
# A version's weights sha256, read without loading the model (e.g. from its model card).
WeightsOf = Callable[[str], str]
# A version's card fact read without loading the model: its training-split fingerprint, or the
# dim_mismatch it was trained with (None when the card records none).
CardFact = Callable[[str], str | None]
# New version -> (the version its map reads, the map applied to that version's rows).
Upgraded = dict[str, tuple[str, np.ndarray]]


class GalleryMaps(Protocol):
    """The gallery maps of ``evaluate.forward``, opened by the caller
    (:class:`compat.maps.gallery.ForwardMaps`)."""

    def sources(self) -> dict[str, str]:
        """New version -> the version whose rows its map reads (embedded with the chain)."""
        ...

    def upgrade(
        self, embeddings: Mapping[str, np.ndarray], weights: Mapping[str, str]
    ) -> tuple[Upgraded, dict[str, dict[str, Any]]]:
        """Each map checked against the evaluated versions' weights and applied to its source
        version's rows: (upgraded, provenance per new version)."""
        ...


def run_evaluation(
    config: EvaluateConfig,
    manifest: EvalSetLike,
    load_images: LoadImages,
    source_fingerprint: str,
    load_model: LoadModel,
    cache_root: str | os.PathLike[str],
    *,
    weights_of: WeightsOf | None = None,
    train_data_of: CardFact | None = None,
    dim_mismatch_of: CardFact | None = None,
    gallery_maps: GalleryMaps | None = None,
    report: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Embed every version of ``config`` and evaluate the chain; returns the report dict.

    With ``weights_of`` a version's model loads only when the cache has no entry for its
    weights; without it each model is loaded to read its card's digest.
    With ``config.forward`` (version -> folder of its gallery map, psi) the report also holds
    a ``forward`` section: M(new, psi(old)) beside M(new, old) and the partial-backfill curve
    (:mod:`compat.evaluate.forward`); ``gallery_maps`` are those maps, opened by the caller
    (:class:`compat.maps.gallery.ForwardMaps`; ValueError when ``config.forward`` names maps
    and none are given).
    With ``train_data_of`` every paragon must have been trained on its version's training split
    (:func:`compat.models.card.check_paragon`, BadInputError before anything is embedded);
    ``dim_mismatch_of`` says how each version meets an older one of another width.
    ``report`` receives progress lines (embedding, then one per matrix cell)."""
    if train_data_of is not None:
        for version, paragon in config.paragon.items():
            check_paragon(
                version,
                paragon,
                version_data=train_data_of(version),
                paragon_data=train_data_of(paragon),
                where=f"evaluate.paragon.{version}",
            )
    if config.forward and gallery_maps is None:
        raise ValueError(
            "evaluate.forward names gallery maps: pass gallery_maps "
            "(compat.maps.gallery.ForwardMaps(config.forward))"
        )
    versions = config.versions()
    sources = gallery_maps.sources() if config.forward else {}
    for source in sources.values():
        if source not in versions:
            versions.append(source)
    embeddings, weights, data_fp = embed_all(
        versions, manifest, load_images, source_fingerprint, load_model, cache_root,
        weights_of=weights_of, batch_size=config.batch_size, device=config.device, report=report,
    )  # fmt: skip
    modes = {v: dim_mismatch_of(v) for v in versions} if dim_mismatch_of is not None else None
    result = evaluate_chain(manifest, embeddings, config, dim_mismatch=modes, progress=report)
    result["data_fingerprint"] = data_fp
    if config.forward:
        from compat.evaluate.forward import evaluate_forward

        upgraded, psi_info = gallery_maps.upgrade(embeddings, weights)
        result["forward"] = evaluate_forward(manifest, embeddings, upgraded, config)
        for new, info in psi_info.items():
            result["forward"][new]["psi"] = info
    return result


def embed_all(
    versions: list[str],
    manifest: EvalSetLike,
    load_images: LoadImages,
    source_fingerprint: str,
    load_model: LoadModel,
    cache_root: str | os.PathLike[str],
    *,
    weights_of: WeightsOf | None = None,
    batch_size: int = 512,
    device: str | None = None,
    report: Callable[[str], None] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, str], str]:
    """Every version's embeddings of the manifest through the cache, one model in memory at a
    time: (embeddings, weights sha256, data fingerprint) by version. With ``weights_of`` a
    version's model loads only on a cache miss; without it each model is loaded to read its
    card's digest."""
    manifest_fp = getattr(manifest, "fingerprint", None) or fingerprint(list(manifest.items))
    data_fp = data_fingerprint(source_fingerprint, manifest_fp)
    cache = EmbeddingCache(cache_root)
    codes = label_codes(manifest.labels)
    held: dict[str, Any] = {}  # a model loaded to read its card, kept for a cache miss

    def digest(version: str) -> str:
        if weights_of is not None:
            return weights_of(version)
        model, card = load_model(version)
        held[version] = model
        return getattr(card, "weights_sha256", "")

    def model_of(version: str) -> Any:
        return held.pop(version) if version in held else load_model(version)[0]

    weights: dict[str, str] = {}
    embeddings: dict[str, np.ndarray] = {}
    for version in versions:  # one at a time: at most one model in memory
        weights[version] = digest(version)
        embeddings.update(
            embed_versions(
                {version: weights[version]}, manifest, codes, load_images, data_fp, model_of,
                cache, batch_size=batch_size, device=device, report=report,
            )
        )  # fmt: skip
        held.pop(version, None)
    return embeddings, weights, data_fp


__all__ = [
    "CardFact",
    "GalleryMaps",
    "LoadModel",
    "Upgraded",
    "WeightsOf",
    "data_fingerprint",
    "embed_all",
    "run_evaluation",
]
