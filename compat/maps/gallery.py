"""Gallery maps applied for evaluation: each map of ``evaluate.forward`` (psi's
``models/<version>/upgrade/`` or a :mod:`compat.maps` gallery map) opened (:func:`open_map`,
weights' sha256 checked), checked against the evaluated versions and applied to its source
version's evaluation-set rows: the forward cells M(new, psi(old)) of the evaluate stage.

:class:`ForwardMaps` is what ``stages/evaluate.py`` passes to
:func:`compat.evaluate.runner.run_evaluation` (which sits below this floor and never imports it).
A refused psi is applied (its weights are the identity; the report records the refusal and the
held-out lower bound that decided it), as the gate applies it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from compat.errors import BadInputError
from compat.maps.folder import open_card, open_map
from compat.maps.space import Joins, SpaceMap


def upgraded_embeddings(
    psi_dirs: Mapping[str, str | os.PathLike[str]],
    embeddings: Mapping[str, np.ndarray],
    weights: Mapping[str, str] | None = None,
) -> tuple[dict[str, tuple[str, np.ndarray]], dict[str, dict[str, Any]]]:
    """Open each new version's gallery map, check it against the evaluated versions' weights
    digests (``weights``: version -> sha256, when given) and map its ``from`` version's matrix;
    returns (upgraded, provenance per new version)."""
    return ForwardMaps(psi_dirs).upgrade(embeddings, weights)


class ForwardMaps:
    """The gallery maps of ``evaluate.forward`` (new version -> folder), opened at once: a
    missing or bad card or weights file fails before anything is embedded."""

    def __init__(self, folders: Mapping[str, str | os.PathLike[str]]) -> None:
        self.folders = dict(folders)
        self.maps: dict[str, SpaceMap] = {new: open_map(f) for new, f in self.folders.items()}

    def sources(self) -> dict[str, str]:
        """New version -> the version whose rows its map reads."""
        return {new: m.from_ for new, m in self.maps.items()}

    def upgrade(
        self, embeddings: Mapping[str, np.ndarray], weights: Mapping[str, str] | None = None
    ) -> tuple[dict[str, tuple[str, np.ndarray]], dict[str, dict[str, Any]]]:
        """(new version -> (old version, the map applied to old's rows), provenance per new
        version); BadInputError naming the card when a map was fitted on other weights than
        the evaluated ones or reads a version that was not embedded."""
        made = weights or {}
        upgraded: dict[str, tuple[str, np.ndarray]] = {}
        info: dict[str, dict[str, Any]] = {}
        for new, folder in self.folders.items():
            opened = self.maps[new]
            old = opened.from_
            joins = Joins(
                target=new,
                from_weights=made.get(old),
                to_weights=made.get(new),
                weights_origin="the evaluated ones are",
            )
            # measured even when refused, as evaluate measures a refused query adapter
            opened.check_serves("gallery-map", joins=joins, allow_refused=True)
            if old not in embeddings:
                raise BadInputError(
                    f"{opened.where}: from: {old!r} was not embedded (add it to the chain)"
                )
            upgraded[new] = (old, opened.apply(embeddings[old]))
            # The outcome of psi's refusal test, which decides what a backfill does (and can
            # differ across machines: docs/findings.md, "Determinism").
            info[new] = {
                **opened.provenance(folder),
                "refused": opened.refused,
                "held_out_lower_bound": opened.held_out_lower_bound,
            }
        return upgraded, info


def served_pair_maps(
    forward: Mapping[str, str | os.PathLike[str]], joins: Mapping[str, tuple[str, str]]
) -> ForwardMaps | None:
    """The gallery maps of ``forward`` (new version -> folder) that meet a query adapter of
    ``joins`` (map name -> (new, old)) on the same pair: the map upgrades ``old``'s rows into
    ``new``'s space while the adapter maps ``new``'s queries into ``old``'s. Those pairs get the
    partial-backfill curve of the served pair (:mod:`compat.evaluate.adapted`). Only the cards
    of versions an adapter serves are read, and only the maps of those pairs opened (their
    weights' sha256 checked); None when no pair has both."""
    pairs = set(joins.values())
    served = {new for new, _ in pairs}
    both = {
        new: f for new, f in forward.items() if new in served and (new, open_card(f).from_) in pairs
    }
    return ForwardMaps(both) if both else None


__all__ = ["ForwardMaps", "served_pair_maps", "upgraded_embeddings"]
