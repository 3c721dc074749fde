"""One interface to every fitted map between embedding spaces, whichever card its folder holds.

A map folder holds ``weights.safetensors`` and ``card.json``. The card is either psi's upgrade
card (``models/<version>/upgrade/``, :class:`compat.models.card.UpgradeCard`, written by the
``upgrade`` stage) or a :mod:`compat.maps` map card (:class:`compat.maps.card.MapCard`, written by
``compat adapt`` and the ``adapt`` stage). :func:`open_map` reads the card, loads the weights
(their sha256 checked) and returns a :class:`SpaceMap`: :class:`compat.maps.psi.Psi` or
:class:`compat.maps.store.Map`. Backfill's engines, the gate (``serve: backfill`` and
``query-adapter``, ``forward`` criteria), ``compat score --query-adapter``, ``compat backfill``
and the evaluate stage's forward cells use it and never ask which card it was.

What differs between the two is what their cards record, and so what
:meth:`SpaceMap.check_serves` can check besides role and widths: psi's card names the two
versions it joins and both versions' weights (checked against the caller's :class:`Joins`); a
map's card names the rows it was fitted on, versions or files (not compared), and its held-out
check (a refused map is never served). A refused psi is served: the upgrade stage saved the
identity in its place, so serving it is "no upgrade", which its provenance records.

:func:`open_card` reads the card alone (no torch, no weights): what a backfill checks before it
reads a gallery.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from compat.errors import BadInputError, NotFoundError

if TYPE_CHECKING:
    from compat.maps.card import MapCard
    from compat.models.card import UpgradeCard

CARD = "card.json"


@dataclass(frozen=True)
class Joins:
    """What a caller needs a map to join: the versions and the weights they were at (what
    psi's card records, :func:`compat.models.card.check_upgrade`; each fact left None is not
    checked). ``wanted`` says in an error what the caller asked for, ``weights_origin`` where
    its digests come from, ``rerun`` the fix for stale weights."""

    source: str | None = None
    target: str | None = None
    wanted: str | None = None
    from_weights: str | None = None
    to_weights: str | None = None
    weights_origin: str = "the weights at hand are"
    rerun: str | None = None


@dataclass
class SpaceMap:
    """A fitted map from one embedding space to another, what :func:`open_map` returns: its
    card, the applier that maps rows over fixed row blocks, and the folder it came from.

    Two kinds share this type: psi (:class:`compat.maps.psi.Psi`, an :class:`UpgradeCard`) and
    every :mod:`compat.maps` map (:class:`compat.maps.store.Map`, a :class:`MapCard`). Both
    cards have ``kind``, ``from``/``to``, ``in_dim``/``out_dim``, ``weights_sha256``, ``refused``
    and ``provenance``; what else they record decides what :meth:`check_serves` can check
    (module docstring)."""

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

    def _check_joins(self, joins: Joins, in_dim: int | None, rows_of: str) -> None:
        """The facts its card records about what it joins, and the rows' width."""
        if in_dim is not None and self.in_dim != in_dim:
            raise BadInputError(
                f"{self.where}: in_dim: the map reads {self.in_dim}-dim rows, {rows_of} are "
                f"{in_dim}-dim"
            )

    def apply(self, x: np.ndarray, start: int = 0) -> np.ndarray:
        """Rows ``start ..`` of a matrix mapped: float32 (n, out_dim), L2-normalised, over fixed
        row blocks (a row's bits do not depend on ``start`` or ``len(x)``)."""
        return self.applier.apply(np.asarray(x), start)


def open_card(folder: str | os.PathLike[str]) -> MapCard | UpgradeCard:
    """The card of the map folder ``folder``: a :class:`MapCard` or psi's :class:`UpgradeCard`.

    NotFoundError (exit 3) naming the folder when it holds no ``card.json``; BadInputError
    (exit 4) when its card is neither (a model card, say), is not valid JSON or misses a
    field."""
    from compat.maps.card import MAP_KINDS, read_map_card
    from compat.models.card import UPGRADE_KIND, read_upgrade_card

    path = Path(folder)
    card_path = path / CARD
    if not card_path.is_file():
        raise NotFoundError(
            f"{card_path}: upgrade module card not found, nor a map card: {path} holds neither "
            "psi nor a fitted map"
        )
    try:
        data = json.loads(card_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return read_upgrade_card(path)  # names what is wrong with a card it cannot read
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind in MAP_KINDS:
        return read_map_card(path)
    if kind == UPGRADE_KIND:
        return read_upgrade_card(path)
    raise BadInputError(
        f"{card_path}: kind: neither psi's upgrade card nor a map card (kind {kind!r}; psi's is "
        f"{UPGRADE_KIND!r}, a map's one of {', '.join(MAP_KINDS)}): {path} holds neither psi "
        "nor a fitted map"
    )


def open_map(folder: str | os.PathLike[str], device: str = "cpu") -> SpaceMap:
    """The map in ``folder``, psi's or a :mod:`compat.maps` map, ready to apply on ``device``.

    Errors as :func:`open_card` for the card; then the weights' sha256 must equal the card's and
    the tensors must fit its shape (BadInputError naming the file)."""
    from compat.maps.card import MapCard

    if isinstance(open_card(folder), MapCard):
        from compat.maps.store import load_map

        return load_map(folder, device)
    from compat.maps.psi import open_psi  # torch: only now

    return open_psi(folder, device)


__all__ = ["CARD", "Joins", "SpaceMap", "open_card", "open_map"]
