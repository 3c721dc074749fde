"""What ``compat promote`` judges on: the evaluation-set embeddings of every named version and,
when a criterion uses ``forward``, the parent's embeddings upgraded by the version's psi.

A model version's rows come from the embedding cache, keyed by the registered weights digest
(the cache is consulted once per version); only on a miss is its model folder found (local
``models/<v>`` when its card names the registered digest, else the registry's copy) and the
model loaded. A version registered from embeddings contributes its registered bundle. The
gallery map (psi, read from ``models/<version>/upgrade/``, or the map ``serve.map`` names) is
opened by :func:`compat.maps.open_map` and checked against the contract's versions, the
registered weights and both versions' row widths before it runs
(:func:`compat.registry.serving.gallery_map_rows`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from compat.contracts.schema import Contract
from compat.errors import BadInputError, CompatError, NotFoundError
from compat.models.card import check_paragon, read_model_card
from compat.registry.artifacts import download, is_model, registered_weights
from compat.registry.integrity import check_model
from compat.registry.store import Registry, VersionRecord


@dataclass
class Paths:
    """Where promote finds the project's files (the repository layout by default)."""

    contracts: Path = Path("contracts")
    models: Path = Path("models")
    eval_manifest: Path = Path("splits/eval.json")
    source: Path = Path("data/source.json")
    cache: Path = Path("cache/embeddings")
    params: Path = Path("params.yaml")


@dataclass
class Assembled:
    """Everything the gate judges: the evaluation set, each version's rows and psi's output."""

    manifest: Any
    embeddings: dict[str, np.ndarray]
    data_fingerprint: str
    upgraded: dict[str, np.ndarray] | None = None
    psi: dict[str, Any] | None = None
    adapted: np.ndarray | None = None  # serve: query-adapter: the version's rows, mapped
    serve: dict[str, Any] | None = None  # the served configuration and its map's provenance


def model_folder(reg: Registry, rec: VersionRecord, models_dir: Path) -> Path:
    """The version's weights folder: local ``models/<v>`` if its card names the registered
    digest, else the registry's copy, refused (:class:`compat.registry.integrity.ModelChanged`,
    exit 4, naming the file) unless its files match the digests recorded at registration."""
    local = models_dir / rec.name
    if (local / "card.json").is_file():
        try:
            if read_model_card(local).weights_sha256 == registered_weights(rec):
                return local
        except CompatError:
            pass  # an unreadable local card: the registry's copy is the one registered
    folder = download(reg, rec, "model")
    check_model(rec, folder)  # a version registered before code digests: its weights only
    return folder


def bundle_rows(
    reg: Registry, rec: VersionRecord, manifest: Any, manifest_where: str = "splits/eval.json"
) -> np.ndarray:
    """The rows of a version registered from embeddings, in the evaluation set's item order."""
    from compat.embeddings.bundle import load_bundle

    folder = download(reg, rec, "embeddings")
    files = sorted(folder.glob("*.npz"))
    if not files:
        raise NotFoundError(f"{rec.name}: no embeddings bundle among its artifacts")
    return eval_rows(load_bundle(files[0]), manifest, files[0].name, manifest_where)


def eval_rows(b: Any, manifest: Any, where: str, manifest_where: str) -> np.ndarray:
    """``b``'s rows in the order of the evaluation set's items: by ``ids`` when the bundle has
    them (each evaluation item exactly once among them), else row for row. Either way the
    bundle's labels must name the evaluation set's classes one to one (a label per class, any
    integers): rows shuffled against the set, or labelled for another set, are BadInputError
    (exit 4), never judged."""
    items = list(manifest.items)
    if b.ids is not None:
        index: dict[str, int] = {}
        for k, i in enumerate(b.ids):
            if index.setdefault(i, k) != k:
                raise BadInputError(f"{where}: ids: {i!r} appears twice (rows {index[i]} and {k})")
        missing = [i for i in items if i not in index]
        if missing:
            raise BadInputError(
                f"{where}: ids: {len(missing)} evaluation item(s) missing, e.g. {missing[:3]}"
            )
        order = np.asarray([index[i] for i in items], dtype=np.int64)
    else:
        if b.embeddings.shape[0] != len(items):
            raise BadInputError(
                f"{where}: embeddings: {b.embeddings.shape[0]} rows but the evaluation set has "
                f"{len(items)} items (store ids, or rows in {manifest_where} order)"
            )
        order = np.arange(len(items), dtype=np.int64)
    how = (
        "by its ids"
        if b.ids is not None
        else f"row for row (no ids: rows in {manifest_where} order)"
    )
    class_of: dict[int, str] = {}
    label_of: dict[str, int] = {}
    for k, (label, cls) in enumerate(zip(b.labels[order].tolist(), manifest.labels, strict=True)):
        seen_cls, seen_label = class_of.setdefault(label, cls), label_of.setdefault(cls, label)
        if seen_cls != cls or seen_label != label:
            what = (
                f"label {label} is given to classes {seen_cls!r} and {cls!r}"
                if seen_cls != cls
                else f"class {cls!r} has labels {seen_label} and {label}"
            )
            raise BadInputError(
                f"{where}: labels: do not match {manifest_where} {how}: {what} (item "
                f"{items[k]!r}, bundle row {int(order[k])}); store the evaluation set's ids, or "
                "its rows in order"
            )
    rows = b.embeddings[order]
    from compat.models.norms import products_overflow

    big = products_overflow(rows, rows)
    if big is not None:  # its self test's scores would be inf: the gate would rank nothing
        raise BadInputError(
            f"{where}: embeddings: row {int(order[big[2]])} has norm {big[0]:.3g}: inner products "
            "of its rows overflow float32; store L2-normalised rows"
        )
    return rows


