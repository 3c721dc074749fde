"""DVC stage ``evaluate-adapters``: the adapted cells of every query adapter of params.yaml
``evaluate.adapters`` (M(adapt(new), old) beside M(new, old), M(old, old), M(new, new)).

Reads params.yaml ``evaluate`` (:class:`compat.evaluate.config.EvaluateConfig`: the adapters,
chain, paragons, protocols, bootstrap), ``splits/eval.json``, ``data/source.json``,
``models/<version>/`` of every version a map joins and ``maps/<name>/``. Embeddings come
through ``cache/embeddings/`` (the evaluate stage's entries). Writes ``metrics/adapted.json``
(:mod:`compat.evaluate.adapted`); where ``evaluate.forward`` has a psi (or gallery map) on an
adapter's own pair, that entry also has M(new, psi(old)) and the served pair's partial-backfill
curve. A query blend of ``evaluate.adapters`` is evaluated as served: M(blend(new), old). For
each pair (new, old) the stage says which configuration served the old gallery best, or, when
none beats keeping the old model, which came closest. A stage of its own, not part of ``evaluate``: an adapter fitted again (the ``adapt``
stage's ``maps/`` outputs) re-runs these cells only, and the evaluate stage's outputs are the
same with or without ``evaluate.adapters``.

Usage: ``python stages/evaluate_adapters.py [--params FILE --section KEY] [--metrics DIR]
[--cache DIR] [--manifest FILE]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compat.params import PARAMS_FILE, read_section
from compat.stage import run_stage


def main(argv: list[str] | None = None) -> int:
    """Run the stage; ``argv`` None (an in-process caller) means no arguments: the defaults."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default=PARAMS_FILE)
    parser.add_argument("--section", default="evaluate")
    parser.add_argument("--metrics", default="metrics")
    parser.add_argument("--cache", default="cache/embeddings")
    parser.add_argument("--manifest", default="splits/eval.json")
    parser.add_argument("--models", default="models")
    args = parser.parse_args([] if argv is None else argv)

    def body() -> int:
        from compat.data.sources import open_source
        from compat.data.split import load_eval_manifest
        from compat.evaluate.adapted import best_served, run_adapted, write_adapted
        from compat.evaluate.config import EvaluateConfig
        from compat.maps.gallery import served_pair_maps
        from compat.maps.query import adapted_embeddings, adapter_joins
        from compat.models.card import dim_mismatch, read_model_card

        config = read_section(args.params, args.section, EvaluateConfig)
        joins = adapter_joins(config.adapters)  # a missing or bad map: before any work
        # A psi of evaluate.forward on an adapter's own pair: the served pair's curve.
        both = served_pair_maps(config.forward, joins)
        manifest = load_eval_manifest(args.manifest)
        source = open_source("data/source.json")
        models = Path(args.models)

        def load_model(version: str):
            from compat.models import load_version

            return load_version(models / version)

        def progress(line: str) -> None:
            print(line, file=sys.stderr, flush=True)

        adapted = run_adapted(
            config,
            manifest,
            source.load,
            source.fingerprint,
            load_model,
            args.cache,
            joins,
            lambda emb, weights: adapted_embeddings(config.adapters, emb, weights),
            weights_of=lambda v: read_model_card(models / v).weights_sha256,
            dim_mismatch_of=lambda v: dim_mismatch(read_model_card(models / v)),
            upgrade=None if both is None else lambda emb, weights: both.upgrade(emb, weights)[0],
            report=progress,
        )
        write_adapted(adapted, args.metrics)
        for name, entry in adapted.items():
            top = entry["metrics"].get("identification", {})
            for metric in ("top1", "mAP"):
                e = top.get(metric)
                if e is None:
                    continue
                cells = ", ".join(
                    f"M({q},{g})={'-' if e[t] is None else f'{100 * e[t]:.1f}'}"
                    for t, (q, g) in ((t, c) for t, c in entry["cells"].items() if c)
                )
                verdict = "passes" if e["passes"] else "does not pass"
                print(f"evaluate-adapters: {name}: identification {metric}: {cells}; {verdict} BCT")
        for best in best_served(adapted):  # per pair: what served it best, or came closest
            lb = best["lower_bound"]
            numbers = (
                f"identification top1 {100 * best['served']:.1f} against {100 * best['kept']:.1f} "
                f"keeping {best['old']}, lower bound " + ("n/a" if lb is None else f"{lb:+.4f}")
            )
            refused = (
                f"; refused by their own checks when fitted, so never served: "
                f"{', '.join(best['refused'])}" if best["refused"] else ""
            )  # fmt: skip
            if best["passes"]:
                print(f"evaluate-adapters: {best['new']} on {best['old']}'s gallery: "
                      f"{best['passing']} of {best['configurations']} configurations beat keeping "
                      f"{best['old']} on the evaluation classes, {best['servable_passing']} of "
                      f"them kept by their own checks (servable); best {best['best']} "
                      f"({numbers}){refused}")  # fmt: skip
            else:
                print(f"evaluate-adapters: {best['new']} on {best['old']}'s gallery: no "
                      f"configuration of {best['configurations']} beats keeping {best['old']}; "
                      f"closest {best['best']} ({numbers}){refused}")  # fmt: skip
        if not adapted:
            print(f"evaluate-adapters: no query adapters in {args.section}.adapters; wrote {{}}")
        return 0

    return run_stage(body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
