"""The evaluate stage's work, minus file locations: embed every version (through the cache),
then fill the matrix. ``stages/evaluate.py`` only wires params, files and this together, and
tests drive it with fake models.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from compat.embeddings.bundle import EmbeddingBundle
from compat.embeddings.cache import EmbeddingCache
from compat.errors import BadInputError
from compat.evaluate.config import EvaluateConfig
from compat.evaluate.protocols import EvalSetLike, label_codes
from compat.evaluate.report import evaluate_chain
from compat.io import fingerprint

log = logging.getLogger(__name__)

# (model, card) for a version name; the card must carry "weights_sha256".
LoadModel = Callable[[str], tuple[Any, dict[str, Any]]]
LoadImages = Callable[[Sequence[str]], np.ndarray]


def data_fingerprint(source_fingerprint: str, manifest_fingerprint: str) -> str:
    """What an evaluation-set embedding depends on besides the model: the pixels and the items."""
    return fingerprint({"source": source_fingerprint, "eval": manifest_fingerprint})


def embed_versions(
    versions: Sequence[str],
    manifest: EvalSetLike,
    load_images: LoadImages,
    data_fp: str,
    load_model: LoadModel,
    cache: EmbeddingCache,
    *,
    batch_size: int = 512,
    device: str | None = None,
    report: Callable[[str], None] | None = None,
    cards: dict[str, dict[str, Any]] | None = None,
) -> dict[str, np.ndarray]:
    """Each version's (len(manifest.items), d) embeddings, from the cache when the key matches.

    ``cards``, if given, receives each version's model card (e.g. to check what an upgrade
    module was fitted on)."""
    from compat.embeddings.embed import cache_key, embed_items

    say = report or (lambda msg: log.info(msg))
    codes = label_codes(manifest.labels)
    out: dict[str, np.ndarray] = {}
    for version in versions:
        model, card = load_model(version)
        if cards is not None:
            cards[version] = card
        sha = card.get("weights_sha256")
        if not isinstance(sha, str) or not sha:
            raise BadInputError(f"{version}: card: weights_sha256: missing or empty")
        key = cache_key(sha, data_fp)

        def compute(model: Any = model, version: str = version) -> EmbeddingBundle:
            emb = embed_items(
                model, load_images, list(manifest.items), batch_size, _torch_device(device)
            )
            return EmbeddingBundle(
                embeddings=emb,
                labels=codes,
                ids=list(manifest.items),
                version=version,
                fingerprint=data_fp,
            )

        bundle, hit = cache.get_or_compute(key, compute, ids=list(manifest.items))
        say(f"evaluate: {version}: {'cached' if hit else 'embedded'} {bundle.embeddings.shape}")
        out[version] = bundle.embeddings
    return out


def _torch_device(device: str | None) -> str | None:
    """The search device name also selects where to embed; None keeps the model where it is."""
    if device in (None, "auto"):
        from compat.embeddings.search import resolve_device

        return resolve_device(None)
    return device


def run_evaluation(
    config: EvaluateConfig,
    manifest: EvalSetLike,
    load_images: LoadImages,
    source_fingerprint: str,
    load_model: LoadModel,
    cache_root: str | os.PathLike[str],
    *,
    report: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Embed every version of ``config`` and evaluate the chain; returns the report dict.

    With ``config.forward`` (version -> folder of its upgrade module psi) the report also holds
    a ``forward`` section: M(new, psi(old)) beside M(new, old) and the partial-backfill curve
    (:mod:`compat.evaluate.forward`)."""
    manifest_fp = getattr(manifest, "fingerprint", None) or fingerprint(list(manifest.items))
    data_fp = data_fingerprint(source_fingerprint, manifest_fp)
    versions = config.versions()
    if config.forward:
        from compat.models.upgrade import read_upgrade_card

        for folder in config.forward.values():
            source = read_upgrade_card(folder)["from"]
            if source not in versions:
                versions.append(source)
    cards: dict[str, dict[str, Any]] = {}
    embeddings = embed_versions(
        versions,
        manifest,
        load_images,
        data_fp,
        load_model,
        EmbeddingCache(cache_root),
        batch_size=config.batch_size,
        device=config.device,
        report=report,
        cards=cards,
    )
    result = evaluate_chain(manifest, embeddings, config)
    result["data_fingerprint"] = data_fp
    if config.forward:
        from compat.evaluate.forward import evaluate_forward, upgraded_embeddings

        upgraded, psi_info = upgraded_embeddings(config.forward, embeddings, cards)
        result["forward"] = evaluate_forward(manifest, embeddings, upgraded, config)
        for new, info in psi_info.items():
            result["forward"][new]["psi"] = info
    return result
