"""A registered version's artifacts as stored: what it was registered from (trained weights or an
embeddings bundle), the weights digest it was registered with, and one of its artifact folders
downloaded from the artifact store.

Both compat's loader (:func:`compat.registry.assemble.model_folder`) and ``compat verify
--model`` (:func:`compat.registry.integrity.verify_model`) download a version's ``model/``
folder from here and check it against the digests recorded at registration.
"""

from __future__ import annotations

import atexit
import shutil
from pathlib import Path

from compat.errors import NotFoundError
from compat.io import make_scratch_dir
from compat.registry.store import Registry, VersionRecord
from compat.registry.uris import mask


def registered_weights(rec: VersionRecord) -> str:
    """The weights digest a version was registered with ('' when the tag is absent)."""
    return rec.tags.get("compat.weights_sha256", "")


def is_model(rec: VersionRecord) -> bool:
    """A version registered from trained weights (not from an embeddings bundle)."""
    return rec.tags.get("compat.kind") == "model"


def download(reg: Registry, rec: VersionRecord, artifact: str) -> Path:
    """A registered version's artifact folder, downloaded into a fresh temporary folder (a
    version read from files, :class:`compat.registry.overlay.LocalRecord`: its local folder)."""
    local = getattr(rec, "artifacts", None)
    if local is not None:
        if artifact not in local:
            raise NotFoundError(f"{rec.name}: read from {rec.source}, which has no {artifact!r}")
        return Path(local[artifact])
    from mlflow.artifacts import download_artifacts

    dst = make_scratch_dir(rec.name)  # a killed process's is removed by the next one made
    atexit.register(shutil.rmtree, dst, True)  # read during this process only
    try:
        return Path(
            download_artifacts(
                run_id=rec.run_id,
                artifact_path=artifact,
                dst_path=str(dst),
                tracking_uri=reg.tracking_uri,
            )
        )
    except Exception as err:
        shutil.rmtree(dst, ignore_errors=True)
        reg.production_mlflow_version()  # an unreachable registry is exit 5, not "not found"
        raise NotFoundError(
            f"{rec.name}: artifact {artifact!r} of run {rec.run_id} could not be read: "
            f"{mask(str(err))}"
        ) from None


__all__ = ["download", "is_model", "registered_weights"]
