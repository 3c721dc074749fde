"""Fit a map between two embedding spaces from paired rows, check it, card it.

:func:`fit_map` holds out whole classes (rows, without labels; psi's split,
:func:`compat.maps.psi_heldout.heldout_split`), fits the map of ``kind`` on the rest
(:mod:`compat.maps.kinds`), checks it on the held-out pairs (:mod:`compat.maps.check`) and
returns it with its card: kept, or refused with both numbers. The weights kept are the ones
that were checked (fitted without the held-out pairs), so what the card reports is what is
applied.

A **query blend** (role ``query-blend``, :mod:`compat.maps.blend`) fits the adapter the same
way, then selects its weight: with a check set on half its classes, the blend then checked on
the other half; without one on half the held-out classes of the pairs, checked on the other
half. The weight is never checked on the rows that chose it.

With a **check set** (:class:`compat.maps.verdict.CheckSet`: a held-out set whose classes no
model was trained on, the pipeline's validation split) the map is also checked there as the gate
checks its served configuration (:func:`compat.maps.verdict.check_on_set`), and that check alone
decides whether it is kept: the held-out pairs are classes the new model was trained on, where
it looks better than on classes it never saw (issue 42, "one verdict").
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from compat.errors import BadInputError
from compat.maps.blend import select_on_set, select_weight, slerp
from compat.maps.card import MAP_ROLES, BlendInfo, MapCard, MapData, MapRefusal, SetCheck
from compat.maps.config import BlendParams, CheckConfig, Params
from compat.maps.store import Map, weights_blob
from compat.maps.verdict import CheckSet


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
    blend: dict[str, Any] | Params | None = None,
    check_set: CheckSet | None = None,
) -> Map:
    """Fit, check and card a map of ``kind`` reading ``source`` rows (n, d_in) and writing the
    space of ``target`` rows (n, d_out), rows paired. ``role``: ``query-adapter`` (new -> old)
    or ``gallery-map`` (old -> new). ``labels`` (one per pair, optional) hold out whole classes
    and make the check class retrieval; ``ids`` go into the data fingerprint; ``source_info``
    and ``target_info`` (file or version, digest) into the card. ``blend``: the query blend's
    parameters (:class:`compat.maps.config.BlendParams`; role ``query-blend`` only);
    ``check_set``: the set whose check decides (module docstring)."""
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
    if blend is not None and role != "query-blend":
        raise BadInputError(f"map {kind}: blend: only a query-blend map has one (role {role})")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise BadInputError(f"map {kind}: pairs: NaN or inf in the embeddings")
    xu, yu = _unit(x, "source rows", kind), _unit(y, "target rows", kind)
    fit_rows, val_rows, split = heldout_split(len(x), labels, cfg.val_fraction, cfg.seed)
    if len(fit_rows) < 2:
        raise BadInputError(f"map {kind}: pairs: {len(fit_rows)} pair(s) to fit on; needs >= 2")

    def labels_of(rows: np.ndarray) -> list[Any] | None:
        return None if labels is None else [labels[i] for i in rows]

    started = time.perf_counter()
    applier = module.fit(xu[fit_rows], yu[fit_rows], p, labels=labels_of(fit_rows), seed=cfg.seed)
    seconds = time.perf_counter() - started
    check_rows, apply, blended, bp = val_rows, applier.apply, None, None
    if role == "query-blend":
        bp = (
            BlendParams.model_validate(blend or {}) if not isinstance(blend, BlendParams) else blend
        )
        if check_set is not None:
            check_set = _prepared(check_set, kind, role, x, y)
        if check_set is not None and bp.weight is None:  # half its classes select the weight
            chosen, check_set = check_set.halves(cfg.seed)
            blended = select_on_set(
                chosen.manifest, chosen.old, applier.apply(chosen.new), bp, chosen.name
            )
        else:
            select_rows = val_rows
            if check_set is None and bp.weight is None:
                select_rows, check_rows = _halves(val_rows, labels, cfg.seed)
            blended = select_weight(
                yu[select_rows], applier.apply(xu[select_rows]), labels_of(select_rows), bp
            )
        w, old_rows = blended.weight, yu[check_rows]

        def apply(rows: np.ndarray) -> np.ndarray:  # the check's rows: the blend's u are theirs
            return slerp(old_rows, applier.apply(rows), w)

    held, refused = check_map(
        apply, xu[check_rows], yu[check_rows], labels_of(check_rows), cfg,
        role="gallery-map" if role == "gallery-map" else "query-adapter",
        kind=kind if blended is None else f"{kind} blend", split=split, num_fit=len(fit_rows),
    )  # fmt: skip
    verdict = None
    if check_set is not None:
        verdict, refused = _check_set(applier, blended, check_set, cfg, kind, role, x, y)
    record = p.model_dump(mode="json")
    if hasattr(applier, "shape"):  # the shape the module was built with (defaults resolved)
        record.update(applier.shape())
    if bp is not None:
        record["blend"] = bp.model_dump(mode="json")
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
            **({"blend": blended} if blended is not None else {}),
            **({"verdict": verdict} if verdict is not None else {}),
            **({"refused": refused} if refused is not None else {}),
            "packages": package_versions(),
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
    )
    return Map(card, applier)


def _halves(
    rows: np.ndarray, labels: Sequence[Any] | None, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` in two halves, by class with labels (whole classes in each), else by row;
    deterministic for ``seed``. The first selects a blend's weight, the second checks it."""
    from compat.maps.psi_heldout import heldout_split

    sub = None if labels is None else [labels[i] for i in rows]
    first, second, _ = heldout_split(len(rows), sub, 0.5, seed + 1)
    return rows[first], rows[second]


