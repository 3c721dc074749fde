"""Fitted maps from one embedding space to another: one concept for query adapters and
gallery maps.

A team upgrades to a new model trained elsewhere, never trained to be compatible. A map fitted
on paired rows (the same items embedded by the new and the old model) maps *new queries into
the old space*, so the stored old gallery can be searched without a backfill (Drift-Adapter,
Vejendla, EMNLP 2025, arXiv 2509.23471): a **query adapter**; where the old model still embeds
fresh queries, a **query blend** interpolates the adapted query with the old model's own on the
sphere (SLERP, Ricci et al., NeurIPS 2026). The other direction, stored old rows into the new
space, is BiCT's psi: a **gallery map**.

Every map has a card, a fit, a refusal rule (beat the baseline on held-out classes with the
gate's bootstrap confidence) and an ``apply`` over fixed row blocks
(:mod:`compat.models.rowblocks`), so a row's result is bit-identical whatever batch it arrives
in. :func:`open_map` opens either folder, psi's ``models/<version>/upgrade/`` or a map's, as one
:class:`SpaceMap`: what backfill, the gate, the CLI and the evaluate stage apply.

One concept per module:

* :mod:`compat.maps.space`        ``SpaceMap`` (every opened map: card, ``check_serves``,
  ``apply``) and ``Joins`` (what a caller needs it to join); imports no other module here
* :mod:`compat.maps.folder`       ``open_map`` / ``open_card``: a folder opened by its card's kind,
  looked up in the ``FOLDER_KINDS`` catalog (psi's upgrade card or a map card)
* :mod:`compat.maps.card`         ``MapCard``: kind, role, widths, weights sha256, data, held-out
  numbers, refusal
* :mod:`compat.maps.config`       ``CheckConfig`` (the refusal rule's settings) and the kinds'
  ``Params`` base (pydantic only)
* :mod:`compat.maps.kinds`        the ``KINDS`` catalog of fitted kinds, built by name, and their
  params validated
* :mod:`compat.maps.procrustes`   kind ``procrustes``: the closed-form (semi-)orthogonal map
* :mod:`compat.maps.affine`       kind ``affine``: the ridge closed form, optionally low rank
* :mod:`compat.maps.residual_mlp` kind ``residual-mlp``: psi's module fitted by psi's own loop
* :mod:`compat.maps.linear`       applying a fitted linear map over fixed row blocks (the two
  linear kinds)
* :mod:`compat.maps.check`        the refusal rule every fitted map obeys (held-out top-1 against
  no-map or old-self, paired bootstrap)
* :mod:`compat.maps.verdict`      one verdict: a map checked on a held-out set (the validation
  split) as the gate judges its served configuration; that check decides
* :mod:`compat.maps.blend`        query blends: the old model's query and the adapted new one
  interpolated on the sphere (SLERP), the weight selected on held-out classes
* :mod:`compat.maps.fit`          ``fit_map``: split, fit, check and card a map of any kind
* :mod:`compat.maps.store`        ``Map`` (a ``SpaceMap`` with a ``MapCard``), ``save_map`` and
  ``load_map`` (sha256 checked)
* :mod:`compat.maps.psi`          psi (BiCT's upgrade module): ``UpgradeModule``, its folded fast
  path, its folder on disk, ``Psi`` (psi as a ``SpaceMap``)
* :mod:`compat.maps.psi_fit`      psi's fit loop (``fit_upgrade``) and the ``upgrade`` stage's fit
  of a version (``train_upgrade``)
* :mod:`compat.maps.psi_heldout`  psi's held-out numbers: ``heldout_split``, ``heldout_top1``,
  ``gain_lower_bound``
* :mod:`compat.maps.psi_config`   the ``upgrade:`` params section (``UpgradeConfig``, pydantic
  only)
* :mod:`compat.maps.adapt`        the ``adapt`` stage's work: fit, check and save every declared
  map
* :mod:`compat.maps.adapt_config` the ``adapt:`` params section (``AdaptConfig``, pydantic only)
* :mod:`compat.maps.pairs`        paired rows from two embeddings files, matched by id
* :mod:`compat.maps.versions`     a version's embeddings through the embedding cache, written in
  any format
* :mod:`compat.maps.gallery`      the evaluate stage's forward cells: gallery maps opened and
  applied
* :mod:`compat.maps.query`        query adapters applied for evaluation (the adapted cells)
"""

from __future__ import annotations

from compat.maps.card import MAP_KINDS, MAP_ROLES, MapCard, read_map_card
from compat.maps.config import CheckConfig
from compat.maps.fit import fit_map
from compat.maps.folder import open_card, open_map
from compat.maps.space import Joins, SpaceMap
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
