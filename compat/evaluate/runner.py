"""The evaluate stage's work, minus file locations: embed every version (through the cache),
then fill the matrix, and with upgrade modules configured, the forward section. ``stages/
evaluate.py`` only wires params, files and this together, and tests drive it with fake models.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from compat.embeddings.cache import EmbeddingCache
from compat.embeddings.versions import LoadImages, data_fingerprint, embed_versions
from compat.errors import BadInputError
from compat.evaluate.config import EvaluateConfig
from compat.evaluate.protocols import EvalSetLike, label_codes
from compat.evaluate.report import evaluate_chain
from compat.io import fingerprint
from compat.models.card import check_paragon, check_upgrade, read_upgrade_card

# (model, card) for a version name; the card has a ``weights_sha256`` (a ModelCard does).
LoadModel = Callable[[str], tuple[Any, Any]]
# A version's weights sha256, read without loading the model (e.g. from its model card).
WeightsOf = Callable[[str], str]
# A version's card fact read without loading the model: its training-split fingerprint, or the
# dim_mismatch it was trained with (None when the card records none).
CardFact = Callable[[str], str | None]


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
    report: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Embed every version of ``config`` and evaluate the chain; returns the report dict.

    With ``weights_of`` a version's model loads only when the cache has no entry for its
    weights; without it each model is loaded to read its card's digest.
    With ``config.forward`` (version -> folder of its upgrade module psi) the report also holds
    a ``forward`` section: M(new, psi(old)) beside M(new, old) and the partial-backfill curve
    (:mod:`compat.evaluate.forward`).
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
    versions = config.versions()
    for folder in (config.forward or {}).values():
        source = read_upgrade_card(folder).from_
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

        upgraded, psi_info = upgraded_embeddings(config.forward, embeddings, weights)
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


def upgraded_embeddings(
    psi_dirs: Mapping[str, str | os.PathLike[str]],
    embeddings: Mapping[str, np.ndarray],
    weights: Mapping[str, str] | None = None,
) -> tuple[dict[str, tuple[str, np.ndarray]], dict[str, dict[str, Any]]]:
    """Load each new version's psi, check it against the evaluated versions' weights digests
    (``weights``: version -> sha256, when given) and upgrade its ``from`` version's matrix;
    returns (upgraded, provenance per new version)."""
    from compat.models.upgrade import load_upgrade, upgrade_array

    made = weights or {}
    upgraded: dict[str, tuple[str, np.ndarray]] = {}
    info: dict[str, dict[str, Any]] = {}
    for new, folder in psi_dirs.items():
        psi, card = load_upgrade(folder)
        old = card.from_
        where = Path(folder) / "card.json"
        check_upgrade(
            card,
            where,
            target=new,
            from_weights=made.get(old),
            to_weights=made.get(new),
            weights_origin="the evaluated ones are",
        )
        if old not in embeddings:
            raise BadInputError(f"{where}: from: {old!r} was not embedded (add it to the chain)")
        upgraded[new] = (old, upgrade_array(psi, embeddings[old]))
        # The outcome of psi's refusal test, which decides what a backfill does (and can
        # differ across machines: docs/findings.md, "Determinism").
        info[new] = {
            **card.provenance(folder),
            "refused": card.refused.reason if card.refused is not None else None,
            "held_out_lower_bound": (card.metrics or {}).get("val_top1_gain_lower_bound"),
        }
    return upgraded, info


__all__ = [
    "CardFact",
    "LoadModel",
    "WeightsOf",
    "data_fingerprint",
    "embed_all",
    "run_evaluation",
    "upgraded_embeddings",
]
