"""``compat register``: log a version's run and create its registered model version.

A version comes either from compat training (``models/<version>/``: weights.safetensors,
card.json, train_metrics.json) or, for teams that train elsewhere, from an embeddings bundle of
the evaluation set (``--embeddings``), with the facts a card would hold taken from the contract.
Artifacts are plain files (safetensors, JSON, YAML, npz): nothing is pickled. A trained
version's ``model/`` folder is also an MLflow model loaded from code (mlflow_model.py); the
sha256 of each of its files is recorded in the version's tags (integrity.py). The run is the
training's: named by the version, started and ended when training did, its curves per epoch,
its training data as a dataset input and a description (run_page.py). Registrations take the
promotion lock, so one name is never registered twice.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from compat.errors import BadInputError, NotFoundError
from compat.io import make_scratch_dir, sha256_file
from compat.models.card import EmbeddingsCard, ModelCard, read_model_card
from compat.registry.integrity import FILES_TAG, files_tag
from compat.registry.mlflow_model import log_model
from compat.registry.record import log_training, training_window
from compat.registry.run_page import NOTE_TAG, log_dataset, registration_note, training_dataset
from compat.registry.store import VERSION_TAG, Registry, VersionRecord, check_version_name


def read_card_json(folder: Path) -> ModelCard:
    """The model card of a trained version (no torch import needed here)."""
    path = folder / "card.json"
    if not path.is_file():
        raise NotFoundError(
            f"{path}: model card not found (train the version first: dvc repro train@{folder.name})"
        )
    return read_model_card(path)


def _data_tag(card: ModelCard | EmbeddingsCard) -> str:
    """The ``compat.data`` tag: the fingerprint of the data a model version was trained on."""
    if isinstance(card, EmbeddingsCard):
        return ""  # its data is the evaluation set, which every version shares
    data = card.data
    recorded = (data.train_fingerprint or data.source_fingerprint) if data is not None else None
    return recorded or card.data_fingerprint or ""


def version_tags(
    version: str,
    card: ModelCard | EmbeddingsCard,
    kind: str,
    digests: dict[str, str] | None = None,
) -> dict[str, str]:
    """The ``compat.*`` tags of a newly registered version, read from its card; ``digests``:
    the sha256 of every file of its MLflow model, code included (:mod:`compat.registry.integrity`)."""
    files = {FILES_TAG: files_tag(digests)} if digests is not None else {}
    return {
        VERSION_TAG: version,
        "compat.parent": card.parent or "",
        "compat.dim": str(card.dim),
        "compat.head": card.head or "",
        "compat.method": card.method or "",
        "compat.data": _data_tag(card),
        "compat.status": "candidate",
        "compat.kind": kind,
        "compat.weights_sha256": card.weights_sha256,
        **files,
    }


def _flat_params(card: ModelCard | EmbeddingsCard) -> dict[str, str]:
    """Card entries as MLflow params (scalars only; nested dicts flattened with dots)."""
    out: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(value, (str, int, float, bool)) or value is None:
            out[prefix] = str(value)[:500]

    walk("", {k: v for k, v in card.to_json().items() if k not in ("classes", "packages")})
    return out


PARAMS_PER_BATCH = 100  # MLflow's log_batch takes at most 100 params a call


def _log_params(reg: Registry, run_id: str, params: dict[str, str]) -> None:
    """The card's params in ``log_batch`` calls (one request per 100, not one per param)."""
    from mlflow.entities import Param

    items = [Param(key, value) for key, value in params.items()]
    for i in range(0, len(items), PARAMS_PER_BATCH):
        reg.call("log_batch", run_id, params=items[i : i + PARAMS_PER_BATCH])


def register(
    reg: Registry,
    version: str,
    models_dir: str | os.PathLike[str] = "models",
    contracts_dir: str | os.PathLike[str] = "contracts",
    embeddings: str | os.PathLike[str] | None = None,
) -> tuple[VersionRecord, bool]:
    """Register ``version``; returns (record, created). Re-registering the same weights is a no-op;
    other weights under a registered name are refused (exit 4, naming both digests). Two
    registrations of one name at once create one version: the second finds the first's."""
    check_version_name(version)
    contract_path = Path(contracts_dir) / f"{version}.yaml"
    scratch: list[Path] = []
    try:
        return _register(reg, version, Path(models_dir), contract_path, embeddings, scratch)
    finally:
        for folder in scratch:  # no compat-* folder is left in the temporary directory
            shutil.rmtree(folder, ignore_errors=True)


def _register(
    reg: Registry,
    version: str,
    models_dir: Path,
    contract_path: Path,
    embeddings: str | os.PathLike[str] | None,
    scratch: list[Path],
) -> tuple[VersionRecord, bool]:
    if embeddings is not None:
        card, files, kind = card_from_embeddings(version, Path(embeddings), contract_path, scratch)
    else:
        folder = Path(models_dir) / version
        if not folder.is_dir():
            raise NotFoundError(
                f"{folder}: no trained version {version!r} (dvc repro train@{version})"
            )
        card = read_card_json(folder)
        weights = folder / "weights.safetensors"
        if not weights.is_file():
            raise NotFoundError(f"{weights}: weights not found")
        if sha256_file(weights) != card.weights_sha256:
            raise BadInputError(
                f"{weights}: sha256 does not match {folder / 'card.json'} weights_sha256"
            )
        files: dict[
            str, list[Path]
        ] = {}  # the model folder is logged whole, as an MLflow model (mlflow_model.py)
        kind = "model"
    if contract_path.is_file():
        files["contract"] = [contract_path]

    existing = reg.find(version)  # a re-registration needs no lock: nothing is written
    if existing is not None:
        return already_registered(existing, card), False
    # Serialised like promotions (the same lock: a file lock, or PostgreSQL's advisory lock on a
    # shared registry), and the name looked up again inside it: two registrations of one name
    # started at once would otherwise both find it free and create two MLflow versions.
    with reg.ledger().lock():
        existing = reg.find(version)
        if existing is not None:
            return already_registered(existing, card), False
        return _create(reg, version, models_dir, card, files, kind), True


