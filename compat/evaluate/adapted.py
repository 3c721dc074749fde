"""The adapted cells of a query adapter: a new model's queries mapped into the old space search
the old gallery as stored (Drift-Adapter, Vejendla, EMNLP 2025, arXiv 2509.23471).

For each map of ``evaluate.adapters`` (a :mod:`compat.maps` map of role ``query-adapter``, from
``new`` to ``old``, or a query blend, whose served queries interpolate the adapted ones with the
old model's own: the ``adapted`` cell is then M(blend(new), old)), on the evaluation manifest and
for every protocol of the config:

* ``adapted`` M(adapt(new), old): the adapted queries on the old gallery, no backfill;
* ``native``  M(new, old): the raw new queries on the old gallery (BCT's cross test). Between two
  widths only when the new version's card declares a ``dim_mismatch`` (as the chain's cells);
  otherwise null, with a note: not comparable;
* ``old``     M(old, old): what the service has before the upgrade;
* ``self``    M(new, new): a full backfill to the new model;
* ``bct``     M(v, old) for the chain version v that ``evaluate.counterpart`` names for ``new``
  (BCT's version trained on the same data: v3 for a v3-scratch), else the one whose paragon
  ``new`` is (e.g. BCT's v3 when ``new`` is v3-paragon), when the chain has that cell;

with paired bootstrap intervals (:func:`compat.compare.engine.compare`, one call per protocol,
stream = the protocol's name, exactly as :mod:`compat.evaluate.forward`); ``adapted_minus_old``
with its one-sided lower bound at the config's confidence and ``passes``, whether that bound is
above 0: BCT's criterion (Shen et al., CVPR 2020, Eq. 2) for the adapted queries, judged as the
gate judges it; ``adapted_minus_native``; ``gain``, BCT Eq. 9 with the new model's self test as
the denominator, (M(adapt(new), old) - M(old, old)) / (M(new, new) - M(old, old)): the share of a
full backfill's benefit the adapter keeps; ``recovery``, M(adapt(new), old) / M(v, old), the
adapted cell as a share of BCT's compatible cross cell, with the percentile interval of the
per-resample ratios; and ``bct_gain``, BCT's own update gain (M(v, old) - M(old, old)) /
(M(new, new) - M(old, old)) against the new model, with its interval: where ``new`` was trained
from scratch without compatibility terms, that is the paper's paragon (BCT Eq. 9).

The matrix row of the adapted queries is named as the gate names it
(:func:`compat.contracts.schema.adapter_name`, ``adapt(v3-paragon)``) for the map at the
contract's default folder name ``<new>-to-<old>``; any other map of the same version is named
by its map: ``adapt(v3-paragon-to-v1-affine)``. A map refused by its own held-out check when it
was fitted is still evaluated (the entry names the refusal; the gate would never serve it).

The maps are loaded and applied by the caller (:func:`compat.maps.query.adapted_embeddings`,
passed to :func:`run_adapted`): this module never imports :mod:`compat.maps`, which sits above
its floor (the evaluate stage's gallery maps come the same way: :mod:`compat.maps.gallery`,
passed to :func:`compat.evaluate.runner.run_evaluation`). The ``evaluate-adapters`` stage
(``stages/evaluate_adapters.py``) writes ``metrics/adapted.json``; the evaluate stage's own
outputs are the same with or without ``evaluate.adapters``.

**With a psi for the same pair** (``upgraded[new]`` = (old, psi(old rows)), e.g. from
``evaluate.forward``), the entry also has ``forward`` M(new, psi(old)) (with
``forward_minus_old``, BCT's criterion for the upgraded gallery, and ``forward_minus_adapted``)
and the **partial-backfill curve of the served pair**: the service answers the new model's
queries through the adapter while psi upgrades the stored gallery, a share f at a time (the
fractions, random order and per-item masks of :mod:`compat.evaluate.forward`). At f the rows not yet
upgraded are searched with the adapted queries adapt(q) in the old space, the upgraded rows with
the raw queries q in the new space, the two groups' scores put on one scale per query
(:func:`compat.embeddings.mixed.calibrated_two_spaces`, ``match``: each group's moments measured
on the whole gallery in its own space). f = 0 is the adapted cell, f = 1 the forward cell;
``curve_raw`` merges raw scores. When psi's ``from`` is not the adapter's old version, or psi
maps into another width than the new version's, there is no curve (a note says why).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from compat.compare.bootstrap import percentile_interval
from compat.compare.engine import Comparison, compare, num, num_pair
from compat.evaluate.compared import ComparedMetric
from compat.evaluate.config import EvaluateConfig
from compat.evaluate.manifest import EvalSetLike, evaluate_manifest, label_codes
from compat.evaluate.protocols import ProtocolResult, create_protocols
from compat.io import write_json

TERMS = ("adapted", "native", "old", "self", "bct")
ADAPTED_FILE = "adapted.json"

CellKey = tuple[str, str]
Upgraded = tuple[str, np.ndarray]  # (old version, psi(old rows) in the new version's space)


def adapted_row(name: str, new: str, old: str, role: str = "query-adapter") -> str:
    """The matrix row of map ``name``'s adapted queries: ``adapt(<new>)`` (the gate's name,
    :func:`compat.contracts.schema.adapter_name`) for the map named ``<new>-to-<old>`` (the
    contract's default folder), else ``adapt(<name>)``; a query blend's ``blend(<new>)`` for
    ``<new>-to-<old>-blend``, else ``blend(<name>)``."""
    if role == "query-blend":
        return f"blend({new})" if name == f"{new}-to-{old}-blend" else f"blend({name})"
    return f"adapt({new})" if name == f"{new}-to-{old}" else f"adapt({name})"


@dataclass
class AdaptedRows:
    """A query adapter applied to the new version's evaluation-set rows."""

    name: str  # the map's name (its key in evaluate.adapters)
    new: str
    old: str
    rows: np.ndarray  # adapt(embeddings[new]) (or the blend's): (n, old's width), L2-normalised
    info: dict[str, Any] = field(default_factory=dict)  # the map's provenance
    role: str = "query-adapter"  # or query-blend: the adapted rows interpolated with old's

    @property
    def row(self) -> str:
        return adapted_row(self.name, self.new, self.old, self.role)


def adapted_versions(config: EvaluateConfig, joins: Mapping[str, tuple[str, str]]) -> list[str]:
    """Every version the adapted cells need, each once: each map's ``(new, old)`` of ``joins``
    and the chain version whose paragon ``new`` is (for the recovery of BCT's cross cell)."""
    bct_of = {**{p: v for v, p in config.paragon.items()}, **config.counterpart}
    out: list[str] = []
    for new, old in joins.values():
        bct = bct_of.get(new)
        chain = list(config.chain)
        extra = [bct] if bct and old in chain and chain.index(bct) > chain.index(old) else []
        out += [v for v in (new, old, *extra) if v not in out]
    return out


def run_adapted(
    config: EvaluateConfig,
    manifest: EvalSetLike,
    load_images: Any,
    source_fingerprint: str,
    load_model: Any,
    cache_root: str | os.PathLike[str],
    joins: Mapping[str, tuple[str, str]],
    apply: Callable[[dict[str, np.ndarray], dict[str, str]], Mapping[str, AdaptedRows]],
    *,
    weights_of: Callable[[str], str] | None = None,
    dim_mismatch_of: Callable[[str], str | None] | None = None,
    upgrade: Callable[[dict[str, np.ndarray], dict[str, str]], Mapping[str, Upgraded]]
    | None = None,
    report: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The ``adapted`` entries of ``config.adapters``: embed the versions they need through the
    cache (:func:`compat.evaluate.runner.embed_all`, as the evaluate stage does, so its entries
    are hits), map the new versions' rows by ``apply(embeddings, weights)`` (the maps, loaded
    and checked by :func:`compat.maps.query.adapted_embeddings`) and evaluate every cell.
    ``joins``: map name -> (new, old), read from the maps' cards. ``upgrade(embeddings,
    weights)``: new version -> (old, psi(old rows)) for the gallery maps of
    ``config.forward`` whose pair an adapter joins (the partial-backfill curve)."""
    from compat.evaluate.runner import embed_all

    versions = adapted_versions(config, joins)
    embeddings, weights, _ = embed_all(
        versions, manifest, load_images, source_fingerprint, load_model, cache_root,
        weights_of=weights_of, batch_size=config.batch_size, device=config.device, report=report,
    )  # fmt: skip
    adapted = apply(embeddings, weights)
    upgraded = upgrade(embeddings, weights) if upgrade is not None else None
    modes = {v: dim_mismatch_of(v) for v in versions} if dim_mismatch_of is not None else None
    return evaluate_adapted(
        manifest, embeddings, adapted, config, dim_mismatch=modes, upgraded=upgraded,
        progress=report,
    )  # fmt: skip


def evaluate_adapted(
    manifest: EvalSetLike,
    embeddings: Mapping[str, np.ndarray],
    adapted: Mapping[str, AdaptedRows],
    config: EvaluateConfig,
    *,
    cells: Mapping[CellKey, Mapping[str, ProtocolResult]] | None = None,
    dim_mismatch: Mapping[str, str | None] | None = None,
    upgraded: Mapping[str, Upgraded] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The ``adapted`` section of the report, one entry per map (module docstring).

    ``embeddings[v]``: version v's (len(manifest.items), d) matrix; ``cells``: results of cells
    already evaluated (the chain's, :func:`compat.evaluate.report.evaluate_chain`'s
    ``cell_results``), reused rather than evaluated again; ``dim_mismatch[v]``: how v meets an
    older version of another width (None: the native cell is not comparable);
    ``upgraded[new]``: (old, psi(embeddings[old])), psi's rows in new's space, for the
    partial-backfill curve of an adapter and a psi of the same pair (module docstring).
    """
    from compat.embeddings.dims import align_pair
    from compat.evaluate.forward import curve_points

    protocols = create_protocols(config.protocols, **config.protocol_options())
    names = [p.name for p in protocols]
    codes = label_codes(manifest.labels)
    done: dict[Any, Mapping[str, ProtocolResult]] = {
        k: r for k, r in (cells or {}).items() if all(n in r for n in names)
    }
    modes = dict(dim_mismatch or {})
    bct_of = {**{p: v for v, p in config.paragon.items()}, **config.counterpart}

    def cell(key: Any, label: str, q: np.ndarray, g: np.ndarray) -> Mapping[str, ProtocolResult]:
        if key not in done:
            import time

            started = time.perf_counter()
            done[key] = evaluate_manifest(
                manifest, q, g, protocols, chunk_size=config.chunk_size, device=config.device,
                codes=codes,
            )  # fmt: skip
            if progress is not None:
                progress(
                    f"evaluate: adapted cell {label}: {', '.join(names)} in "
                    f"{time.perf_counter() - started:.1f} s"
                )
        return done[key]

    out: dict[str, Any] = {}
    for name, a in adapted.items():
        e_new, e_old = embeddings[a.new], embeddings[a.old]
        if a.rows.shape != (len(e_new), e_old.shape[1]):
            raise ValueError(f"{a.row}: shape {a.rows.shape}, {a.old}'s rows are {e_old.shape}")
        terms: dict[str, Mapping[str, ProtocolResult]] = {
            "adapted": cell(("map", name), f"M({a.row}, {a.old})", a.rows, e_old),
        }
        where: dict[str, list[str] | None] = {"adapted": [a.row, a.old]}
        note = None
        q, g = e_new, e_old
        if e_new.shape[1] != e_old.shape[1]:
            mode = modes.get(a.new)
            if mode is None:
                q = g = None  # type: ignore[assignment]
                note = (
                    f"{a.new} and {a.old} have {e_new.shape[1]} and {e_old.shape[1]} dims and "
                    f"{a.new} declares no dim_mismatch: the native cell is not comparable"
                )
            else:
                q, g = align_pair(e_new, e_old, mode)
                note = f"native cell aligned by {a.new}'s dim_mismatch {mode}"
        if q is not None:
            terms["native"] = cell((a.new, a.old), f"M({a.new}, {a.old})", q, g)
            where["native"] = [a.new, a.old]
        terms["old"] = cell((a.old, a.old), f"M({a.old}, {a.old})", e_old, e_old)
        where["old"] = [a.old, a.old]
        terms["self"] = cell((a.new, a.new), f"M({a.new}, {a.new})", e_new, e_new)
        where["self"] = [a.new, a.new]
        bct = _bct_version(a, config, bct_of, embeddings)
        if bct is not None:
            key = (bct, a.old)
            if key in done or embeddings[bct].shape[1] == e_old.shape[1]:
                terms["bct"] = cell(key, f"M({bct}, {a.old})", embeddings[bct], e_old)
                where["bct"] = [bct, a.old]
        entry: dict[str, Any] = {
            "map": a.info,
            "new": a.new,
            "old": a.old,
            "row": a.row,
            "bct": bct if "bct" in terms else None,
            "cells": {t: where.get(t) for t in TERMS},
            "native_note": note,
            "confidence": config.confidence,
            "metrics": {},
        }
        curves: tuple[dict[float, Any], dict[float, Any]] | None = None
        up = (upgraded or {}).get(a.new)
        if up is not None:
            entry["backfill"], curves = _backfill_curve(
                manifest, a, up, e_new, e_old, terms, config, cell
            )
        for p in protocols:
            comparison = compare(  # the terms of one protocol share resamples (paired)
                {t: r[p.name] for t, r in terms.items()},
                resamples=config.bootstrap,
                seed=config.seed,
                stream=p.name,
                confidence=config.confidence,
            )
            for metric in p.metric_names():
                e = _metric_entry(comparison, metric)
                if curves is not None:
                    for key, points in zip(("curve", "curve_raw"), curves, strict=True):
                        e[key] = curve_points(points, p.name, metric)
                entry["metrics"].setdefault(p.name, {})[metric] = e
        out[name] = entry
    return out