def gather_embeddings(
    reg: Registry, names: list[str], paths: Paths, records: dict[str, VersionRecord]
) -> tuple[Any, dict[str, np.ndarray], str]:
    """(evaluation manifest, rows of every named version, data fingerprint); the fingerprint
    is '' when no version needed embedding."""
    from compat.data.split import load_eval_manifest

    manifest = load_eval_manifest(paths.eval_manifest)
    out: dict[str, np.ndarray] = {}
    weights: dict[str, str] = {}
    for name in names:
        rec = records[name]
        if rec.tags.get("compat.kind") == "embeddings":
            out[name] = bundle_rows(reg, rec, manifest, str(paths.eval_manifest))
        else:
            weights[name] = registered_weights(rec)
    data_fp = ""
    if weights:
        from compat.data.sources import open_source
        from compat.embeddings.cache import EmbeddingCache
        from compat.embeddings.versions import data_fingerprint, embed_versions
        from compat.evaluate.manifest import label_codes

        source = open_source(paths.source)
        data_fp = data_fingerprint(source.fingerprint, manifest.fingerprint)

        def load_model(name: str) -> Any:
            from compat.models import load_version

            return load_version(model_folder(reg, records[name], paths.models))[0]

        out.update(
            embed_versions(
                weights, manifest, label_codes(manifest.labels), source.load, data_fp,
                load_model, EmbeddingCache(paths.cache), what="promote",
            )
        )  # fmt: skip
    return manifest, out, data_fp


def upgraded_parent(
    contract: Contract,
    records: dict[str, VersionRecord],
    paths: Paths,
    embeddings: dict[str, np.ndarray],
) -> tuple[dict[str, np.ndarray] | None, dict[str, Any] | None]:
    """The parent's embeddings upgraded by the version's gallery map, when a criterion uses
    ``forward`` or the contract serves by ``backfill``: psi (``models/<version>/upgrade/``) or
    the map its ``serve.map`` names (psi's folder or a :mod:`compat.maps` gallery map), with
    its provenance; else (None, None)."""
    if not any(c.uses_forward for c in contract.criteria) and contract.serve.mode != "backfill":
        return None, None
    from compat.maps.psi import upgrade_folder
    from compat.registry.serving import backfill_map_folder, gallery_map_rows

    folder = backfill_map_folder(contract, paths.models) or upgrade_folder(
        paths.models, contract.version
    )
    return gallery_map_rows(contract, folder, embeddings, weights_of(records))


def weights_of(records: dict[str, VersionRecord]) -> Callable[[str], str | None]:
    """A version's registered weights digest, which a served map must have been fitted on
    (None: not compared; only a model version's tag names model weights, an embeddings
    bundle's names the file)."""

    def weights(name: str) -> str | None:
        rec = records.get(name)
        return (registered_weights(rec) or None) if rec is not None and is_model(rec) else None

    return weights


def check_paragon_split(
    contract: Contract, records: dict[str, VersionRecord], paragon: str | None
) -> None:
    """BadInputError (exit 4) when the paragon's registered training split (tag
    ``compat.data``) differs from the version's: its gain would not be the version's."""
    if not paragon:
        return
    new = contract.version
    check_paragon(
        new,
        paragon,
        version_data=records[new].tags.get("compat.data"),
        paragon_data=records[paragon].tags.get("compat.data"),
        where=f"paragon {paragon}: tag compat.data",
    )


def assemble(
    reg: Registry,
    contract: Contract,
    records: dict[str, VersionRecord],
    paths: Paths,
    paragon: str | None = None,
) -> Assembled:
    """Every version's rows (``records`` order) and, for forward criteria, psi(parent);
    first, a ``paragon`` trained on other data than the version is refused."""
    check_paragon_split(contract, records, paragon)
    manifest, embeddings, data_fp = gather_embeddings(reg, list(records), paths, records)
    upgraded, psi = upgraded_parent(contract, records, paths, embeddings)
    from compat.registry.serving import adapted_rows

    adapted, adapter = adapted_rows(contract, embeddings, paths.models, weights_of(records))
    serve: dict[str, Any] = {"mode": contract.serve.mode}
    if adapter is not None:
        serve = adapter
    elif contract.serve.mode == "backfill" and psi is not None:
        serve = {"mode": "backfill", **psi}
    return Assembled(manifest, embeddings, data_fp, upgraded, psi, adapted, serve)


__all__ = [
    "Assembled",
    "Paths",
    "assemble",
    "bundle_rows",
    "check_paragon_split",
    "eval_rows",
    "gather_embeddings",
    "model_folder",
    "upgraded_parent",
    "weights_of",
]
