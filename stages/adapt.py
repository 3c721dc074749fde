"""DVC stage ``adapt``: fit the maps params.yaml ``adapt`` declares (query adapters, Drift-Adapter:
a new model's queries mapped into the old space, so the old gallery is served without a backfill).

Reads params.yaml ``adapt`` (:class:`compat.maps.adapt_config.AdaptConfig` per map),
``models/<new>/`` and ``models/<old>/``, ``splits/<split>.json`` (the new version's training
split, from its card), ``data/source.json``, ``splits/eval.json`` (its query count sizes the
apply-cost measurement) and, when the split has one, ``splits/validation.json`` (classes no
model was trained on: each map is checked there as the gate judges, and that check decides;
:mod:`compat.maps.verdict`). Pairs are embedded through ``cache/embeddings/``. Writes
``maps/<name>/{weights.safetensors,card.json}`` per map and ``metrics/adapters.json``.

A map whose held-out check refuses it is still written (its card says why, with both numbers;
the gate never serves it): the stage says so and exits 0.

Usage: ``python stages/adapt.py [NAME ...] [--params FILE] [--no-progress]``: every map of the
section, or the named ones (their entries of ``metrics/adapters.json`` replaced, the others
kept).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compat.params import PARAMS_FILE, read_section
from compat.stage import run_stage


def main(argv: list[str] | None = None) -> int:
    """Run the stage; ``argv`` None (an in-process caller) means no arguments: every map."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="maps to fit (default: every one)")
    parser.add_argument("--params", default=PARAMS_FILE)
    parser.add_argument("--source", default="data/source.json")
    parser.add_argument("--splits", default="splits")
    parser.add_argument("--models", default="models")
    parser.add_argument("--cache", default="cache/embeddings")
    parser.add_argument("--maps", default="maps")
    parser.add_argument("--metrics", default="metrics/adapters.json")
    parser.add_argument("--eval-manifest", default="splits/eval.json")
    parser.add_argument(
        "--check-split",
        default="splits/validation.json",
        help="the held-out set the maps are checked on as the gate judges (when it exists)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no embedding progress")
    args = parser.parse_args([] if argv is None else argv)

    def body() -> int:
        from compat.maps.adapt import run_adapt
        from compat.maps.adapt_config import ADAPT_SECTION, AdaptConfig
        from compat.names import Name

        section = read_section(args.params, ADAPT_SECTION, dict[Name, AdaptConfig])
        run_adapt(
            section,
            args.names or None,
            params=args.params,
            models_dir=args.models,
            splits_dir=args.splits,
            source=args.source,
            cache_root=args.cache,
            maps_dir=args.maps,
            metrics_path=args.metrics,
            eval_manifest=Path(args.eval_manifest),
            check_split=Path(args.check_split),
            progress=not args.no_progress,
            report=lambda line: print(line, flush=True),
        )
        return 0

    return run_stage(body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