def _backfill_curve(
    manifest: EvalSetLike,
    a: AdaptedRows,
    up: Upgraded,
    e_new: np.ndarray,
    e_old: np.ndarray,
    terms: dict[str, Mapping[str, ProtocolResult]],
    config: EvaluateConfig,
    cell: Callable[[Any, str, np.ndarray, np.ndarray], Mapping[str, ProtocolResult]],
) -> tuple[dict[str, Any], tuple[dict[float, Any], dict[float, Any]] | None]:
    """The entry's ``backfill`` block and its (calibrated, raw) curve cells by fraction, or
    None with a note where there is no curve; adds the ``forward`` term to ``terms``."""
    from compat.embeddings.mixed import GroupStats, calibrated_two_spaces
    from compat.evaluate.forward import backfill_order, gallery_mask, psi_name, upgrade_mask

    psi_from, rows = up
    block: dict[str, Any] = {"gallery": psi_name(psi_from), "note": None}
    if psi_from != a.old:
        block["note"] = f"psi upgrades {psi_from}'s gallery, not {a.old}'s: no curve"
        return block, None
    if rows.shape != e_new.shape:
        block["note"] = (
            f"psi maps {a.old}'s rows to shape {rows.shape}, {a.new}'s are {e_new.shape}: no curve"
        )
        return block, None
    label = f"M({a.new}, {psi_name(a.old)})"
    terms["forward"] = cell(("forward", a.new, a.old), label, e_new, rows)
    block.update(
        fractions=list(config.backfill_fractions),
        order={"kind": "random", "seed": config.seed},
        calibration="match",
    )
    order = backfill_order(manifest, config.seed)
    in_gallery = gallery_mask(manifest)
    # Each group's moments over the whole gallery in its own space: psi(old) rows for the raw
    # queries, old rows for the adapted ones (what the curve's two ends search).
    stats = (GroupStats.of(rows[in_gallery]), GroupStats.of(e_old[in_gallery]))
    curve: dict[float, Any] = {}
    raw: dict[float, Any] = {}
    for f in config.backfill_fractions:
        if f == 0.0:
            curve[f] = raw[f] = terms["adapted"]
        elif f == 1.0:
            curve[f] = raw[f] = terms["forward"]
        else:
            mask = upgrade_mask(len(manifest.items), order, f)
            at = f"{a.row} + {a.new} on {psi_name(a.old)} at {f:g}"
            q2, g2 = calibrated_two_spaces(e_new, a.rows, rows, e_old, mask, (None, None))
            raw[f] = cell(("curve-raw", a.name, f), at + " (raw)", q2, g2)
            q2, g2 = calibrated_two_spaces(e_new, a.rows, rows, e_old, mask, stats)
            curve[f] = cell(("curve", a.name, f), at, q2, g2)
    return block, (curve, raw)


