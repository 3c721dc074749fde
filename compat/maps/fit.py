"""Fit a map between two embedding spaces from paired rows, check it, card it.

:func:`fit_map` holds out whole classes (rows, without labels; psi's split,
:func:`compat.maps.psi_heldout.heldout_split`), fits the map of ``kind`` on the rest
(:mod:`compat.maps.kinds`), checks it on the held-out pairs (:mod:`compat.maps.check`) and
returns it with its card: kept, or refused with both numbers. The weights kept are the ones
that were checked (fitted without the held-out pairs), so what the card reports is what is
applied.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from compat.errors import BadInputError
from compat.maps.card import MAP_ROLES, MapCard, MapData
from compat.maps.config import CheckConfig, Params
from compat.maps.store import Map, weights_blob


def pairs_fingerprint(
    source: np.ndarray,
    target: np.ndarray,
    labels: Sequence[Any] | None,
    ids: Sequence[str] | None = None,
) -> str:
    """16 hex digits of sha256 over both sides' float32 rows, the labels and the ids."""
    h = hashlib.sha256()
    for arr in (source, target):
        a = np.ascontiguousarray(arr, dtype=np.float32)
        h.update(repr(a.shape).encode())
        h.update(hashlib.sha256(a.tobytes()).digest())
    for extra in (labels, ids):
        h.update(repr(None if extra is None else [str(x) for x in extra]).encode())
    return h.hexdigest()[:16]


def _unit(x: np.ndarray, what: str, kind: str) -> np.ndarray:
    from compat.models.norms import l2_normalize_rows

    out, zero = l2_normalize_rows(x)
    if zero.size:
        raise BadInputError(
            f"map {kind}: {what}: row {int(zero[0])} has zero norm and cannot be L2-normalised"
        )
    return out


def fit_map(
    kind: str,
    source: np.ndarray,
    target: np.ndarray,
    *,
    labels: Sequence[Any] | None = None,
    ids: Sequence[str] | None = None,
    params: dict[str, Any] | Params | None = None,
    check: CheckConfig | None = None,
    role: str = "query-adapter",
    from_name: str = "new",
    to_name: str = "old",
    source_info: dict[str, Any] | None = None,
    target_info: dict[str, Any] | None = None,
) -> Map:
    """Fit, check and card a map of ``kind`` reading ``source`` rows (n, d_in) and writing the
    space of ``target`` rows (n, d_out), rows paired. ``role``: ``query-adapter`` (new -> old)
    or ``gallery-map`` (old -> new). ``labels`` (one per pair, optional) hold out whole classes
    and make the check class retrieval; ``ids`` go into the data fingerprint; ``source_info``
    and ``target_info`` (file or version, digest) into the card."""
    from compat.maps.check import check_map
    from compat.maps.kinds import kind_module, kind_params
    from compat.maps.psi_heldout import heldout_split
    from compat.models.version import package_versions

    module = kind_module(kind)
    p = kind_params(kind, params)
    cfg = check or CheckConfig()
    if role not in MAP_ROLES:
        raise BadInputError(f"map {kind}: role: unknown {role!r}; known: {', '.join(MAP_ROLES)}")
    x, y = np.asarray(source), np.asarray(target)
    if x.ndim != 2 or y.ndim != 2 or len(x) != len(y) or 0 in (*x.shape, *y.shape):
        raise BadInputError(
            f"map {kind}: pairs: expected two non-empty (n, d) arrays of equal n, got "
            f"{x.shape} and {y.shape}"
        )
    if labels is not None and len(labels) != len(x):
        raise BadInputError(f"map {kind}: labels: {len(labels)} labels for {len(x)} pairs")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise BadInputError(f"map {kind}: pairs: NaN or inf in the embeddings")
    xu, yu = _unit(x, "source rows", kind), _unit(y, "target rows", kind)
    fit_rows, val_rows, split = heldout_split(len(x), labels, cfg.val_fraction, cfg.seed)
    if len(fit_rows) < 2:
        raise BadInputError(f"map {kind}: pairs: {len(fit_rows)} pair(s) to fit on; needs >= 2")
    fit_labels = None if labels is None else [labels[i] for i in fit_rows]
    val_labels = None if labels is None else [labels[i] for i in val_rows]
    started = time.perf_counter()
    applier = module.fit(xu[fit_rows], yu[fit_rows], p, labels=fit_labels, seed=cfg.seed)
    seconds = time.perf_counter() - started
    held, refused = check_map(
        applier.apply, xu[val_rows], yu[val_rows], val_labels, cfg,
        role=role, kind=kind, split=split, num_fit=len(fit_rows),
    )  # fmt: skip
    record = p.model_dump(mode="json")
    if hasattr(applier, "shape"):  # the shape the module was built with (defaults resolved)
        record.update(applier.shape())
    card = MapCard.model_validate(
        {
            "kind": kind,
            "role": role,
            "from": from_name,
            "to": to_name,
            "in_dim": int(x.shape[1]),
            "out_dim": int(y.shape[1]),
            "params": {**record, "check": cfg.model_dump(mode="json")},
            "weights_sha256": hashlib.sha256(weights_blob(applier.state())).hexdigest(),
            "data": MapData(
                fingerprint=pairs_fingerprint(x, y, labels, ids),
                num_pairs=len(x),
                labelled=labels is not None,
                source=source_info,
                target=target_info,
            ),
            "fit_seconds": round(seconds, 4),
            "heldout": held,
            **({"refused": refused} if refused is not None else {}),
            "packages": package_versions(),
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
    )
    return Map(card, applier)


__all__ = ["fit_map", "pairs_fingerprint"]
