"""The kinds of map, built by name (:class:`compat.catalog.Catalog`): one module per kind.

Each kind module has a pydantic parameter model, ``fit(x, y, params, labels=, seed=)`` returning
an applier (``apply(rows, start)`` over fixed row blocks, ``state()`` the tensors to save) and
``from_state(state, in_dim, out_dim, params, device)`` building the applier again from a saved
map. An unknown kind lists the known ones; an unknown or bad parameter names itself.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from pydantic import ValidationError

from compat.catalog import Catalog
from compat.errors import BadInputError, UsageError
from compat.maps import affine, procrustes, residual_mlp
from compat.maps.config import Params

KINDS: Catalog[ModuleType] = Catalog("map kind")
_PARAMS: dict[str, type[Params]] = {
    "procrustes": procrustes.ProcrustesParams,
    "affine": affine.AffineParams,
    "residual-mlp": residual_mlp.ResidualMLPParams,
}
for _name, _module in (
    ("procrustes", procrustes),
    ("affine", affine),
    ("residual-mlp", residual_mlp),
):
    KINDS.register(_name)(lambda m=_module: m)


def kind_module(kind: str, where: str | None = None) -> ModuleType:
    """The module of ``kind``; UsageError (or BadInputError about ``where``) when unknown."""
    return KINDS.get(kind, where)()


def kind_params(
    kind: str, raw: dict[str, Any] | Params | None = None, where: str | None = None
) -> Params:
    """``raw`` validated as ``kind``'s parameters. A bad key or value is a UsageError (exit 2;
    given on the command line) or, with ``where`` (a file), a BadInputError naming it."""
    kind_module(kind, where)
    model = _PARAMS[kind]
    if isinstance(raw, model):
        return raw
    try:
        return model.model_validate(dict(raw or {}))
    except ValidationError as err:
        e = err.errors()[0]
        field = ".".join(str(p) for p in e["loc"]) or "params"
        why = "unknown parameter" if e["type"] == "extra_forbidden" else e["msg"]
        known = ", ".join(model.model_fields)
        message = f"map {kind}: {field}: {why} (parameters: {known})"
        if where is not None:
            raise BadInputError(f"{where}: {message}") from None
        raise UsageError(message) from None


__all__ = ["KINDS", "kind_module", "kind_params"]
