"""Versions read from the working tree instead of the registry: ``compat promote --dry-run
--local VERSION``.

A pull request trains its candidate (or computes its embeddings) in the pull request. Its gate
must judge that candidate against production as the shared registry holds it, and write
nothing there: registering it would put a version in the shared registry for every pull
request, and a candidate retrained on the same pull request would then collide with its own
earlier registration (exit 4, "already registered with other weights"). The overlay answers
``find`` and ``get`` for the named versions from their files, with the tags registration would
give them (:func:`compat.registry.register.version_tags`: parent, dimension, head, training
data, weights digest), and passes every other question to the registry, read-only.

A version's files are ``models/<v>/`` (its card and weights, checked as ``compat register``
checks them) or an embeddings bundle (``.npz``, ``.npy`` or Parquet, its facts taken from the
version's contract). A named version the registry already holds with other weights is refused
as its registration would be (exit 4, both digests named), so the dry run fails where the
real run would.
"""

from __future__ import annotations

import atexit
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compat.errors import NotFoundError
from compat.registry.store import Registry, VersionRecord, check_version_name


@dataclass
class LocalRecord(VersionRecord):
    """A version read from files: no MLflow version, no run; ``artifacts`` maps an artifact
    folder's name (``embeddings``) to the local folder that holds it."""

    artifacts: dict[str, Path] = field(default_factory=dict)


def local_record(
    version: str, models: Path, contracts: Path, embeddings: Path | None = None
) -> LocalRecord:
    """``version`` as registration would record it, from ``models/<version>/`` or from the
    bundle ``embeddings`` (copied, as an ``.npz``, into a scratch folder of its own that is
    removed when the process ends)."""
    from compat.registry.register import (
        card_from_embeddings,
        read_card_json,
        version_tags,
    )

    check_version_name(version)
    contract = contracts / f"{version}.yaml"
    if embeddings is not None:
        scratch: list[Path] = []
        try:
            card, files, kind = card_from_embeddings(version, embeddings, contract, scratch)
        finally:
            for folder in scratch:
                atexit.register(shutil.rmtree, folder, True)  # read during this process only
        artifacts = {"embeddings": _alone(files["embeddings"][0])}
        source = str(embeddings)
    else:
        folder = models / version
        if not folder.is_dir():
            raise NotFoundError(
                f"{folder}: no trained version {version!r} to gate from files (dvc repro "
                f"train@{version}, or --embeddings)"
            )
        card = read_card_json(folder)
        _check_weights(folder, card.weights_sha256)
        kind, artifacts, source = "model", {}, str(folder)
    return LocalRecord(
        name=version,
        mlflow_version="",
        run_id=None,
        source=source,
        tags=version_tags(version, card, kind),
        description=f"{version}: read from {source} (not registered)",
        artifacts=artifacts,
    )


def _check_weights(folder: Path, recorded: str) -> None:
    """The weights file must be the one its card names (as ``compat register`` checks)."""
    from compat.errors import BadInputError
    from compat.io import sha256_file

    weights = folder / "weights.safetensors"
    if not weights.is_file():
        raise NotFoundError(f"{weights}: weights not found")
    if sha256_file(weights) != recorded:
        raise BadInputError(
            f"{weights}: sha256 does not match {folder / 'card.json'} weights_sha256"
        )


def _alone(bundle: Path) -> Path:
    """A scratch folder holding only ``bundle`` (the gate reads a folder's one ``.npz``)."""
    from compat.io import make_scratch_dir

    folder = make_scratch_dir("local")
    atexit.register(shutil.rmtree, folder, True)
    shutil.copyfile(bundle, folder / bundle.name)
    return folder


class Overlay:
    """A registry whose ``local`` versions are read from files (:func:`local_record`); every
    other read goes to ``reg``. Only a dry run uses it: it has nothing to write."""

    def __init__(
        self,
        reg: Registry,
        local: list[str] | tuple[str, ...],
        models: Path,
        contracts: Path,
        embeddings: dict[str, Path],
    ) -> None:
        self._reg = reg
        self.local: dict[str, LocalRecord] = {}
        for name in dict.fromkeys(local):
            rec = local_record(name, Path(models), Path(contracts), embeddings.get(name))
            registered = reg.find(name)
            if registered is not None:  # its registration would fail: so does the dry run
                same_weights(registered, rec)
            self.local[name] = rec

    def find(self, version: str) -> VersionRecord | None:
        return self.local.get(version) or self._reg.find(version)

    def get(self, version: str) -> VersionRecord:
        return self.local.get(version) or self._reg.get(version)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reg, name)


@dataclass(frozen=True)
class _Digest:
    """What :func:`compat.registry.register.already_registered` reads of a card."""

    weights_sha256: str


def same_weights(registered: VersionRecord, local: LocalRecord) -> None:
    """BadInputError (exit 4, both digests named) when ``local``'s files hold other weights
    than the version registered under its name, exactly as registering them would."""
    from compat.registry.register import already_registered

    already_registered(registered, _Digest(local.tags["compat.weights_sha256"]))  # type: ignore[arg-type]


__all__ = ["LocalRecord", "Overlay", "local_record", "same_weights"]
