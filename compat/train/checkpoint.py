"""Per-epoch checkpoints without pickle: tensors in safetensors, everything else in JSON.

A checkpoint is ``epoch-NNNN.safetensors`` (model, head, method buffers, optimizer state tensors,
RNG states as uint8 tensors) plus ``checkpoint.json`` (epoch, step, optimizer param groups and
non-tensor state, metrics so far, the run fingerprint, and the tensors file's sha256). The JSON is
written last and names its tensors file, so a run killed while saving still has the previous
complete checkpoint. A tensors file whose sha256 differs from the JSON is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from compat.errors import BadInputError
from compat.io import atomic_path, sha256_bytes, sha256_file, write_json

INDEX = "checkpoint.json"
SCHEMA = 1


def flatten_optimizer(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Split ``optimizer.state_dict()`` into tensors (``optim.<param>.<key>``) and JSON."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, Any] = {}
    for pid, entries in state["state"].items():
        for key, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optim.{pid}.{key}"] = value
            else:
                scalars[f"{pid}.{key}"] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def unflatten_optimizer(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        if name.startswith("optim."):
            _, pid, key = name.split(".", 2)
            state.setdefault(int(pid), {})[key] = value
    for name, value in meta["scalars"].items():
        pid, key = name.split(".", 1)
        state.setdefault(int(pid), {})[key] = value
    groups = []
    for g in meta["param_groups"]:
        g = dict(g)
        if "betas" in g:
            g["betas"] = tuple(g["betas"])
        groups.append(g)
    return {"state": state, "param_groups": groups}


def rng_tensors(data_generator: torch.Generator) -> dict[str, torch.Tensor]:
    out = {"rng.data": data_generator.get_state(), "rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            out[f"rng.cuda.{i}"] = s
    return out


def restore_rng(tensors: dict[str, torch.Tensor], data_generator: torch.Generator) -> None:
    data_generator.set_state(tensors["rng.data"])
    torch.set_rng_state(tensors["rng.torch"])
    cuda = sorted(k for k in tensors if k.startswith("rng.cuda."))
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([tensors[k] for k in cuda][: torch.cuda.device_count()])


def save_checkpoint(
    folder: str | Path, tensors: dict[str, torch.Tensor], meta: dict[str, Any]
) -> Path:
    """Write ``tensors`` and ``meta`` as the folder's latest checkpoint; drop older tensor files."""
    from safetensors.torch import save

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    name = f"epoch-{int(meta['epoch']):04d}.safetensors"
    # safetensors refuses shared or strided storage: give every tensor its own contiguous copy.
    blob = save({k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()})
    with atomic_path(folder / name) as tmp:
        tmp.write_bytes(blob)
    write_json(
        folder / INDEX, {**meta, "schema": SCHEMA, "tensors": name, "sha256": sha256_bytes(blob)}
    )
    for old in folder.glob("epoch-*.safetensors"):
        if old.name != name:
            old.unlink(missing_ok=True)
    return folder / name


def load_checkpoint(folder: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]] | None:
    """The latest checkpoint in ``folder`` or None; BadInputError if it fails its sha256."""
    from safetensors.torch import load_file

    folder = Path(folder)
    index = folder / INDEX
    if not index.is_file():
        return None
    try:
        meta = json.loads(index.read_text())
    except json.JSONDecodeError as err:
        raise BadInputError(f"{index}: not valid JSON: {err}") from None
    path = folder / str(meta.get("tensors", ""))
    if not path.is_file():
        raise BadInputError(f"{index}: names {path.name}, which is missing")
    digest = sha256_file(path)
    if digest != meta.get("sha256"):
        raise BadInputError(
            f"{path}: sha256 {digest[:12]}... does not match {INDEX} ({str(meta.get('sha256'))[:12]}...); "
            "refusing to resume from a changed checkpoint (delete the folder to start over)"
        )
    return load_file(str(path)), meta
