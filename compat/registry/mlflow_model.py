"""A trained version's ``model/`` artifact folder as a loadable MLflow model, without pickle.

The folder keeps compat's own layout (``card.json``, ``weights.safetensors``,
``train_metrics.json`` at its root: what ``compat promote`` downloads) and is also an MLflow
pyfunc model saved from code (:mod:`compat.registry.pyfunc_model`): ``MLmodel`` declares the
input schema (uint8 images (-1, H, W, C)) and the output (float32 (-1, dim)), checked by the
model itself (a one-line error, never the array), the pyfunc
artifacts ``weights`` and ``card`` are the root files themselves (no second copy of the
weights), and ``code/compat`` holds the compat code that builds the architecture.

A version whose contract serves it through a query adapter (``serve: query-adapter``, issue 27)
carries the adapter in ``adapter/`` (its ``weights.safetensors`` and ``card.json``, pyfunc
artifacts too): ``predict`` then returns old-space embeddings, what the stored gallery is
searched with, and ``params={"space": "native"}`` the version's own. A serving team loads one
artefact. A version served through a query blend (``serve: query-blend``) carries the blend in
``adapter/`` and its parent's weights and card in ``old/``: ``predict`` embeds each image with
both models (two forward passes) and returns the blended query (:mod:`compat.maps.blend`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from compat.errors import InfrastructureError
from compat.io import scratch_dir
from compat.models.card import ModelCard
from compat.registry.integrity import folder_digests
from compat.registry.store import Registry

CODE_FILE = Path(__file__).with_name("pyfunc_model.py")
PACKAGE = Path(__file__).resolve().parents[1]  # the compat package folder
FILES = ("card.json", "weights.safetensors", "train_metrics.json")
# Third-party packages the pyfunc imports (compat.models + compat.embeddings.embed).
REQUIREMENTS = ("torch", "torchvision", "numpy", "safetensors", "pydantic", "pyyaml")


def signature(card: ModelCard, served_dim: int | None = None):
    """uint8 images (-1, image_size, image_size, in_channels) -> float32 (-1, dim); with a query
    adapter, (-1, its out_dim) and a ``space`` parameter (``served`` or ``native``)."""
    import numpy as np
    from mlflow.models import ModelSignature
    from mlflow.types.schema import ParamSchema, ParamSpec, Schema, TensorSpec

    shape = (-1, card.image_size, card.image_size, card.in_channels)
    out = served_dim if served_dim is not None else card.dim
    params = None
    if served_dim is not None:
        params = ParamSchema([ParamSpec("space", "string", "served")])
    return ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(np.uint8), shape, "images")]),
        outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, out), "embeddings")]),
        params=params,
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


def build_model_folder(
    folder: Path, card: ModelCard, dst: Path, adapter: Path | None = None
) -> Path:
    """Write the MLflow model of the version in ``folder`` (its card already read and checked)
    to the new folder ``dst``, with the query adapter in ``adapter`` (a :mod:`compat.maps` map
    folder, checked by :func:`check_adapter`) when the version is served through one; return
    ``dst``."""
    import warnings

    import mlflow
    from mlflow.models import Model

    artifacts = {"weights": str(folder / "weights.safetensors"), "card": str(folder / "card.json")}
    served_dim = None
    old = None
    if adapter is not None:
        served_dim = check_adapter(adapter, card)
        old = blend_parent(adapter, folder, card)

    with scratch_dir("code") as tmp, warnings.catch_warnings():
        # MLflow suggests an input example; the signature already says what goes in.
        warnings.filterwarnings("ignore", message=".*input example.*")
        code = Path(tmp) / "compat"
        shutil.copytree(PACKAGE, code, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        if adapter is not None:
            # The adapter's files have the version's own names; MLflow before 3.16 saved every
            # artifact as artifacts/<file name>, so one would overwrite the other. Distinct
            # names in, the names compat reads back out (below).
            staging = [("adapter_weights", adapter, "weights.safetensors"),
                       ("adapter_card", adapter, "card.json")]  # fmt: skip
            if old is not None:  # a query blend: the parent embeds each query too
                staging += [("old_weights", old, "weights.safetensors"),
                            ("old_card", old, "card.json")]  # fmt: skip
            for key, src, name in staging:
                staged = Path(tmp) / f"{key}-{name}"
                shutil.copy2(src / name, staged)
                artifacts[key] = str(staged)
        mlflow.pyfunc.save_model(
            path=str(dst),
            python_model=str(CODE_FILE),
            artifacts=artifacts,
            code_paths=[str(code)],
            signature=signature(card, served_dim),
            pip_requirements=requirements(),
            metadata={"compat.version": card.version or "", "compat.dim": card.dim},
        )
    # The pyfunc artifacts move to the folder's root, where compat reads them too.
    model = Model.load(str(dst / "MLmodel"))
    for key, info in model.flavors["python_function"]["artifacts"].items():
        saved = dst / info["path"]
        sub = next((f"{p}/" for p in ("adapter", "old") if key.startswith(f"{p}_")), "")
        name = saved.name.removeprefix(f"{key}-")
        (dst / sub).mkdir(exist_ok=True)
        saved.replace(dst / sub / name)
        info["path"] = sub + name
    shutil.rmtree(dst / "artifacts")
    # The model checks its own input (pyfunc_model.py: one line naming the shape expected);
    # MLflow's enforcement would print the whole array before its reason. MLflow skips it for
    # a model that validates its input itself, which the MLmodel records as
    # `is_signature_from_type_hint: true`; the schema is still declared, shown and served.
    # A documented reason for a private attribute: MLflow has no public switch for this (its
    # public MLFLOW_DISABLE_SCHEMA_DETAILS env var only shortens the message, and only in the
    # process that sets it, not in a user's server). A release that renames it fails here with
    # one line, not silently; tests/registry/test_mlflow_model.py checks the served error.
    if model.signature is not None:
        if not hasattr(type(model.signature), "_is_signature_from_type_hint"):
            from importlib.metadata import version as installed

            raise InfrastructureError(
                f"mlflow {installed('mlflow')}: ModelSignature has no "
                "_is_signature_from_type_hint; "
                "compat cannot mark the model as validating its own input with this release"
            )
        model.signature._is_signature_from_type_hint = True
    model.save(str(dst / "MLmodel"))
    for name in FILES[2:]:
        if (folder / name).is_file():
            shutil.copy2(folder / name, dst / name)
    return dst


def check_adapter(adapter: Path, card: ModelCard) -> int:
    """The out_dim of the query adapter in ``adapter``, after checking it can serve the version
    (BadInputError, exit 4, naming its card otherwise): a query adapter, reading the version's
    width, fitted for this version and its parent (their versions and weights, as its card
    records them), not refused when it was fitted."""
    from compat.maps import open_map
    from compat.models.card import Joins

    fitted = open_map(adapter)  # the weights' sha256 checked against the card
    role = "query-blend" if fitted.role == "query-blend" else "query-adapter"
    # The one check of a served map (the gate's, score's, backfill's): this version's queries
    # onto its parent's gallery, fitted on the weights both cards record.
    joins = Joins(
        source=card.version, target=card.parent, from_weights=card.weights_sha256,
        to_weights=card.parent_weights_sha256, weights_origin="the model's card records",
        wanted=f"it serves {card.version}'s queries on {card.parent or 'its parent'}'s gallery",
    )  # fmt: skip
    fitted.check_serves(role, card.dim, f"{card.version}'s embeddings", joins=joins)
    return fitted.out_dim


def blend_parent(adapter: Path, folder: Path, card: ModelCard) -> Path | None:
    """For a query blend in ``adapter``: the model folder of the version whose own queries it
    interpolates with (``folder``'s sibling named by the map's ``to``), checked to hold the
    weights the blend was fitted with and to read the version's images (BadInputError naming
    its card otherwise); None for a query adapter."""
    from compat.errors import BadInputError
    from compat.maps import read_map_card
    from compat.models.card import read_model_card

    mc = read_map_card(adapter)
    if mc.role != "query-blend":
        return None
    old = folder.parent / mc.to
    oc = read_model_card(old)
    fitted_on = (mc.data.target or {}).get("weights_sha256")
    if fitted_on and oc.weights_sha256 != fitted_on:
        raise BadInputError(
            f"{old / 'card.json'}: weights_sha256: the blend in {adapter} was fitted with "
            f"{mc.to}'s weights {fitted_on[:12]}, these are {oc.weights_sha256[:12]}"
        )
    if (oc.image_size, oc.in_channels) != (card.image_size, card.in_channels):
        raise BadInputError(
            f"{old / 'card.json'}: image_size/in_channels: {mc.to} reads {oc.image_size} px x "
            f"{oc.in_channels}, {card.version} {card.image_size} px x {card.in_channels}; a "
            "blend embeds each query with both"
        )
    return old


def log_model(
    reg: Registry, run_id: str, folder: Path, card: ModelCard, adapter: Path | None = None
) -> dict[str, str]:
    """Log the version in ``folder`` (and its query adapter, if served through one) as the run's
    ``model/`` artifact folder (an MLflow model); return the sha256 of each file logged
    (relative path -> digest), code included."""
    with scratch_dir("model") as tmp:
        dst = build_model_folder(folder, card, Path(tmp) / "model", adapter)
        digests = folder_digests(dst)
        reg.call("log_artifacts", run_id, str(dst), "model")
    return digests


__all__ = [
    "blend_parent",
    "build_model_folder",
    "check_adapter",
    "log_model",
    "requirements",
    "signature",
]
