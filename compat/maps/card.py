"""The card beside a fitted map's weights: what the map is, what it was fitted on, how it did.

``<map folder>/card.json`` is a :class:`MapCard`: the map's ``kind`` (``procrustes``,
``affine``, ``residual-mlp``), its ``role`` (a query adapter maps new queries into the old
space, Drift-Adapter's direction; a query blend interpolates on the sphere between the old
model's own query embedding and the adapted new one, :mod:`compat.maps.blend`; a gallery map
maps stored old rows into the new space, BiCT's psi direction), the widths it joins, the sha256
of its weights (checked on every load), the fingerprint of the paired rows it was fitted on, the
fit time, the held-out check on held-out classes of the fit pairs (:mod:`compat.maps.check`),
the blend's weight (``blend``), the check on a held-out set as the gate judges
(``verdict``, :mod:`compat.maps.verdict`) and, when the deciding check refused the map, why
(both numbers).

One reader and one writer, shared with the other cards (:class:`compat.models.card._Card`: sorted
keys, fields never set left out, an unknown field an error). No torch here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from compat.errors import BadInputError
from compat.models.card import CARD_SCHEMA, _Card

MAP_KINDS = ("procrustes", "affine", "residual-mlp")
MAP_ROLES = ("query-adapter", "query-blend", "gallery-map")
BASELINES = ("no-map", "old-self")

MapKind = Literal["procrustes", "affine", "residual-mlp"]
MapRole = Literal["query-adapter", "query-blend", "gallery-map"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class MapData(_Strict):
    """The paired rows a map was fitted on: where each side came from and their digest."""

    fingerprint: str  # sha256 (16 hex) of both sides' rows, ids and labels
    num_pairs: int = Field(ge=0)
    labelled: bool
    source: dict[str, Any] | None = None  # the rows the map reads: file or version, sha256
    target: dict[str, Any] | None = None  # the rows it writes towards


class HeldOut(_Strict):
    """The check on held-out pairs (:mod:`compat.maps.check`): top-1 retrieval with the map,
    the baseline it had to beat and the paired bootstrap lower bound of the difference."""

    metric: str  # "top1"
    retrieval: Literal["class", "pair"]  # class labels, or each item's own row
    split: Literal["classes", "rows"]  # what was held out
    num_fit: int = Field(ge=0)
    num_heldout: int = Field(ge=0)
    queries: int = Field(ge=0)  # held-out queries scored (with a positive)
    mapped: float | None = None
    baseline: float | None = None
    baseline_kind: Literal["no-map", "old-self"] | None = None
    no_map: float | None = None  # the raw rows (two widths: truncated, BCT)
    no_map_lower_bound: float | None = None  # its one-sided bootstrap bound (near chance?)
    old_self: float | None = None  # the old model's self test M(old, old) (labels only)
    chance: float | None = None  # what a random ranking scores
    difference: float | None = None
    lower_bound: float | None = None
    interval: list[float | None] | None = None
    confidence: float
    min_gain: float
    resamples: int = Field(ge=0)


class BlendInfo(_Strict):
    """A query blend's interpolation (:mod:`compat.maps.blend`): the weight on the adapted new
    query (0: the old model's own query, 1: the adapter alone), selected on held-out classes,
    and the held-out score of every weight tried."""

    method: Literal["slerp"]
    weight: float = Field(ge=0, le=1)
    selected_on: int = Field(ge=0)  # held-out queries the weight was selected on
    set: str | None = None  # where: a check set's half (None: held-out classes of the pairs)
    metric: str = "mAP"  # what selected it (identification, held out)
    scores: dict[str, float | None] = Field(default_factory=dict)  # weight -> that metric


class SetCheck(_Strict):
    """The map checked as the gate checks its served configuration (:mod:`compat.maps.verdict`):
    on a held-out set whose classes no model was trained on (the pipeline's validation split),
    identification top-1 of the served queries on the old gallery against M(old, old), the
    paired bootstrap's one-sided lower bound of the difference above ``min_gain``."""

    set: str  # what the set is: "split:validation", a file
    fingerprint: str | None = None  # the set manifest's fingerprint
    metric: str  # "top1"
    queries: int = Field(ge=0)
    served: float | None = None  # M(served queries, old gallery)
    old_self: float | None = None  # M(old, old)
    difference: float | None = None
    lower_bound: float | None = None
    interval: list[float | None] | None = None
    confidence: float
    min_gain: float
    resamples: int = Field(ge=0)


class MapRefusal(_Strict):
    """Why a fitted map was refused: on held-out data it did not beat its baseline with the
    required confidence (or there was nothing held out to check it on)."""

    reason: str
    mapped: float | None = None
    baseline: float | None = None
    baseline_kind: Literal["no-map", "old-self"] | None = None
    lower_bound: float | None = None


class MapCard(_Card):
    """``<map folder>/card.json``: a fitted map between two embedding spaces."""

    what: ClassVar[str] = "map card"

    kind: MapKind
    role: MapRole
    from_: str = Field(alias="from")  # the space the map reads (a version, or a file's name)
    to: str
    in_dim: int = Field(ge=1)
    out_dim: int = Field(ge=1)
    params: dict[str, Any] = Field(default_factory=dict)
    weights_sha256: str
    data: MapData
    fit_seconds: float = Field(ge=0)
    heldout: HeldOut | None = None
    blend: BlendInfo | None = None  # role query-blend: the weight on the adapted query
    verdict: SetCheck | None = None  # the check as the gate judges (decides when present)
    refused: MapRefusal | None = None
    card_schema: int = Field(CARD_SCHEMA, alias="schema")
    packages: dict[str, str] | None = None
    created_at: str | None = None

    @classmethod
    def from_json(cls, data: Any, where: str | Path) -> MapCard:
        # Say "not a map card" before listing fields: psi's upgrade card or a model card put
        # where a map belongs is the likely mistake, and its missing fields would bury that.
        if not isinstance(data, dict) or data.get("kind") not in MAP_KINDS:
            got = data.get("kind") if isinstance(data, dict) else None
            raise BadInputError(
                f"{where}: kind: not a map card (kind {got!r}; a map is one of "
                f"{', '.join(MAP_KINDS)})"
            )
        return super().from_json(data, where)

    @model_validator(mode="after")
    def _blend_role(self) -> MapCard:
        if (self.role == "query-blend") != (self.blend is not None):
            raise ValueError("blend: a query-blend map has a blend weight, no other role has one")
        return self

    @property
    def is_refused(self) -> bool:
        """True when the held-out check refused the map (the weights are the ones it checked)."""
        return self.refused is not None

    def provenance(self, folder: str | Path) -> dict[str, Any]:
        """What a report records about the map it used: enough to name it again."""
        return {
            "path": str(folder),
            "kind": self.kind,
            "role": self.role,
            "from": self.from_,
            "to": self.to,
            "weights_sha256": self.weights_sha256,
            "data_fingerprint": self.data.fingerprint,
            "refused": None if self.refused is None else self.refused.reason,
            **({"blend_weight": self.blend.weight} if self.blend is not None else {}),
        }


def read_map_card(path: str | Path) -> MapCard:
    """The card of a map folder (or the card file itself)."""
    return MapCard.read(path)


def write_map_card(path: str | Path, card: MapCard) -> Path:
    """Write a map card atomically into a map folder (or onto a card file)."""
    return card.write(path)


__all__ = [
    "BASELINES",
    "MAP_KINDS",
    "MAP_ROLES",
    "BlendInfo",
    "HeldOut",
    "MapCard",
    "MapData",
    "MapKind",
    "MapRefusal",
    "MapRole",
    "SetCheck",
    "read_map_card",
    "write_map_card",
]