def served_adapter(contracts: list[Path], version: str, models_dir: Path) -> Path | None:
    """The query adapter's (or query blend's) folder when the version's contract serves it
    through one (its MLflow model then returns old-space embeddings); else None."""
    if not contracts:
        return None
    from compat.contracts.schema import load_contract

    contract = load_contract(contracts[0])
    if contract.serve.mode not in ("query-adapter", "query-blend") or contract.parent is None:
        return None
    return Path(contract.serve.map_folder(version, contract.parent, models_dir) or "")


def already_registered(existing: VersionRecord, card: ModelCard | EmbeddingsCard) -> VersionRecord:
    """The registered version, if it holds the same weights (a no-op); else BadInputError."""
    if existing.tags.get("compat.weights_sha256") == card.weights_sha256:
        return existing
    raise BadInputError(
        f"version {existing.name!r} is already registered (MLflow version {existing.mlflow_version}) "
        f"with weights sha256 {existing.tags.get('compat.weights_sha256') or '(none)'}, not "
        f"{card.weights_sha256}; register the new weights under a new version name"
    )


def _create(
    reg: Registry,
    version: str,
    models_dir: Path,
    card: ModelCard | EmbeddingsCard,
    files: dict[str, list[Path]],
    kind: str,
) -> VersionRecord:
    """Log the version's run and create its MLflow model version (under the registration lock)."""
    digests: dict[str, str] | None = None
    # The run is the training: named by compat's version name, started and ended when training
    # did (from the card), described in words; the registration's own seconds are not its story.
    window = training_window(card) if kind == "model" else None
    run = reg.call(
        "create_run",
        reg.experiment_id,
        start_time=window[0] if window else None,
        run_name=version,
        tags={VERSION_TAG: version, NOTE_TAG: registration_note(version, card, kind)},
    )
    run_id = run.info.run_id
    try:
        _log_params(reg, run_id, _flat_params(card))
        if kind == "model":
            log_dataset(reg, run_id, training_dataset(card))
            log_training(reg, run_id, Path(models_dir) / version, window[1] if window else None)
            adapter = served_adapter(files.get("contract", []), version, models_dir)
            digests = log_model(reg, run_id, Path(models_dir) / version, card, adapter)
        for subdir, paths in files.items():
            for path in paths:
                reg.call("log_artifact", run_id, str(path), subdir)
        reg.call("set_terminated", run_id, end_time=window[1] if window else None)
    except Exception:
        reg.call("set_terminated", run_id, status="FAILED")
        raise
    reg.call(
        "create_model_version",
        reg.model,
        f"{run.info.artifact_uri}/model",
        run_id,
        tags=version_tags(version, card, kind, digests),
        description=f"{version}: {kind} registered by compat; status candidate (not yet gated).",
    )
    return reg.get(version)


def card_from_embeddings(
    version: str, bundle: Path, contract_path: Path, scratch: list[Path]
) -> tuple[EmbeddingsCard, dict[str, list[Path]], str]:
    """A card for a version known only by its embeddings of the evaluation set."""
    from compat.contracts.schema import load_contract
    from compat.embeddings.bundle import save_bundle
    from compat.embeddings.formats import format_of
    from compat.embeddings.reader import load_gallery

    if not contract_path.is_file():
        raise NotFoundError(
            f"{contract_path}: registering from embeddings needs the version's contract (dim, head, parent)"
        )
    contract = load_contract(contract_path)
    b = load_gallery(bundle)  # .npz, .npy or Parquet; registered as an .npz bundle
    if format_of(bundle) != "npz":
        converted = make_scratch_dir("emb")
        scratch.append(converted)  # removed whatever happens next (a refusal included)
        bundle = save_bundle(converted / f"{bundle.stem}.npz", b)
    dim = b.embeddings.shape[1]
    if dim != contract.embedding_dim:
        raise BadInputError(
            f"{bundle}: embeddings: dimension {dim} but {contract_path} declares {contract.embedding_dim}"
        )
    if b.version is not None and b.version != version:
        raise BadInputError(f"{bundle}: version: the bundle says {b.version!r}, not {version!r}")
    card = EmbeddingsCard(
        version=version,
        dim=dim,
        head=contract.head,
        parent=contract.parent,
        method="external",
        source="embeddings",
        data={"eval_fingerprint": b.fingerprint},
        weights_sha256=sha256_file(bundle),
    )
    folder = make_scratch_dir("card")
    scratch.append(folder)
    path = card.write(folder)
    return card, {"model": [path], "embeddings": [bundle]}, "embeddings"
