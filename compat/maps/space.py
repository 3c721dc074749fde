"""A fitted map from one embedding space to another, whichever card it was opened from:
:class:`SpaceMap`, the one type backfill, the gate, the CLI and the evaluate stage apply, and
:class:`Joins`, what a caller needs a map to join.

Two kinds subclass it: psi (:class:`compat.maps.psi.Psi`, BiCT's upgrade module with psi's
upgrade card, :class:`compat.models.card.UpgradeCard`) and every :mod:`compat.maps` map
(:class:`compat.maps.store.Map`, a :class:`compat.maps.card.MapCard`). Both cards have ``kind``,
``from``/``to``, ``in_dim``/``out_dim``, ``weights_sha256``, ``refused`` and ``provenance``.
What differs is what else they record, and so what :meth:`SpaceMap.check_serves` can check
besides role and widths: psi's card names the two versions it joins and both versions' weights;
a map's card names the rows it was fitted on, each side's version (a file's name when the file
records none) and the weights that made them when it knows them. Both are checked against the
caller's :class:`Joins` by one function (:func:`compat.models.card.check_joined`), in the gate,
``compat score --query-adapter``, the MLflow model, evaluate and backfill alike. A map's card
also has its held-out check (a refused map is never served). A
refused psi is served: the upgrade stage saved the identity in its place, so serving it is "no
upgrade", which its provenance records.

This module imports no other module of :mod:`compat.maps` (and no torch): the kinds build on it,
and :mod:`compat.maps.folder` opens a folder as one of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from compat.errors import BadInputError
from compat.models.card import Joins  # what a caller needs a map to join

CARD = "card.json"


def card_joins(card: Any) -> tuple[tuple[str, str], tuple[str | None, str | None]]:
    """The versions a map's card says it joins and the weights digests of the rows it was
    fitted on (None: not recorded): psi's upgrade card names both; a :mod:`compat.maps` map's
    card names each side's ``version`` when its rows recorded one (else its ``from``/``to``
    name: a file's name) and the weights that made them when known."""
    if hasattr(card, "from_weights_sha256"):  # psi's UpgradeCard
        return (card.from_, card.to), (card.from_weights_sha256, card.to_weights_sha256)
    data = getattr(card, "data", None)
    source = getattr(data, "source", None) or {}
    target = getattr(data, "target", None) or {}
    return (
        (str(source.get("version") or card.from_), str(target.get("version") or card.to)),
        (source.get("weights_sha256"), target.get("weights_sha256")),
    )


@dataclass
class SpaceMap:
    """A fitted map from one embedding space to another, what
    :func:`compat.maps.folder.open_map` returns: its card, the applier that maps rows over fixed
    row blocks, and the folder it came from.

    Two kinds share this type: psi (:class:`compat.maps.psi.Psi`, an ``UpgradeCard``) and
    every :mod:`compat.maps` map (:class:`compat.maps.store.Map`, a ``MapCard``). Both cards
    have ``kind``, ``from``/``to``, ``in_dim``/``out_dim``, ``weights_sha256``, ``refused`` and
    ``provenance``; what else they record decides what :meth:`check_serves` can check (module
    docstring)."""

    card: Any
    applier: Any
    folder: Path | None = None

    # A refused psi's weights are the identity the upgrade stage saved: serving it is "no
    # upgrade". A refused map's weights are the fit its held-out check refused.
    serves_refused: ClassVar[bool] = False

    @property
    def kind(self) -> str:
        """``upgrade`` (psi) or a :data:`compat.maps.card.MAP_KINDS` kind."""
        return self.card.kind

    @property
    def role(self) -> str:
        """``gallery-map`` (old rows into the new space; psi's) or ``query-adapter``."""
        return self.card.role

    @property
    def from_(self) -> str:
        return self.card.from_

    @property
    def to(self) -> str:
        return self.card.to

    @property
    def in_dim(self) -> int:
        return self.card.in_dim

    @property
    def out_dim(self) -> int:
        return self.card.out_dim

    @property
    def weights_sha256(self) -> str:
        return self.card.weights_sha256

    @property
    def refused(self) -> str | None:
        """Why its fit was refused when it was fitted (None: kept)."""
        return None if self.card.refused is None else self.card.refused.reason

    @property
    def held_out_lower_bound(self) -> float | None:
        """The lower bound of its held-out gain that decided whether it was kept (None: its
        card records none)."""
        raise NotImplementedError

    @property
    def where(self) -> str:
        """Its card file, as errors name it."""
        return str(self.folder / CARD) if self.folder is not None else "map"

    def provenance(self, folder: str | Path | None = None) -> dict[str, Any]:
        """What a report records about it (its card's ``provenance``), at ``folder`` as the
        caller names it (default: the folder it was opened from)."""
        return self.card.provenance(self.folder if folder is None else folder)

    def check_serves(
        self,
        role: str,
        in_dim: int | None = None,
        rows_of: str = "the rows",
        out_dim: int | None = None,
        *,
        joins: Joins | None = None,
        allow_refused: bool = False,
    ) -> None:
        """BadInputError (exit 4, naming its card) unless it can be served as ``role`` on
        ``in_dim``-wide rows (``rows_of`` names them) into an ``out_dim``-wide space, joining
        what ``joins`` names, and its fit was not refused (a refused map is never served unless
        ``allow_refused``: evaluation measures it anyway; a refused psi is served, module
        docstring). Every width left None is not checked."""
        if self.role != role:
            raise BadInputError(
                f"{self.where}: role: a {self.role} map, but a {role} map is needed here"
            )
        self._check_joins(joins or Joins(), in_dim, rows_of)
        if out_dim is not None and self.out_dim != out_dim:
            raise BadInputError(
                f"{self.where}: out_dim: the map writes {self.out_dim}-dim rows, the space it "
                f"must reach is {out_dim}-dim"
            )
        if self.refused is not None and not (allow_refused or self.serves_refused):
            raise BadInputError(
                f"{self.where}: refused: the map's held-out check refused it when it was fitted "
                f"({self.refused}); a refused map is never served"
            )

    def joined(self) -> tuple[tuple[str, str], tuple[str | None, str | None]]:
        """What its card says it joins (:func:`card_joins`)."""
        return card_joins(self.card)

    def _check_joins(self, joins: Joins, in_dim: int | None, rows_of: str) -> None:
        """The versions and weights its card records against what it is served between
        (:func:`compat.models.card.check_joined`, the check psi's card gets too), and the rows'
        width."""
        from compat.models.card import check_joined

        versions, weights = self.joined()
        check_joined(
            self.where, versions, weights, subject="the map", verb="joins",
            source=joins.source, target=joins.target, wanted=joins.wanted,
            from_weights=joins.from_weights, to_weights=joins.to_weights,
            weights_origin=joins.weights_origin,
            rerun=joins.rerun or "fit the map again on these versions (compat adapt)",
        )  # fmt: skip
        if in_dim is not None and self.in_dim != in_dim:
            raise BadInputError(
                f"{self.where}: in_dim: the map reads {self.in_dim}-dim rows, {rows_of} are "
                f"{in_dim}-dim"
            )

    def apply(self, x: np.ndarray, start: int = 0) -> np.ndarray:
        """Rows ``start ..`` of a matrix mapped: float32 (n, out_dim), L2-normalised, over fixed
        row blocks (a row's bits do not depend on ``start`` or ``len(x)``)."""
        return self.applier.apply(np.asarray(x), start)


__all__ = ["CARD", "Joins", "SpaceMap", "card_joins"]
