"""One interface to every fitted map between embedding spaces, whichever card its folder holds:
:func:`open_map` -> :class:`compat.maps.space.SpaceMap`.

A map folder holds ``weights.safetensors`` and ``card.json``. The card is either psi's upgrade
card (``models/<version>/upgrade/``, :class:`compat.models.card.UpgradeCard`, written by the
``upgrade`` stage) or a :mod:`compat.maps` map card (:class:`compat.maps.card.MapCard`, written by
``compat adapt`` and the ``adapt`` stage). :func:`open_map` reads the card, loads the weights
(their sha256 checked) and returns a :class:`~compat.maps.space.SpaceMap`:
:class:`compat.maps.psi.Psi` or :class:`compat.maps.store.Map`. Backfill's engines, the gate
(``serve: backfill`` and ``query-adapter``, ``forward`` criteria), ``compat score
--query-adapter``, ``compat backfill`` and the evaluate stage's forward cells use it and never
ask which card it was; what each card lets :meth:`~compat.maps.space.SpaceMap.check_serves`
check is :mod:`compat.maps.space`'s docstring.

How a folder is read and opened is looked up by its card's ``kind`` in :data:`FOLDER_KINDS`, a
catalog (:class:`compat.catalog.Catalog`, built by name as the map kinds are): psi's ``upgrade``
opens with :func:`compat.maps.psi.open_psi`, each map kind (:data:`compat.maps.card.MAP_KINDS`)
with :func:`compat.maps.store.load_map`. It is a catalog of its own, not psi's kind registered in
:data:`compat.maps.kinds.KINDS`: a kind there is one ``fit_map`` can fit (a params model, ``fit``,
``from_state``) and ``compat adapt`` and the ``adapt`` section accept by name, which psi (fitted
by the ``upgrade`` stage, its own card and weights layout) is not; and importing the kinds
imports torch (``residual-mlp`` is psi's module), which the card alone must not need.

:func:`open_card` reads the card alone (no torch, no weights): what a backfill checks before it
reads a gallery. psi's module (torch) is imported only when a psi is opened.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from compat.catalog import Catalog
from compat.errors import BadInputError, NotFoundError
from compat.maps.card import MAP_KINDS, MapCard, read_map_card
from compat.maps.space import CARD
from compat.maps.store import load_map
from compat.models.card import UPGRADE_KIND, UpgradeCard, read_upgrade_card

if TYPE_CHECKING:
    from compat.maps.space import SpaceMap


@dataclass(frozen=True)
class FolderKind:
    """How a folder whose card has one kind is read (the card alone, torch-free) and opened
    (the card, then the weights, sha256 checked, ready to apply on a device)."""

    read_card: Callable[[Path], MapCard | UpgradeCard]
    open: Callable[[str | os.PathLike[str], str], SpaceMap]


def _open_psi(folder: str | os.PathLike[str], device: str) -> SpaceMap:
    from compat.maps.psi import open_psi  # torch: only now, never for the card alone

    return open_psi(folder, device)


FOLDER_KINDS: Catalog[FolderKind] = Catalog("map card kind")
_PSI = FolderKind(read_upgrade_card, _open_psi)
_MAP = FolderKind(read_map_card, load_map)
FOLDER_KINDS.register(UPGRADE_KIND)(lambda: _PSI)
for _kind in MAP_KINDS:
    FOLDER_KINDS.register(_kind)(lambda: _MAP)


def open_card(folder: str | os.PathLike[str]) -> MapCard | UpgradeCard:
    """The card of the map folder ``folder``: a :class:`MapCard` or psi's :class:`UpgradeCard`.

    NotFoundError (exit 3) naming the folder when it holds no ``card.json``; BadInputError
    (exit 4) when its card is neither (a model card, say), is not valid JSON or misses a
    field."""
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
    if isinstance(kind, str) and kind in FOLDER_KINDS:  # a list or dict read from JSON is no kind
        return FOLDER_KINDS.create(kind).read_card(path)
    raise BadInputError(
        f"{card_path}: kind: neither psi's upgrade card nor a map card (kind {kind!r}; psi's is "
        f"{UPGRADE_KIND!r}, a map's one of {', '.join(MAP_KINDS)}): {path} holds neither psi "
        "nor a fitted map"
    )


def open_map(folder: str | os.PathLike[str], device: str = "cpu") -> SpaceMap:
    """The map in ``folder``, psi's or a :mod:`compat.maps` map, ready to apply on ``device``.

    Errors as :func:`open_card` for the card; then the weights' sha256 must equal the card's and
    the tensors must fit its shape (BadInputError naming the file). How is looked up in
    :data:`FOLDER_KINDS` by the card's kind."""
    return FOLDER_KINDS.create(open_card(folder).kind).open(folder, device)


__all__ = ["FOLDER_KINDS", "FolderKind", "open_card", "open_map"]
