"""Evaluate a chain of versions on the evaluation manifest and write what DVC and people read.

:func:`evaluate_chain` is the whole evaluation given per-version embedding matrices: every
matrix cell for every protocol, paired bootstrap intervals, differences M(q, g) - M(g, g),
update gains against the paragons and the sequence metrics. :func:`write_report` writes:

* ``metrics/compat.json``: everything (matrix, intervals, differences, gains, sequence metrics)
* ``metrics/<protocol>.json``: flat numbers for ``dvc metrics show`` / ``diff``
  (``M.<query>.<gallery>.<metric>``, ``gain.<new>.<old>.<metric>``, ``sequence.<metric>.ac``)
* ``plots/cmc/<query>_on_<gallery>.json``: CMC curves, ``[{"rank": r, "accuracy": a}]``, one
  file per cell, for ``dvc plots`` (declare the folder with ``x: rank, y: accuracy``)
* ``plots/heatmap_<protocol>.png`` and ``plots/cmc.png`` (matplotlib, Agg; no display needed)
* with a ``forward`` section (upgrade modules, :mod:`compat.evaluate.forward`):
  ``metrics/forward.json``, ``plots/backfill/<new>_<protocol>.json`` (x: fraction) and
  ``plots/backfill_<new>.png``

Keys of JSON objects are versions and metric names; undefined values are ``null``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from compat.compare import matrix as mx
from compat.compare.engine import Comparison, compare, num
from compat.evaluate.compared import ComparedMetric
from compat.evaluate.config import EvaluateConfig
from compat.evaluate.environment import machine_facts
from compat.evaluate.manifest import EvalSetLike, evaluate_manifest, label_codes
from compat.evaluate.plots import plot_images
from compat.evaluate.protocols import ProtocolResult, create_protocols
from compat.io import write_json

Cell = tuple[str, str]


def evaluation_cells(config: EvaluateConfig) -> list[Cell]:
    """Chain cells (lower triangle or full square) plus each paragon's self test."""
    cells = mx.matrix_cells(config.chain, config.full_square)
    for p in config.paragon.values():
        if (p, p) not in cells:
            cells.append((p, p))
    return cells


def cell_dim_mismatch(
    q: str, g: str, versions: list[str], dim_mismatch: Mapping[str, str | None]
) -> tuple[str, str | None]:
    """(the newer of q and g in ``versions`` order, the ``dim_mismatch`` it was trained with):
    the newer version decides how its embeddings meet the older one's (BCT: truncate)."""
    newer = max((q, g), key=lambda v: versions.index(v) if v in versions else len(versions))
    return newer, dim_mismatch.get(newer)


