"""The forward result of an upgrade module psi and the partial-backfill curve (BiCT, Su et al.,
"Privacy-Preserving Model Upgrades with Bidirectional Compatible Training in Image Retrieval").

For a new version ``new`` whose psi upgrades galleries of ``old``, on the evaluation manifest:

* ``old``      M(old, old): what the service has before the upgrade;
* ``backward`` M(new, old): new queries on the old gallery as stored (BCT);
* ``forward``  M(new, psi(old)): new queries on the gallery upgraded by psi, no images needed;
* ``self``     M(new, new): a full backfill by re-embedding every gallery image;
* ``paragon``  M(new*, new*) when the chain names one;

with paired bootstrap intervals (same resamples as the chain report), forward - backward with its
one-sided lower bound, and the update gain (BCT Eq. 9) of both the backward and the forward
result. BiCT's claim is M(new, psi(old)) > M(new, old).

The **partial-backfill curve** is the metric over a gallery of which a share f has been
upgraded (f in ``backfill_fractions``, default 0, 0.25, 0.5, 0.75, 1): gallery rows are
upgraded in a seeded random order (``seed``), exactly floor(f x n) of the manifest's gallery
items and likewise of the other items (the second items of verification pairs). Queries are
always new-version embeddings: upgraded rows are in the new space, the rest in the old one,
which a backward-compatible new version can query (the rule of :mod:`compat.embeddings.mixed`).
``curve`` scores the two row groups on one scale as :func:`compat.embeddings.mixed.search_mixed`
does (``calibration="match"``: each query's scores against the old rows mapped onto its score
distribution against the upgraded rows, both moments measured over the whole gallery, old and
upgraded, so an identity psi leaves the curve flat); ``curve_raw`` merges
raw inner products, which can dip below both end points. f = 0 is the backward cell, f = 1 the
forward cell. When psi changes the dimension there is no mixed gallery (rows of two widths):
the curve then has only its end points.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from compat.compare.engine import Comparison, compare, num
from compat.embeddings.mixed import GroupStats, calibrated_embeddings
from compat.evaluate.compared import ComparedMetric
from compat.evaluate.config import EvaluateConfig
from compat.evaluate.manifest import EvalSetLike, evaluate_manifest, label_codes
from compat.evaluate.plots import plot_backfill
from compat.evaluate.protocols import ProtocolResult, create_protocols
from compat.io import write_json

TERMS = ("old", "backward", "forward", "self", "paragon")


def psi_name(old: str) -> str:
    """How the upgraded gallery of ``old`` is named in reports: ``psi(v1)``."""
    return f"psi({old})"


def backfill_order(manifest: EvalSetLike, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(gallery items, other items), each in the seeded random order they are upgraded in."""
    n = len(manifest.items)
    gallery = np.asarray(manifest.gallery, dtype=np.int64)
    others = np.setdiff1d(np.arange(n, dtype=np.int64), gallery)
    rng = np.random.default_rng([seed, 0xF0A4D])
    return rng.permutation(gallery), rng.permutation(others)


def upgrade_mask(n: int, order: tuple[np.ndarray, np.ndarray], fraction: float) -> np.ndarray:
    """(n,) True for the first floor(fraction x size) items of each ordered group."""
    mask = np.zeros(n, dtype=bool)
    for group in order:
        mask[group[: math.floor(fraction * len(group) + 1e-9)]] = True
    return mask


def gallery_mask(manifest: EvalSetLike) -> np.ndarray:
    """(len(manifest.items),) True for the manifest's gallery items."""
    in_gallery = np.zeros(len(manifest.items), dtype=bool)
    in_gallery[np.asarray(manifest.gallery, dtype=np.int64)] = True
    return in_gallery


