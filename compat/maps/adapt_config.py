"""The ``adapt:`` section of params.yaml: the maps the ``adapt`` stage fits (import-light:
pydantic only; a kind's own parameters are checked by its module, imported when validated).

Example::

    adapt:
      v3-paragon-to-v1: {new: v3-paragon, old: v1, kind: procrustes}
      v3-paragon-to-v1-mlp:
        new: v3-paragon
        old: v1
        kind: residual-mlp
        params: {residual: false, loss: cosine, epochs: 20}

Each entry is one map, named by its key (the folder ``maps/<name>/``, so a
:data:`compat.names.Name`). It is fitted on the pairs of ``new``'s own training split (the
split its model card names; never the evaluation classes) embedded by ``new`` and by ``old``:
role ``query-adapter`` maps new queries into the old space (Drift-Adapter, Vejendla, EMNLP
2025), ``gallery-map`` stored old rows into the new space (BiCT's psi direction). The rest of an
entry is the held-out check every map passes (:class:`compat.maps.config.CheckConfig`: share of
classes held out, the gate's confidence, margin, resamples, seed).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from compat.maps.card import MapKind, MapRole
from compat.maps.config import CheckConfig
from compat.names import Name

ADAPT_SECTION = "adapt"


class AdaptConfig(CheckConfig):
    """One map of the ``adapt`` section; an unknown key, kind or kind parameter is an error
    naming params.yaml and the field (exit 4)."""

    new: Name = Field(description="the version whose training split the pairs are made of")
    old: Name = Field(description="the other version: the old gallery's (query-adapter)")
    kind: MapKind = Field(description="procrustes, affine or residual-mlp (compat.maps.kinds)")
    role: MapRole = Field(
        "query-adapter",
        description="query-adapter: new -> old (Drift-Adapter); gallery-map: old -> new (psi)",
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="the kind's parameters (its module's model)"
    )

    @field_validator("params")
    @classmethod
    def _kind_params(cls, params: dict[str, Any], info: Any) -> dict[str, Any]:
        kind = info.data.get("kind")
        if kind is None:  # the kind itself is wrong: that error is reported
            return params
        from compat.errors import CompatError
        from compat.maps.kinds import kind_params

        try:
            kind_params(kind, params)
        except CompatError as err:
            raise ValueError(err.message) from None
        return params

    @model_validator(mode="after")
    def _two_versions(self) -> AdaptConfig:
        if self.new == self.old:
            raise ValueError(f"new and old are both {self.new!r}: a map joins two versions")
        return self

    def check_config(self) -> CheckConfig:
        """The held-out check's part of the entry."""
        return CheckConfig(**{k: getattr(self, k) for k in CheckConfig.model_fields})

    @property
    def source(self) -> str:
        """The version whose rows the map reads."""
        return self.new if self.role == "query-adapter" else self.old

    @property
    def target(self) -> str:
        """The version whose space the map writes."""
        return self.old if self.role == "query-adapter" else self.new


__all__ = ["ADAPT_SECTION", "AdaptConfig"]