def evaluate_chain(
    manifest: EvalSetLike,
    embeddings: Mapping[str, np.ndarray],
    config: EvaluateConfig,
    *,
    dim_mismatch: Mapping[str, str | None] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The full evaluation report (a JSON-able dict) from per-version embeddings.

    ``embeddings[v]`` is version v's (len(manifest.items), d) matrix, rows aligned with
    ``manifest.items``; it must hold every version in ``config.versions()``.
    ``dim_mismatch[v]`` (``truncate`` or ``pad``, :mod:`compat.embeddings.dims`) says how v's
    embeddings meet those of an older version of another width; a cell of two widths whose
    newer version names none stays empty (null) and is listed under ``skipped``; an aligned
    one is listed under ``aligned``. ``progress`` receives one line per cell as it is done.
    """
    from compat.embeddings.dims import align_pair

    missing = [v for v in config.versions() if v not in embeddings]
    if missing:
        raise ValueError(f"no embeddings for version(s): {', '.join(missing)}")
    protocols = create_protocols(config.protocols, **config.protocol_options())
    codes = label_codes(manifest.labels)
    cells = evaluation_cells(config)
    versions = config.versions()
    modes = dict(dim_mismatch or {})
    results: dict[Cell, dict[str, ProtocolResult]] = {}
    skipped: list[dict[str, str]] = []
    aligned: list[dict[str, Any]] = []
    for i, (q, g) in enumerate(cells, 1):
        started = time.perf_counter()
        eq, eg = embeddings[q], embeddings[g]
        dq, dg = eq.shape[1], eg.shape[1]
        if dq != dg:
            newer, mode = cell_dim_mismatch(q, g, versions, modes)
            if mode is None:
                # No declared convention: the cell stays empty (null in the report) rather
                # than guessing a truncation or padding.
                skipped.append(
                    {
                        "query": q,
                        "gallery": g,
                        "reason": f"dimensions differ ({dq} vs {dg}) and {newer} declares "
                        "no dim_mismatch",
                    }
                )
                results[(q, g)] = {}
                if progress is not None:
                    progress(
                        f"evaluate: cell {i}/{len(cells)} M({q}, {g}): skipped ({dq} vs {dg} dims)"
                    )
                continue
            eq, eg = align_pair(eq, eg, mode)
            aligned.append(
                {
                    "query": q,
                    "gallery": g,
                    "dim_mismatch": mode,
                    "dims": [dq, dg],
                    "dim": eq.shape[1],
                }
            )
        results[(q, g)] = evaluate_manifest(
            manifest,
            eq,
            eg,
            protocols,
            chunk_size=config.chunk_size,
            device=config.device,
            codes=codes,
        )
        if progress is not None:
            progress(
                f"evaluate: cell {i}/{len(cells)} M({q}, {g}): "
                f"{', '.join(p.name for p in protocols)} in {time.perf_counter() - started:.1f} s"
            )

    report: dict[str, Any] = {
        "chain": list(config.chain),
        "paragon": dict(config.paragon),
        "protocols": list(config.protocols),
        "bootstrap": {
            "resamples": config.bootstrap,
            "seed": config.seed,
            "confidence": config.confidence,
            "interval": "percentile",
        },
        "cells": [[q, g] for q, g in cells],
        "environment": machine_facts(config.device),
        "skipped": skipped,
        "aligned": aligned,
        "counts": {},
        "matrix": {},
        "interval": {},
        "difference": {},
        "gain": {},
        "sequence": {},
        "cmc": {},
    }
    for p in protocols:
        per_cell = {c: r[p.name] for c, r in results.items() if p.name in r}
        # One paired bootstrap per protocol over all its cells, stream = protocol name.
        comparison = compare(
            per_cell,
            resamples=config.bootstrap,
            seed=config.seed,
            stream=p.name,
            confidence=config.confidence,
        )
        if per_cell:
            report["counts"][p.name] = next(iter(per_cell.values())).counts
        for metric in p.metric_names():
            _fill_metric(report, p.name, metric, comparison, config)
        if p.name == "identification":
            report["cmc"] = {f"{q}/{g}": r.curves["cmc"] for (q, g), r in per_cell.items()}
    return report


def _nested(d: dict[str, Any], *keys: str) -> dict[str, Any]:
    for k in keys:
        d = d.setdefault(k, {})
    return d


def _fill_metric(
    report: dict[str, Any],
    protocol: str,
    metric: str,
    comparison: Comparison,
    config: EvaluateConfig,
) -> None:
    """Matrix, intervals, differences M(new, old) - M(old, old) (BCT Eq. 2), update gains
    (BCT Eq. 9) and sequence metrics of one metric, formatted from the comparison."""
    formatted = ComparedMetric(comparison, metric)
    intervals = formatted.intervals()
    for q, g in comparison:
        _nested(report["matrix"], protocol, metric, q)[g] = formatted.value((q, g))
        if intervals is not None:
            _nested(report["interval"], protocol, metric, q)[g] = intervals[(q, g)]

    chain = config.chain
    for i, new in enumerate(chain):
        for old in chain[:i]:
            cross, self_old = (new, old), (old, old)
            if cross not in comparison or self_old not in comparison:
                continue
            _nested(report["difference"], protocol, metric, new)[old] = formatted.difference(
                cross, self_old
            )
            paragon = config.paragon.get(new)
            if paragon is None or (paragon, paragon) not in comparison:
                continue
            _nested(report["gain"], protocol, metric, new)[old] = {
                "paragon": paragon,
                **formatted.gain(cross, self_old, (paragon, paragon)),
            }

    m = mx.as_array({c: comparison.value(c, metric) for c in comparison}, chain)
    seq = mx.sequence_metrics(m, strict=config.strict_ac)
    _nested(report["sequence"], protocol)[metric] = {
        **{k: num(v) for k, v in seq.items()},
        "strict_ac": config.strict_ac,
    }


# ---------------------------------------------------------------------------- writing


def flat_metrics(report: Mapping[str, Any], protocol: str) -> dict[str, Any]:
    """What ``metrics/<protocol>.json`` holds: numbers only, nested for ``dvc metrics``."""
    out: dict[str, Any] = {"M": {}, "gain": {}, "sequence": {}}
    for metric, rows in report["matrix"].get(protocol, {}).items():
        for q, row in rows.items():
            for g, v in row.items():
                _nested(out["M"], q, g)[metric] = v
    for metric, rows in report["gain"].get(protocol, {}).items():
        for new, row in rows.items():
            for old, entry in row.items():
                _nested(out["gain"], new, old)[metric] = entry["value"]
    for metric, seq in report["sequence"].get(protocol, {}).items():
        out["sequence"][metric] = {k: v for k, v in seq.items() if k != "strict_ac"}
    return out


HEADLINE = "headline.json"
HEADLINE_PROTOCOL, HEADLINE_METRIC = "identification", "top1"


def headline_metrics(report: Mapping[str, Any]) -> dict[str, Any]:
    """What ``metrics/headline.json`` holds, small enough for ``dvc metrics show`` to fit a
    terminal: per version of the chain its self test (``self``), its cross test on every older
    version's gallery (``on_<old>``, the criterion's cell) and its update gain there
    (``gain_<old>``), identification top-1. The full matrices stay in ``metrics/<protocol>.json``
    and ``metrics/compat.json``."""
    matrix = report["matrix"].get(HEADLINE_PROTOCOL, {}).get(HEADLINE_METRIC, {})
    gains = report["gain"].get(HEADLINE_PROTOCOL, {}).get(HEADLINE_METRIC, {})
    out: dict[str, Any] = {}
    chain = list(report["chain"])
    for i, q in enumerate(chain):
        row: dict[str, Any] = {"self": matrix.get(q, {}).get(q)}
        for g in chain[:i]:
            row[f"on_{g}"] = matrix.get(q, {}).get(g)
            gain = gains.get(q, {}).get(g)
            if gain is not None:
                row[f"gain_{g}"] = gain["value"]
        out[q] = row
    return out


def _cell_file(cell: str) -> str:
    q, g = cell.split("/", 1)
    return f"{q}_on_{g}.json"


def write_report(
    report: Mapping[str, Any],
    metrics_dir: str | os.PathLike[str] = "metrics",
    plots_dir: str | os.PathLike[str] = "plots",
    *,
    images: bool = True,
) -> list[Path]:
    """Write the metrics, plot data and (``images``) PNGs; return the paths written."""
    mdir, pdir = Path(metrics_dir), Path(plots_dir)
    written = [mdir / "compat.json", mdir / HEADLINE]
    write_json(written[0], report)
    write_json(written[1], headline_metrics(report))
    for protocol in report["protocols"]:
        path = mdir / f"{protocol}.json"
        write_json(path, flat_metrics(report, protocol))
        written.append(path)
    for cell, curve in report.get("cmc", {}).items():
        path = pdir / "cmc" / _cell_file(cell)
        rows = [{"rank": r + 1, "accuracy": num(a)} for r, a in enumerate(curve)]
        write_json(path, rows)
        written.append(path)
    if images:
        written += plot_images(report, pdir)
    if report.get("forward"):
        from compat.evaluate.forward import write_forward

        written += write_forward(report["forward"], mdir, pdir, images=images)
    return written


__all__ = [
    "evaluate_chain",
    "evaluation_cells",
    "flat_metrics",
    "headline_metrics",
    "plot_images",
    "write_report",
]
