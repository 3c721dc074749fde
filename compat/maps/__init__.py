"""Fitted maps from one embedding space to another: one concept for query adapters and
gallery maps.

A team upgrades to a new model trained elsewhere, never trained to be compatible. A map fitted
on paired rows (the same items embedded by the new and the old model) maps *new queries into
the old space*, so the stored old gallery can be searched without a backfill (Drift-Adapter,
Vejendla, EMNLP 2025, arXiv 2509.23471): a **query adapter**. The other direction, stored old
rows into the new space, is BiCT's psi: a **gallery map**.

Every map has a card (:mod:`compat.maps.card`: kind, widths, weights sha256, data
fingerprint, fit time, held-out numbers, refusal), a fit (:func:`fit_map`), a refusal rule
(:mod:`compat.maps.check`: beat the baseline on held-out classes with the gate's bootstrap
confidence) and an ``apply`` over fixed row blocks (:mod:`compat.models.rowblocks`), so a row's
result is bit-identical whatever batch it arrives in. Kinds, one module each
(:mod:`compat.maps.kinds`): ``procrustes`` (closed-form (semi-)orthogonal map), ``affine``
(ridge closed form, optional low rank) and ``residual-mlp`` (psi's module and fit loop, reused).
On disk a map is a folder, ``weights.safetensors`` then ``card.json`` (:mod:`compat.maps.store`).

psi itself lives here too: its module and on-disk format (:mod:`compat.maps.psi`), its fit loop
(:mod:`compat.maps.psi_fit`, the ``upgrade`` stage's) and its params section
(:mod:`compat.maps.psi_config`). :func:`open_map` opens either folder, psi's
``models/<version>/upgrade/`` or a map's, as one :class:`SpaceMap` (:mod:`compat.maps.folder`):
what backfill, the gate, the CLI and the evaluate stage apply.
"""

from __future__ import annotations

from compat.maps.card import MAP_KINDS, MAP_ROLES, MapCard, read_map_card
from compat.maps.config import CheckConfig
from compat.maps.fit import fit_map
from compat.maps.folder import Joins, SpaceMap, open_card, open_map
from compat.maps.store import Map, load_map, save_map

__all__ = [
    "MAP_KINDS",
    "MAP_ROLES",
    "CheckConfig",
    "Joins",
    "Map",
    "MapCard",
    "SpaceMap",
    "fit_map",
    "load_map",
    "open_card",
    "open_map",
    "read_map_card",
    "save_map",
]
