"""DVC stage ``evaluate``: the compatibility matrix of the chain, with intervals and gains.

Reads params.yaml ``evaluate`` (:class:`compat.evaluate.config.EvaluateConfig`),
``splits/eval.json``, ``data/source.json`` and ``models/<version>/`` for every chain version and
paragon. Embeddings are cached in ``cache/embeddings/`` keyed by (weights sha256, data
fingerprint, transform). Writes ``metrics/compat.json``, ``metrics/<protocol>.json``,
``plots/cmc/*.json`` and ``plots/*.png`` (see :mod:`compat.evaluate.report`). Progress goes to
stderr as it happens: a line per embedded version and per matrix cell. A paragon trained on
another split than its version's is refused (exit 4) before anything is embedded; a version of
another width meets an older gallery as its card's ``dim_mismatch`` says. The gallery maps of
``evaluate.forward`` (psi's ``models/<version>/upgrade/`` or a :mod:`compat.maps` gallery map) are
opened here through :mod:`compat.maps` (:class:`compat.maps.gallery.ForwardMaps`: a missing or
changed one fails before anything is embedded) and handed to the runner.
Usage: ``python stages/evaluate.py [--params FILE --section KEY] [--metrics DIR] [--plots DIR]
[--cache DIR] [--manifest FILE]``: the defaults are the root pipeline's (``params.yaml`` section ``evaluate``,
``metrics/``, ``plots/``, ``cache/embeddings/``); a pipeline that evaluates several chains (e.g.
``experiments/sequence``) points each run at its own section and folders.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from compat.errors import BadInputError, CompatError
from compat.evaluate.config import EvaluateConfig
from compat.evaluate.report import write_report
from compat.evaluate.runner import run_evaluation
from compat.params import PARAMS_FILE, read_section
from compat.stage import run_stage


def load_config(path: str = PARAMS_FILE, section: str = "evaluate") -> EvaluateConfig:
    """The evaluate section ``section`` of ``path``; NotFoundError (exit 3) if it is missing."""
    return read_section(path, section, EvaluateConfig)


def main(argv: list[str] | None = None) -> int:
    """Run the stage; ``argv`` None (an in-process caller) means no arguments: the defaults."""
    from compat.data.sources import open_source
    from compat.data.split import load_eval_manifest

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default=PARAMS_FILE)
    parser.add_argument("--section", default="evaluate")
    parser.add_argument("--metrics", default="metrics")
    parser.add_argument("--plots", default="plots")
    parser.add_argument("--cache", default="cache/embeddings")
    parser.add_argument(
        "--manifest",
        default="splits/eval.json",
        help="the held-out set to evaluate on (splits/validation.json: choices, compat.evaluate.pick)",
    )
    # In-process callers (tests) pass nothing: the defaults, never pytest's own argv.
    args = parser.parse_args([] if argv is None else argv)

    def body() -> int:
        config = load_config(args.params, args.section)
        if config.device is not None:  # a CUDA device this machine lacks: exit 4 before any work
            from compat.embeddings.search import resolve_device

            try:
                resolve_device(config.device)
            except CompatError as err:
                raise BadInputError(
                    f"{args.params}: {args.section}.device: {err.message}"
                ) from None
        manifest = load_eval_manifest(args.manifest)
        source = open_source("data/source.json")

        def load_model(version: str):
            from compat.models import load_version

            return load_version(Path("models") / version)

        def card(version: str):
            # The card names the weights: a cached version's model is never loaded.
            from compat.models.card import read_model_card

            return read_model_card(Path("models") / version)

        def progress(line: str) -> None:
            # One line per embedded version and per matrix cell, on stderr: DVC shows it live.
            print(line, file=sys.stderr, flush=True)

        from compat.models.card import dim_mismatch, train_fingerprint

        gallery_maps = None
        if config.forward:
            from compat.maps.gallery import ForwardMaps

            gallery_maps = ForwardMaps(config.forward)
        report = run_evaluation(
            config,
            manifest,
            source.load,
            source.fingerprint,
            load_model,
            args.cache,
            weights_of=lambda v: card(v).weights_sha256,
            train_data_of=lambda v: train_fingerprint(card(v)),
            dim_mismatch_of=lambda v: dim_mismatch(card(v)),
            gallery_maps=gallery_maps,
            report=progress,
        )
        # Outputs of a previous run with other versions must not linger in the plots folder.
        shutil.rmtree(Path(args.plots) / "cmc", ignore_errors=True)
        write_report(report, args.metrics, args.plots)  # a full disk: exit 5, one line
        for protocol, by_metric in report["matrix"].items():
            for metric, rows in by_metric.items():
                cells = ", ".join(
                    f"M({q},{g})={'-' if v is None else f'{100 * v:.1f}'}"
                    for q, row in rows.items()
                    for g, v in row.items()
                )
                print(f"evaluate: {protocol} {metric}: {cells}")
        return 0

    return run_stage(body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
