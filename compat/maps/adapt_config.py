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

      v3-paragon-to-v1-blend: {new: v3-paragon, old: v1, kind: procrustes, blend: slerp}

Each entry is one map, named by its key (the folder ``maps/<name>/``, so a
:data:`compat.names.Name`). It is fitted on the pairs of ``new``'s own training split (the
split its model card names; never the evaluation classes) embedded by ``new`` and by ``old``:
role ``query-adapter`` maps new queries into the old space (Drift-Adapter, Vejendla, EMNLP
2025), ``gallery-map`` stored old rows into the new space (BiCT's psi direction). ``blend``
(``slerp``, or its parameters :class:`compat.maps.config.BlendParams`) makes the entry a
``query-blend``: the adapter's queries interpolated on the sphere with the old model's own,
the weight selected on held-out classes. The rest of an entry is the held-out check every map
passes (:class:`compat.maps.config.CheckConfig`: share of classes held out, the gate's
confidence, margin, resamples, seed); where the split has a validation set, the map is checked
there as the gate judges, and that check decides (:mod:`compat.maps.verdict`).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from compat.maps.card import MapKind, MapRole
from compat.maps.config import BlendParams, CheckConfig
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
        description="query-adapter: new -> old (Drift-Adapter); query-blend: the adapted query "
        "and the old model's own, interpolated (set by blend); gallery-map: old -> new (psi)",
    )
    blend: dict[str, Any] | None = Field(
        None,
        description="slerp, or the blend's parameters (compat.maps.config.BlendParams): the "
        "entry is a query blend",
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

    @field_validator("blend", mode="before")
    @classmethod
    def _blend(cls, v: Any) -> Any:
        if v is None:
            return None
        raw = {"method": v} if isinstance(v, str) else v
        from pydantic import ValidationError

        try:
            return BlendParams.model_validate(raw).model_dump(mode="json")
        except ValidationError as err:
            e = err.errors()[0]
            where = ".".join(str(p) for p in e["loc"]) or "blend"
            raise ValueError(f"{where}: {e['msg']}") from None

    @model_validator(mode="after")
    def _two_versions(self) -> AdaptConfig:
        if self.new == self.old:
            raise ValueError(f"new and old are both {self.new!r}: a map joins two versions")
        if (
            self.blend is not None
            and "role" in self.model_fields_set
            and self.role != "query-blend"
        ):
            raise ValueError(f"blend: a {self.role} has no blend (a blend is a query-blend)")
        if self.blend is not None or self.role == "query-blend":
            blend = self.blend if self.blend is not None else BlendParams().model_dump(mode="json")
            object.__setattr__(self, "blend", blend)
            object.__setattr__(self, "role", "query-blend")
        return self

    def check_config(self) -> CheckConfig:
        """The held-out check's part of the entry."""
        return CheckConfig(**{k: getattr(self, k) for k in CheckConfig.model_fields})

    @property
    def source(self) -> str:
        """The version whose rows the map reads."""
        return self.old if self.role == "gallery-map" else self.new

    @property
    def target(self) -> str:
        """The version whose space the map writes."""
        return self.new if self.role == "gallery-map" else self.old


__all__ = ["ADAPT_SECTION", "AdaptConfig"]
