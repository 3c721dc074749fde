"""A trained version's ``model/`` artifact folder as a loadable MLflow model, without pickle.

The folder keeps compat's own layout (``card.json``, ``weights.safetensors``,
``train_metrics.json`` at its root: what ``compat promote`` downloads) and is also an MLflow
pyfunc model saved from code (:mod:`compat.registry.pyfunc_model`): ``MLmodel`` declares the
input schema (uint8 images (-1, H, W, C)) and the output (float32 (-1, dim)), the pyfunc
artifacts ``weights`` and ``card`` are the root files themselves (no second copy of the
weights), and ``code/compat`` holds the compat code that builds the architecture.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from compat.io import scratch_dir
from compat.models.card import ModelCard
from compat.registry.integrity import folder_digests
from compat.registry.store import Registry

CODE_FILE = Path(__file__).with_name("pyfunc_model.py")
PACKAGE = Path(__file__).resolve().parents[1]  # the compat package folder
FILES = ("card.json", "weights.safetensors", "train_metrics.json")
# Third-party packages the pyfunc imports (compat.models + compat.embeddings.embed).
REQUIREMENTS = ("torch", "torchvision", "numpy", "safetensors", "pydantic", "pyyaml")


def signature(card: ModelCard):
    """uint8 images (-1, image_size, image_size, in_channels) -> float32 (-1, dim)."""
    import numpy as np
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Schema, TensorSpec

    shape = (-1, card.image_size, card.image_size, card.in_channels)
    return ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(np.uint8), shape, "images")]),
        outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, card.dim), "embeddings")]),
    )


def requirements() -> list[str]:
    """Pinned requirements of the running environment for :data:`REQUIREMENTS`."""
    from importlib import metadata

    out = []
    for name in REQUIREMENTS:
        try:
            out.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            out.append(name)
    return out


def build_model_folder(folder: Path, card: ModelCard, dst: Path) -> Path:
    """Write the MLflow model of the version in ``folder`` (its card already read and checked)
    to the new folder ``dst``; return ``dst``."""
    import warnings

    import mlflow
    from mlflow.models import Model

    with scratch_dir("code") as tmp, warnings.catch_warnings():
        # MLflow suggests an input example; the signature already says what goes in.
        warnings.filterwarnings("ignore", message=".*input example.*")
        code = Path(tmp) / "compat"
        shutil.copytree(PACKAGE, code, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        mlflow.pyfunc.save_model(
            path=str(dst),
            python_model=str(CODE_FILE),
            artifacts={
                "weights": str(folder / "weights.safetensors"),
                "card": str(folder / "card.json"),
            },
            code_paths=[str(code)],
            signature=signature(card),
            pip_requirements=requirements(),
            metadata={"compat.version": card.version or "", "compat.dim": card.dim},
        )
    # The pyfunc artifacts move to the folder's root, where compat reads them too.
    model = Model.load(str(dst / "MLmodel"))
    artifacts = model.flavors["python_function"]["artifacts"]
    for info in artifacts.values():
        saved = dst / info["path"]
        saved.replace(dst / saved.name)
        info["path"] = saved.name
    shutil.rmtree(dst / "artifacts")
    model.save(str(dst / "MLmodel"))
    for name in FILES[2:]:
        if (folder / name).is_file():
            shutil.copy2(folder / name, dst / name)
    return dst


def log_model(reg: Registry, run_id: str, folder: Path, card: ModelCard) -> dict[str, str]:
    """Log the version in ``folder`` as the run's ``model/`` artifact folder (an MLflow model);
    return the sha256 of each file logged (relative path -> digest), code included."""
    with scratch_dir("model") as tmp:
        dst = build_model_folder(folder, card, Path(tmp) / "model")
        digests = folder_digests(dst)
        reg.call("log_artifacts", run_id, str(dst), "model")
    return digests


__all__ = ["build_model_folder", "log_model", "requirements", "signature"]