def curve_points(
    cells: Mapping[float, Mapping[str, ProtocolResult]], protocol: str, metric: str
) -> list[dict[str, Any]]:
    """``{"fraction": f, "value": metric at f}`` for each curve cell, by fraction."""
    return [
        {"fraction": f, "value": num(r[protocol].metrics[metric])} for f, r in sorted(cells.items())
    ]


def mixed_gallery(old: np.ndarray, upgraded: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Rows of ``old`` with the ``mask`` rows replaced by their ``upgraded`` version."""
    out = old.copy()
    out[mask] = upgraded[mask]
    return out


def evaluate_forward(
    manifest: EvalSetLike,
    embeddings: Mapping[str, np.ndarray],
    upgraded: Mapping[str, tuple[str, np.ndarray]],
    config: EvaluateConfig,
) -> dict[str, Any]:
    """The ``forward`` section of the report.

    ``embeddings[v]``: version v's (len(manifest.items), d) matrix; ``upgraded[new]`` is
    ``(old, psi(embeddings[old]))``, psi's upgrade of old's matrix into new's space.
    """
    protocols = create_protocols(config.protocols, **config.protocol_options())
    codes = label_codes(manifest.labels)
    out: dict[str, Any] = {}

    def cell(q: np.ndarray, g: np.ndarray) -> dict[str, ProtocolResult]:
        return evaluate_manifest(
            manifest, q, g, protocols, chunk_size=config.chunk_size, device=config.device,
            codes=codes,
        )  # fmt: skip

    for new, (old, up) in upgraded.items():
        e_new, e_old = embeddings[new], embeddings[old]
        if up.shape != e_new.shape:
            raise ValueError(
                f"{psi_name(old)}: shape {up.shape}, but {new}'s embeddings are {e_new.shape}"
            )
        same_dim = e_old.shape[1] == e_new.shape[1]
        paragon = config.paragon.get(new)
        cells: dict[str, dict[str, ProtocolResult]] = {
            "old": cell(e_old, e_old),
            "forward": cell(e_new, up),
            "self": cell(e_new, e_new),
        }
        if same_dim:
            cells["backward"] = cell(e_new, e_old)
        if paragon is not None and paragon in embeddings:
            cells["paragon"] = cell(embeddings[paragon], embeddings[paragon])

        order = backfill_order(manifest, config.seed)
        in_gallery = gallery_mask(manifest)
        # The two row groups' score moments, measured on the same items in both spaces (the
        # whole gallery, old and upgraded): a psi that changes nothing changes no score.
        paired = (GroupStats.of(up[in_gallery]), GroupStats.of(e_old[in_gallery]))
        curve_cells: dict[float, dict[str, ProtocolResult]] = {}
        raw_cells: dict[float, dict[str, ProtocolResult]] = {}
        for f in config.backfill_fractions:
            if f == 1.0:
                curve_cells[f] = raw_cells[f] = cells["forward"]
            elif f == 0.0 and same_dim:
                curve_cells[f] = raw_cells[f] = cells["backward"]
            elif same_dim:
                mask = upgrade_mask(len(manifest.items), order, f)
                mixed = mixed_gallery(e_old, up, mask)
                raw_cells[f] = cell(e_new, mixed)
                # Scores against the two row groups put on one scale, as search_mixed does.
                q2, g2 = calibrated_embeddings(
                    e_new, mixed, mask, stats_rows=in_gallery, stats=paired
                )
                curve_cells[f] = cell(q2, g2)

        entry: dict[str, Any] = {
            "from": old,
            "gallery": psi_name(old),
            "paragon": paragon if "paragon" in cells else None,
            "fractions": list(config.backfill_fractions),
            "order": {"kind": "random", "seed": config.seed},
            "calibration": "match",
            "curve_note": None
            if same_dim
            else f"psi maps {e_old.shape[1]} to {e_new.shape[1]} dims: no mixed gallery",
            "metrics": {},
        }
        for p in protocols:
            # The terms of one protocol share resamples (paired), stream = protocol name.
            comparison = compare(
                {t: r[p.name] for t, r in cells.items()},
                resamples=config.bootstrap,
                seed=config.seed,
                stream=p.name,
                confidence=config.confidence,
            )
            for metric in p.metric_names():
                entry["metrics"].setdefault(p.name, {})[metric] = _metric_entry(
                    comparison, metric, curve_cells, raw_cells, p.name
                )
        out[new] = entry
    return out


def _metric_entry(
    comparison: Comparison,
    metric: str,
    curve_cells: Mapping[float, Mapping[str, ProtocolResult]],
    raw_cells: Mapping[float, Mapping[str, ProtocolResult]],
    protocol: str,
) -> dict[str, Any]:
    """The terms, their intervals, forward - backward (BiCT's claim) and the update gains
    (BCT Eq. 9) of the backward and the forward result, formatted from the comparison."""
    formatted = ComparedMetric(comparison, metric)
    e: dict[str, Any] = formatted.terms(TERMS)
    if "backward" in comparison:
        e["forward_minus_backward"] = formatted.difference("forward", "backward")
    if "paragon" in comparison:
        for term in ("backward", "forward"):
            if term in comparison:
                e[f"gain_{term}"] = formatted.gain(term, "old", "paragon", interval=False)
    for key, cells in (("curve", curve_cells), ("curve_raw", raw_cells)):
        e[key] = curve_points(cells, protocol, metric)
    return e


# ---------------------------------------------------------------------------- writing


def flat_forward(forward: Mapping[str, Any]) -> dict[str, Any]:
    """``metrics/forward.json``: numbers only, ``<new>.<protocol>.<metric>.<term>``."""
    out: dict[str, Any] = {}
    for new, entry in forward.items():
        for protocol, by_metric in entry["metrics"].items():
            for metric, e in by_metric.items():
                row = {t: e[t] for t in TERMS if e.get(t) is not None}
                if "forward_minus_backward" in e:
                    row["forward_minus_backward"] = e["forward_minus_backward"]["value"]
                out.setdefault(new, {}).setdefault(protocol, {})[metric] = row
    return out


def curve_rows(entry: Mapping[str, Any], protocol: str) -> list[dict[str, Any]]:
    """One row per fraction with every metric of ``protocol`` (what ``dvc plots`` reads);
    ``<metric>`` is the calibrated curve, ``<metric>_raw`` the raw-score one."""
    rows: dict[float, dict[str, Any]] = {}
    for metric, e in entry["metrics"][protocol].items():
        for key, suffix in (("curve", ""), ("curve_raw", "_raw")):
            for point in e[key]:
                row = rows.setdefault(point["fraction"], {"fraction": point["fraction"]})
                row[metric + suffix] = point["value"]
    return [rows[f] for f in sorted(rows)]


def write_forward(
    forward: Mapping[str, Any],
    metrics_dir: str | os.PathLike[str] = "metrics",
    plots_dir: str | os.PathLike[str] = "plots",
    *,
    images: bool = True,
) -> list[Path]:
    """``metrics/forward.json``, ``plots/backfill/<new>_<protocol>.json`` and, with ``images``,
    ``plots/backfill_<new>.png``; returns the paths written."""
    mdir, pdir = Path(metrics_dir), Path(plots_dir)
    written = [mdir / "forward.json"]
    write_json(written[0], flat_forward(forward))
    for new, entry in forward.items():
        for protocol in entry["metrics"]:
            path = pdir / "backfill" / f"{new}_{protocol}.json"
            write_json(path, curve_rows(entry, protocol))
            written.append(path)
    if images:
        written += plot_backfill(forward, pdir)
    return written


__all__ = [
    "TERMS",
    "backfill_order",
    "curve_points",
    "curve_rows",
    "evaluate_forward",
    "flat_forward",
    "gallery_mask",
    "mixed_gallery",
    "plot_backfill",
    "psi_name",
    "upgrade_mask",
    "write_forward",
]