def _prepared(check_set: CheckSet, kind: str, role: str, x: np.ndarray, y: np.ndarray) -> CheckSet:
    """``check_set`` with its rows checked (the shape its manifest and the pairs' widths call
    for, finite) and L2-normalised; BadInputError naming the set otherwise."""
    new_w, old_w = (x.shape[1], y.shape[1]) if role != "gallery-map" else (y.shape[1], x.shape[1])
    n = len(check_set.manifest.items)
    for side, rows, width in (("new", check_set.new, new_w), ("old", check_set.old, old_w)):
        if rows.ndim != 2 or rows.shape != (n, width):
            raise BadInputError(
                f"map {kind}: check set {check_set.name}: the {side} rows have shape "
                f"{rows.shape}, expected ({n}, {width})"
            )
        if not np.isfinite(rows).all():
            raise BadInputError(f"map {kind}: check set {check_set.name}: NaN or inf rows")
    new = _unit(check_set.new, "check set rows", kind)
    old = _unit(check_set.old, "check set rows", kind)
    return CheckSet(check_set.name, check_set.manifest, new, old, check_set.fingerprint)


def _check_set(
    applier: Any,
    blended: BlendInfo | None,
    check_set: CheckSet,
    cfg: CheckConfig,
    kind: str,
    role: str,
    x: np.ndarray,
    y: np.ndarray,
) -> tuple[SetCheck, MapRefusal | None]:
    """The check on ``check_set`` as the gate judges the configuration serving the map."""
    from compat.maps.verdict import check_on_set

    cs = _prepared(check_set, kind, role, x, y)
    if role == "gallery-map":
        queries, gallery = cs.new, applier.apply(cs.old)
    elif blended is not None:
        queries, gallery = slerp(cs.old, applier.apply(cs.new), blended.weight), cs.old
    else:
        queries, gallery = applier.apply(cs.new), cs.old
    label = kind if blended is None else f"{kind} blend"
    return check_on_set(queries, gallery, cs, cfg, kind=label)


__all__ = ["fit_map", "pairs_fingerprint"]