def _bct_version(
    a: AdaptedRows,
    config: EvaluateConfig,
    bct_of: Mapping[str, str],
    embeddings: Mapping[str, np.ndarray],
) -> str | None:
    """The chain version ``a.new`` is compared with (its counterpart, else the version whose
    paragon it is), when the chain has its cross cell on ``a.old`` (a version deployed after
    ``a.old``), else None."""
    v = bct_of.get(a.new)
    chain = list(config.chain)
    if v is None or a.old not in chain or v not in embeddings:
        return None
    return v if chain.index(v) > chain.index(a.old) else None


def _metric_entry(comparison: Comparison, metric: str) -> dict[str, Any]:
    """The terms, their intervals, the criterion's difference and bound, the difference to the
    native cell, the update gain and the recovery of BCT's cross cell, from the comparison."""
    formatted = ComparedMetric(comparison, metric)
    e: dict[str, Any] = formatted.terms(TERMS)
    diff = e["adapted_minus_old"] = formatted.difference("adapted", "old")
    # BCT's criterion as the gate judges it: the one-sided lower bound, or without resamples
    # the difference itself, above 0 (null, an undefined number, never passes).
    bound = diff.get("lower_bound", diff["value"])
    e["passes"] = bound is not None and bound > 0.0
    if "native" in comparison:
        e["adapted_minus_native"] = formatted.difference("adapted", "native")
    e["gain"] = formatted.gain("adapted", "old", "self")
    if "forward" in comparison:  # a psi of the same pair: the curve's end (module docstring)
        e["forward"] = formatted.value("forward")
        e["forward_minus_adapted"] = formatted.difference("forward", "adapted")
        e["forward_minus_old"] = formatted.difference("forward", "old")
    if "bct" in comparison:
        top, bottom = comparison.value("adapted", metric), comparison.value("bct", metric)
        recovery: dict[str, Any] = {"value": num(top / bottom) if bottom else None}
        if comparison.resampled:
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = comparison.samples("adapted", metric) / comparison.samples("bct", metric)
            ratio[~np.isfinite(ratio)] = np.nan  # a resample where M(v, old) = 0: undefined
            recovery["interval"] = num_pair(percentile_interval(ratio, comparison.confidence))
        e["recovery"] = recovery
        e["bct_gain"] = formatted.gain("bct", "old", "self")  # against the new model (Eq. 9)
    return e


