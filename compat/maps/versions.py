"""A version's embeddings of a set of items, through the embedding cache, and written in any
format: what ``compat embed`` and ``compat adapt --new-version/--old-version`` run.

The items are a split of the pipeline (``splits/<name>.json``: a training or the evaluation
manifest, pixels from ``data/source.json``), a CSV manifest (``path,label[,group]``) or an image
folder (``root/<class>/<file>``), read at the version's own image size and channels. The cache
key is the version's weights sha256, the data fingerprint (the source's content fingerprint and
the items') and the transform (:mod:`compat.embeddings.cache`): the evaluate stage's key, so a
split it embedded is a hit here, and a model loads only on a miss.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from compat.embeddings.bundle import EmbeddingBundle
from compat.errors import BadInputError, NotFoundError, UsageError

if TYPE_CHECKING:
    from compat.maps.pairs import Pairs

DEFAULT_CACHE = "cache/embeddings"


@dataclass
class ItemSet:
    """Items to embed, their labels and pixels, and the fingerprint of the data."""

    name: str  # what the card and the bundle record: "split:<name>", a manifest, a folder
    ids: list[str]
    labels: list[str]
    load: Callable[[Sequence[str]], np.ndarray]
    fingerprint: str  # the data fingerprint of the cache key


@contextlib.contextmanager
def open_items(
    *,
    split: str | None = None,
    manifest: str | os.PathLike[str] | None = None,
    folder: str | os.PathLike[str] | None = None,
    image_size: int,
    channels: int,
    splits_dir: str | os.PathLike[str] = "splits",
    source: str | os.PathLike[str] = "data/source.json",
) -> Iterator[ItemSet]:
    """The items of exactly one of ``split``, ``manifest`` or ``folder`` (a UsageError
    otherwise); a manifest or folder is decoded at ``image_size`` x ``channels`` (a scratch
    source, removed when the block ends)."""
    from compat.embeddings.versions import data_fingerprint
    from compat.io import fingerprint

    given = [name for name, v in (("--split", split), ("--manifest", manifest),
                                  ("--folder", folder)) if v is not None]  # fmt: skip
    if len(given) != 1:
        raise UsageError(
            "name the items to embed with exactly one of --split, --manifest or --folder"
            + (f" (got {', '.join(given)})" if given else "")
        )
    if split is not None:
        from compat.data.sources import open_source

        items, labels, manifest_fp = _split(Path(splits_dir) / f"{split}.json")
        src = open_source(source)
        if src.image_size != image_size or src.channels != channels:
            raise BadInputError(
                f"{source}: image_size/channels: the source holds {src.image_size} px x "
                f"{src.channels}, the version takes {image_size} px x {channels}"
            )
        yield ItemSet(
            f"split:{split}",
            items,
            labels,
            src.load,
            data_fingerprint(src.fingerprint, manifest_fp),
        )
        return
    from compat.data.config import FolderData, ManifestData
    from compat.data.sources import build_source
    from compat.io import scratch_dir

    if manifest is not None:
        params: Any = ManifestData(kind="manifest", manifest=str(manifest), size=image_size,
                                   channels=channels)  # fmt: skip
    else:
        params = FolderData(kind="folder", root=str(folder), size=image_size, channels=channels)
    with scratch_dir("embed") as tmp:
        src = build_source(params, tmp)
        ids = [it.id for it in src.items]
        yield ItemSet(
            str(manifest if manifest is not None else folder),
            ids,
            [it.label for it in src.items],
            src.load,
            data_fingerprint(src.fingerprint, fingerprint(ids)),
        )


def _split(path: Path) -> tuple[list[str], list[str], str]:
    """(items, labels, fingerprint) of a training or evaluation manifest."""
    from compat.data.split import load_eval_manifest, load_train_manifest

    if not path.is_file():
        raise NotFoundError(f"{path}: split not found (run the split stage: dvc repro split)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise BadInputError(f"{path}: not JSON ({err})") from None
    m: Any = (
        load_eval_manifest(path)
        if isinstance(raw, dict) and "query" in raw
        else load_train_manifest(path)
    )
    return list(m.items), list(m.labels), m.fingerprint


def embed_version(
    version: str,
    items: ItemSet,
    *,
    models_dir: str | os.PathLike[str] = "models",
    cache_root: str | os.PathLike[str] = DEFAULT_CACHE,
    batch_size: int = 512,
    device: str | None = None,
    progress: bool = True,
) -> EmbeddingBundle:
    """``version``'s embeddings of ``items``: the cache entry when one matches, else the model
    embeds them (progress on stderr) and the entry is stored. The bundle records the version,
    the data fingerprint, ids, label codes and, in ``meta``, the class names and weights."""
    from compat.embeddings.cache import EmbeddingCache
    from compat.embeddings.versions import embed_versions
    from compat.evaluate.manifest import label_codes
    from compat.models.card import read_model_card

    if device is not None:
        from compat.embeddings.search import resolve_device

        resolve_device(device)  # unknown, or no such device here: exit 2, on a cache hit too
    folder = Path(models_dir) / version
    card = read_model_card(folder)
    codes = label_codes(items.labels)
    done = [0]

    def load(ids: Sequence[str]) -> np.ndarray:
        pixels = items.load(ids)
        done[0] += len(ids)
        if progress:
            print(f"embed: {version}: {done[0]}/{len(items.ids)} images", file=sys.stderr,
                  flush=True)  # fmt: skip
        return pixels

    def load_model(name: str) -> Any:
        from compat.models.version import load_version

        return load_version(Path(models_dir) / name)[0]

    def say(line: str) -> None:
        if progress:
            print(line, file=sys.stderr, flush=True)

    class _Items:
        def __init__(self, ids: list[str]) -> None:
            self.items = ids

    rows = embed_versions(
        {version: card.weights_sha256}, _Items(items.ids), codes, load, items.fingerprint,
        load_model, EmbeddingCache(cache_root), batch_size=batch_size, device=device,
        report=say, what="embed",
    )[version]  # fmt: skip
    classes = sorted(set(items.labels))
    return EmbeddingBundle(
        embeddings=rows,
        labels=codes,
        ids=list(items.ids),
        version=version,
        fingerprint=items.fingerprint,
        meta={"classes": classes, "items": items.name, "weights_sha256": card.weights_sha256},
    )


def version_pairs(
    new_version: str,
    old_version: str,
    *,
    split: str | None = None,
    manifest: str | os.PathLike[str] | None = None,
    folder: str | os.PathLike[str] | None = None,
    models_dir: str | os.PathLike[str] = "models",
    cache_root: str | os.PathLike[str] = DEFAULT_CACHE,
    splits_dir: str | os.PathLike[str] = "splits",
    source: str | os.PathLike[str] = "data/source.json",
    device: str | None = None,
    progress: bool = True,
) -> Pairs:
    """The same items embedded by ``new_version`` and ``old_version`` (through the cache), row
    for row: the pairs a map between their spaces is fitted on. Both versions must read the
    same images (image size and channels; BadInputError naming the old card otherwise)."""
    from compat.maps.pairs import Pairs
    from compat.models.card import read_model_card

    models = Path(models_dir)
    cards = {v: read_model_card(models / v) for v in (new_version, old_version)}
    a, b = cards[new_version], cards[old_version]
    if (a.image_size, a.in_channels) != (b.image_size, b.in_channels):
        raise BadInputError(
            f"{models / old_version / 'card.json'}: image_size/in_channels: {old_version} takes "
            f"{b.image_size} px x {b.in_channels}, {new_version} {a.image_size} px x "
            f"{a.in_channels}; the pairs must embed the same images"
        )
    with open_items(
        split=split, manifest=manifest, folder=folder, image_size=a.image_size,
        channels=a.in_channels, splits_dir=splits_dir, source=source,
    ) as items:  # fmt: skip
        got = {
            v: embed_version(
                v,
                items,
                models_dir=models,
                cache_root=cache_root,
                device=device,
                progress=progress,
            )
            for v in (new_version, old_version)
        }
    info = {
        v: {"version": v, "weights_sha256": cards[v].weights_sha256, "items": items.name,
            "fingerprint": items.fingerprint} for v in cards
    }  # fmt: skip
    return Pairs(
        got[new_version].embeddings, got[old_version].embeddings, list(items.ids),
        list(items.labels), info[new_version], info[old_version],
    )  # fmt: skip


def write_embeddings(path: str | os.PathLike[str], bundle: EmbeddingBundle) -> Path:
    """``bundle`` written in the format its path names (:func:`compat.embeddings.formats.
    format_of`): an ``.npz`` bundle, an ``.npy`` matrix with a ``.meta.npz`` sidecar, or a
    folder of Parquet shards with ``_compat.json``, through the one checked-output path
    (:func:`compat.embeddings.gallery_out.write_gallery`): only a gallery a compat command wrote
    is replaced, nothing half-written."""
    from compat.embeddings.gallery_out import write_gallery

    emb = np.ascontiguousarray(bundle.embeddings, dtype=np.float32)
    return write_gallery(
        path, emb.shape[0], emb.shape[1], [(0, emb)],
        ids=None if bundle.ids is None else np.asarray(bundle.ids, dtype=np.str_),
        labels=np.asarray(bundle.labels), version=bundle.version,
        fingerprint=bundle.fingerprint, meta=dict(bundle.meta),
    )  # fmt: skip


__all__ = [
    "DEFAULT_CACHE",
    "ItemSet",
    "embed_version",
    "open_items",
    "version_pairs",
    "write_embeddings",
]
