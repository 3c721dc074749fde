"""Paired rows for a map: the same items embedded by two models, matched by id.

:func:`read_rows` reads any embeddings file compat reads (``.npz`` bundle, ``.npy`` matrix with
its ``.meta.npz`` sidecar, a folder of Parquet shards; :mod:`compat.embeddings.formats`), every
row checked finite. :func:`match_pairs` pairs two such sets by their ``ids`` (row for row when
neither has ids and both have as many rows) and refuses, naming the file, a pairing that covers
less than ``min_match`` of the smaller set.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from compat.errors import BadInputError


@dataclass
class Rows:
    """One side's rows, with what they are named and labelled by, and where they came from."""

    embeddings: np.ndarray  # (n, d) float32
    ids: list[str] | None
    labels: list[Any] | None
    where: str
    info: dict[str, Any] = field(default_factory=dict)  # file/version, sha256, fingerprint


@dataclass
class Pairs:
    """Rows paired item for item: ``new[i]`` and ``old[i]`` embed the same item ``ids[i]``."""

    new: np.ndarray
    old: np.ndarray
    ids: list[str] | None
    labels: list[Any] | None
    new_info: dict[str, Any]
    old_info: dict[str, Any]
    notes: list[str] = field(default_factory=list)


def read_rows(path: str | os.PathLike[str], labels: bool = True) -> Rows:
    """Every row of an embeddings file (any format), its ids and labels when it has them
    (``labels=False``: the labels are not read, and an ``.npz`` may have none)."""
    from compat.embeddings.reader import GalleryReader

    r = GalleryReader(path, labels=labels)
    parts = [b.embeddings for b in r.blocks(65536, with_columns=False)]  # each checked finite
    emb = np.ascontiguousarray(np.concatenate(parts) if parts else np.zeros((0, r.dim)), np.float32)
    ids = None if r.ids is None else [str(i) for i in r.ids]
    got = r.labels if labels else None
    labels_out = None if got is None else [int(v) for v in got]
    info = {"file": str(Path(path)), "sha256": r.sha256(), "rows": r.n, "dim": r.dim}
    if r.version:
        info["version"] = r.version
    if r.fingerprint:
        info["fingerprint"] = r.fingerprint
    return Rows(emb, ids, labels_out, r.where, info)


def _index(rows: Rows) -> dict[str, int]:
    index: dict[str, int] = {}
    for i, item in enumerate(rows.ids or []):
        if index.setdefault(item, i) != i:
            raise BadInputError(f"{rows.where}: ids: {item!r} occurs twice; ids must be unique")
    return index


def match_pairs(new: Rows, old: Rows, *, min_match: float = 0.9) -> Pairs:
    """``new`` and ``old`` paired by id (in ``new``'s order); BadInputError naming the file
    when fewer than ``min_match`` of the smaller set's rows find their partner."""
    notes: list[str] = []
    if new.ids is None or old.ids is None:
        if len(new.embeddings) != len(old.embeddings):
            without = new if new.ids is None else old
            other = old if without is new else new
            raise BadInputError(
                f"{without.where}: ids: no ids to pair its {len(without.embeddings)} rows with "
                f"the {len(other.embeddings)} rows of {other.where} by (store ids, or give both "
                "files the same items in the same order)"
            )
        notes.append(
            "no ids in "
            + (new.where if new.ids is None else old.where)
            + ": rows paired row for row"
        )
        new_rows = old_rows = np.arange(len(new.embeddings))
        ids = new.ids or old.ids
    else:
        old_index = _index(old)
        _index(new)
        pairs = [(i, old_index[item]) for i, item in enumerate(new.ids) if item in old_index]
        smaller = new if len(new.ids) <= len(old.ids) else old
        other = old if smaller is new else new
        share = len(pairs) / max(1, len(smaller.ids))
        if not pairs or share < min_match:
            raise BadInputError(
                f"{smaller.where}: ids: {len(pairs)} of its {len(smaller.ids)} rows have a row "
                f"with the same id in {other.where} ({share:.1%}; at least {min_match:.0%} must "
                "pair up: are both files embeddings of the same items?)"
            )
        new_rows = np.asarray([i for i, _ in pairs], dtype=np.int64)
        old_rows = np.asarray([j for _, j in pairs], dtype=np.int64)
        ids = [new.ids[i] for i in new_rows]
        if len(pairs) < max(len(new.ids), len(old.ids)):
            notes.append(
                f"{len(pairs)} paired rows ({len(new.ids)} in {new.where}, {len(old.ids)} in "
                f"{old.where})"
            )
    labels = _labels(new, old, new_rows, old_rows)
    return Pairs(
        new.embeddings[new_rows], old.embeddings[old_rows], ids, labels, new.info, old.info, notes
    )


def _labels(new: Rows, old: Rows, nr: np.ndarray, orows: np.ndarray) -> list[Any] | None:
    a = None if new.labels is None else [new.labels[i] for i in nr]
    b = None if old.labels is None else [old.labels[i] for i in orows]
    if a is not None and b is not None and a != b:
        bad = sum(x != y for x, y in zip(a, b, strict=True))
        raise BadInputError(
            f"{old.where}: labels: {bad} of {len(a)} paired items have another label than in "
            f"{new.where}; paired rows must be the same items"
        )
    return a if a is not None else b


__all__ = ["Pairs", "Rows", "match_pairs", "read_rows"]