def _refused(entry: Mapping[str, Any]) -> bool:
    """Whether the entry's map was refused by its own check when it was fitted."""
    return bool((entry.get("map") or {}).get("refused"))


def best_served(
    adapted: Mapping[str, Any], protocol: str = "identification", metric: str = "top1"
) -> list[dict[str, Any]]:
    """Per pair (new, old) of the entries: the served configuration (adapter or blend) whose
    lower bound of M(served, old) - M(old, old) is highest, whether it passes BCT's criterion,
    and how many configurations were measured; where none passes, it is the one that came
    closest to beating keeping the old model. ``refused``: the configurations whose map its own
    check refused when it was fitted (the gate serves none of them, whatever the evaluation
    classes say), in the entries' order; ``servable_passing``: how many of those that pass were
    not refused; ``best_servable``: the highest of the maps not refused, ranked alike (None when
    every map was refused). Pairs in the entries' order."""
    pairs: dict[tuple[str, str], list[tuple[str, dict[str, Any]]]] = {}
    for name, entry in adapted.items():
        e = entry["metrics"].get(protocol, {}).get(metric)
        if e is not None:
            pairs.setdefault((entry["new"], entry["old"]), []).append((name, e))

    def bound(item: tuple[str, dict[str, Any]]) -> float:
        d = item[1]["adapted_minus_old"]
        v = d.get("lower_bound", d.get("value"))
        return -np.inf if v is None else float(v)

    out = []
    for (new, old), found in pairs.items():
        name, e = max(found, key=bound)  # the first of equal bounds
        d = e["adapted_minus_old"]
        refused = [n for n, _ in found if _refused(adapted[n])]
        servable = [(n, x) for n, x in found if n not in refused]
        out.append({
            "new": new, "old": old, "protocol": protocol, "metric": metric, "best": name,
            "served": e["adapted"], "kept": e["old"], "lower_bound": d.get("lower_bound"),
            "passes": bool(e["passes"]), "configurations": len(found),
            "passing": sum(bool(x["passes"]) for _, x in found),
            "refused": refused,
            "servable_passing": sum(bool(x["passes"]) for _, x in servable),
            "best_servable": max(servable, key=bound)[0] if servable else None,
        })  # fmt: skip
    return out


# ---------------------------------------------------------------------------- writing


def write_adapted(
    adapted: Mapping[str, Any], metrics_dir: str | os.PathLike[str] = "metrics"
) -> list[Path]:
    """``metrics/adapted.json``: the entries of :func:`evaluate_adapted`, one per map."""
    path = Path(metrics_dir) / ADAPTED_FILE
    write_json(path, dict(adapted))
    return [path]


__all__ = [
    "ADAPTED_FILE",
    "TERMS",
    "AdaptedRows",
    "Upgraded",
    "adapted_row",
    "adapted_versions",
    "best_served",
    "evaluate_adapted",
    "run_adapted",
    "write_adapted",
]
