"""The ``adapt`` stage's work: fit, check and save every map params.yaml ``adapt`` declares.

For each entry (:class:`compat.maps.adapt_config.AdaptConfig`) the pairs are the ``new``
version's own training split (``splits/<split>.json``, the split its model card names, never the
evaluation classes) embedded by ``new`` and by ``old`` through the embedding cache
(:func:`compat.maps.versions.version_pairs`); :func:`compat.maps.fit.fit_map` holds out whole
classes, fits the kind on the rest and checks it there (the refusal rule of
:mod:`compat.maps.check`). Where the split has a validation set (``splits/validation.json``:
classes no training set and not the evaluation set contains), both versions embed it too and
the map is checked there as the gate judges its served configuration, which decides
(:mod:`compat.maps.verdict`). The map is saved in ``maps/<name>/`` kept or refused (a refused
map's card says why, with both numbers; the gate never serves it).

The cost of applying a map is measured as a query adapter pays it: microseconds per row over
as many rows as the evaluation set has queries (random unit rows; the best of five runs; a
query blend's includes the interpolation with the old model's rows, not the old model's
forward pass, which ``benchmarks/bench_adapters.py`` measures).
:func:`adapter_metrics` is one entry of ``metrics/adapters.json``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from compat.errors import BadInputError
from compat.maps.adapt_config import AdaptConfig
from compat.maps.store import Map
from compat.maps.verdict import CheckSet

APPLY_REPEATS = 5


def training_split(
    cfg: AdaptConfig,
    *,
    models_dir: str | os.PathLike[str] = "models",
    splits_dir: str | os.PathLike[str] = "splits",
    source: str | os.PathLike[str] = "data/source.json",
    where: str = "params.yaml: adapt",
) -> str:
    """The name of ``cfg.new``'s training split (its card's ``split``, else its own name),
    checked: a training manifest (BadInputError for the evaluation set) made from the current
    source (BadInputError when the source changed since the split was made)."""
    import json

    from compat.data.sources import open_source
    from compat.data.split import load_train_manifest
    from compat.models.card import read_model_card

    card = read_model_card(Path(models_dir) / cfg.new)
    split = card.split or cfg.new
    path = Path(splits_dir) / f"{split}.json"
    if path.is_file():
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raw = None  # the manifest reader names the problem below
        if isinstance(raw, dict) and "query" in raw:
            raise BadInputError(
                f"{where}: new: {cfg.new} names {path}, the evaluation set, as its training "
                "split; a map is never fitted on evaluation classes"
            )
    manifest = load_train_manifest(path)
    fp = open_source(source).fingerprint
    if manifest.source_fingerprint != fp:
        raise BadInputError(
            f"{path}: made from source {manifest.source_fingerprint}, but the source is now "
            f"{fp}; re-run the split stage"
        )
    return split


def fit_declared(
    name: str,
    cfg: AdaptConfig,
    *,
    models_dir: str | os.PathLike[str] = "models",
    splits_dir: str | os.PathLike[str] = "splits",
    source: str | os.PathLike[str] = "data/source.json",
    cache_root: str | os.PathLike[str] = "cache/embeddings",
    device: str | None = None,
    progress: bool = True,
    where: str = "params.yaml",
    check_split: str | os.PathLike[str] | None = None,
) -> tuple[Map, str]:
    """Fit and check the map ``name`` of the section (not saved); returns it and the split it
    was fitted on. ``check_split``: a held-out manifest (the validation split) both versions
    embed, where the map is checked as the gate judges (None or absent: the held-out classes of
    the pairs decide)."""
    from compat.maps.fit import fit_map
    from compat.maps.versions import version_pairs

    split = training_split(
        cfg, models_dir=models_dir, splits_dir=splits_dir, source=source,
        where=f"{where}: adapt.{name}",
    )  # fmt: skip
    pairs = version_pairs(
        cfg.new, cfg.old, split=split, models_dir=models_dir, cache_root=cache_root,
        splits_dir=splits_dir, source=source, device=device, progress=progress,
    )  # fmt: skip
    if cfg.role != "gallery-map":  # new queries -> old space
        x, y, x_info, y_info = pairs.new, pairs.old, pairs.new_info, pairs.old_info
    else:  # gallery-map: stored old rows -> new space
        x, y, x_info, y_info = pairs.old, pairs.new, pairs.old_info, pairs.new_info
    check_set = check_set_of(
        cfg, check_split, models_dir=models_dir, cache_root=cache_root, source=source,
        device=device, progress=progress,
    )  # fmt: skip
    fitted = fit_map(
        cfg.kind, x, y, labels=pairs.labels, ids=pairs.ids, params=cfg.params,
        check=cfg.check_config(), role=cfg.role, from_name=cfg.source, to_name=cfg.target,
        source_info=x_info, target_info=y_info, blend=cfg.blend, check_set=check_set,
    )  # fmt: skip
    return fitted, split


def check_set_of(
    cfg: AdaptConfig,
    path: str | os.PathLike[str] | None,
    *,
    models_dir: str | os.PathLike[str] = "models",
    cache_root: str | os.PathLike[str] = "cache/embeddings",
    source: str | os.PathLike[str] = "data/source.json",
    device: str | None = None,
    progress: bool = True,
) -> CheckSet | None:
    """The held-out manifest ``path`` (an evaluation-style manifest: the validation split)
    embedded by both versions of ``cfg`` through the cache, as a
    :class:`compat.maps.verdict.CheckSet`; None when ``path`` is None or absent."""
    if path is None or not Path(path).is_file():
        return None
    from compat.data.split import load_eval_manifest
    from compat.maps.versions import version_pairs

    p = Path(path)
    manifest = load_eval_manifest(p)
    pairs = version_pairs(
        cfg.new, cfg.old, split=p.stem, models_dir=models_dir, cache_root=cache_root,
        splits_dir=p.parent, source=source, device=device, progress=progress,
    )  # fmt: skip
    return CheckSet(f"split:{p.stem}", manifest, pairs.new, pairs.old, manifest.fingerprint)


def apply_cost(fitted: Map, rows: int, *, repeats: int = APPLY_REPEATS, seed: int = 0) -> float:
    """Microseconds per row to apply ``fitted`` to ``rows`` random unit rows at once (after one
    untimed warm-up run; the best of ``repeats`` runs: the least disturbed by other work on
    the machine)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((max(1, rows), fitted.in_dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    old = None
    if fitted.card.blend is not None:  # a blend also reads the old model's rows
        old = rng.standard_normal((len(x), fitted.out_dim)).astype(np.float32)
        old /= np.linalg.norm(old, axis=1, keepdims=True)

    def run() -> None:
        fitted.apply(x) if old is None else fitted.queries(x, old)

    run()  # warm-up, untimed: thread pools and first-call allocations
    best = float("inf")
    for _ in range(max(1, repeats)):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best / len(x) * 1e6


def adapter_metrics(fitted: Map, split: str, apply_rows: int, apply_us: float) -> dict[str, Any]:
    """One entry of ``metrics/adapters.json``: what was fitted on how many pairs in how long,
    the held-out check's numbers (top-1 with the map, its baseline, the gain's lower bound),
    a blend's weight, the check on a held-out set as the gate judges (``verdict``), whether it
    was refused, and the cost of applying it."""
    card = fitted.card
    h = card.heldout
    held: dict[str, Any] = {}
    if h is not None:
        held = {
            "queries": h.queries,
            "top1": h.mapped,
            "baseline": h.baseline,
            "baseline_kind": h.baseline_kind,
            "no_map": h.no_map,
            "old_self": h.old_self,
            "difference": h.difference,
            "lower_bound": h.lower_bound,
            "confidence": h.confidence,
        }
    return {
        "kind": card.kind,
        "role": card.role,
        "from": card.from_,
        "to": card.to,
        "split": split,
        "pairs": card.data.num_pairs,
        "fit_pairs": None if h is None else h.num_fit,
        "heldout_pairs": None if h is None else h.num_heldout,
        "fit_seconds": card.fit_seconds,
        "heldout": held,
        "blend": None if card.blend is None else card.blend.model_dump(mode="json"),
        "verdict": None if card.verdict is None else card.verdict.model_dump(mode="json"),
        "refused": card.refused is not None,
        "apply_rows": apply_rows,
        "apply_us_per_query": round(apply_us, 4),
    }


def summary_line(name: str, entry: dict[str, Any], fitted: Map) -> str:
    """One line for people: the map, its held-out numbers and kept, or refused with why."""
    h = entry["heldout"]

    def num(key: str) -> str:
        v = h.get(key)
        return "n/a" if v is None else f"{v:.4f}"

    head = (
        f"adapt: {name}: {entry['kind']} {entry['from']} -> {entry['to']} on "
        f"{entry['fit_pairs']} pairs of split {entry['split']} in {entry['fit_seconds']:.2f} s; "
        f"held-out top-1 {num('top1')} with the map, {num('baseline')} {h.get('baseline_kind')}"
        + (f" (no-map {num('no_map')})" if h.get("baseline_kind") != "no-map" else "")
        + f", gain lower bound {num('lower_bound')}"
        + (f"; blend weight {entry['blend']['weight']:g}" if entry.get("blend") else "")
        + _verdict_text(entry.get("verdict"))
        + f"; apply {entry['apply_us_per_query']:.2f} us/query"
    )
    if fitted.card.refused is not None:
        return f"{head}: REFUSED: {fitted.card.refused.reason}; wrote {fitted.folder}"
    return f"{head}: kept; wrote {fitted.folder}"


def _verdict_text(v: dict[str, Any] | None) -> str:
    if not v:
        return ""

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.4f}"

    lb = v.get("lower_bound")
    return (
        f"; on {v['set']} as the gate judges: {pct(v.get('served'))} served, "
        f"{pct(v.get('old_self'))} M(old, old), lower bound "
        + ("n/a" if lb is None else f"{lb:+.4f}")
    )


def run_adapt(
    section: Mapping[str, AdaptConfig],
    names: Sequence[str] | None = None,
    *,
    params: str | os.PathLike[str] = "params.yaml",
    models_dir: str | os.PathLike[str] = "models",
    splits_dir: str | os.PathLike[str] = "splits",
    source: str | os.PathLike[str] = "data/source.json",
    cache_root: str | os.PathLike[str] = "cache/embeddings",
    maps_dir: str | os.PathLike[str] = "maps",
    metrics_path: str | os.PathLike[str] = "metrics/adapters.json",
    eval_manifest: str | os.PathLike[str] | None = "splits/eval.json",
    check_split: str | os.PathLike[str] | None = "splits/validation.json",
    device: str | None = None,
    progress: bool = True,
    report: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Fit, check and save the maps ``names`` of ``section`` (default: all) into
    ``maps_dir/<name>/``, then write ``metrics_path`` (the entries of maps not fitted now are
    kept when they are still declared); ``report`` gets one summary line per map. Returns the
    metrics written. An unknown name is a NotFoundError (3) listing the declared ones.
    ``check_split``: the held-out set each map is checked on as the gate judges, when it
    exists (:func:`fit_declared`)."""
    import json

    from compat.errors import NotFoundError
    from compat.io import write_json
    from compat.maps.store import save_map

    todo = list(section) if names is None else list(dict.fromkeys(names))
    unknown = [n for n in todo if n not in section]
    if unknown:
        known = ", ".join(section) or "none"
        raise NotFoundError(f"{params}: adapt.{unknown[0]}: no such map (declared: {known})")
    rows = _eval_queries(eval_manifest)
    metrics_file = Path(metrics_path)
    out: dict[str, Any] = {}
    if names is not None and metrics_file.is_file():
        try:
            old = json.loads(metrics_file.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            old = {}
        if isinstance(old, dict):
            out = {k: v for k, v in old.items() if k in section}
    for name in todo:
        cfg = section[name]
        folder = Path(maps_dir) / name  # a Name: never leaves maps_dir
        fitted, split = fit_declared(
            name, cfg, models_dir=models_dir, splits_dir=splits_dir, source=source,
            cache_root=cache_root, device=device, progress=progress, where=str(params),
            check_split=check_split,
        )  # fmt: skip
        n = rows if rows is not None else fitted.card.data.num_pairs
        entry = adapter_metrics(fitted, split, n, apply_cost(fitted, n))
        save_map(folder, fitted)
        out[name] = entry
        report(summary_line(name, entry, fitted))
    write_json(metrics_file, out)
    return out


def _eval_queries(path: str | os.PathLike[str] | None) -> int | None:
    """How many queries the evaluation set has (None without one: the pairs are used)."""
    if path is None or not Path(path).is_file():
        return None
    from compat.data.split import load_eval_manifest

    return len(load_eval_manifest(path).query)


__all__ = [
    "APPLY_REPEATS",
    "adapter_metrics",
    "apply_cost",
    "check_set_of",
    "fit_declared",
    "run_adapt",
    "summary_line",
    "training_split",
]
