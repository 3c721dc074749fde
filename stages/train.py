"""DVC stage ``train@<version>``: train the version that params.yaml ``train.<version>`` describes.

Reads ``data/source.json``, ``splits/<split>.json`` and, for a compatible method, the parent in
``models/<parent>/``; writes ``models/<version>/{weights.safetensors,card.json,train_metrics.json}``.
Checkpoints go to ``cache/checkpoints/<version>/`` every epoch; a killed run started again resumes
from the last one. Runs unchanged under ``torchrun --nproc_per_node=N stages/train.py <version>``.

Usage: ``python stages/train.py v2 [--no-progress] [--params params.yaml]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compat.errors import CompatError
from compat.params import PARAMS_FILE, read_section


def main(argv: list[str] | None = None) -> int:
    """Run the stage; ``argv`` None (an in-process caller) means no arguments."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version")
    parser.add_argument("--params", default=PARAMS_FILE)
    parser.add_argument("--source", default="data/source.json")
    parser.add_argument("--splits", default="splits")
    parser.add_argument("--models", default="models")
    parser.add_argument("--checkpoints", default="cache/checkpoints")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args([] if argv is None else argv)
    try:
        from compat.errors import BadInputError
        from compat.names import name_problem

        problem = name_problem(args.version)
        if problem:  # the name becomes models/<version>/: it must not leave the project
            raise BadInputError(f"{args.params}: train.{args.version}: {problem}")
        from compat.train.config import TrainConfig

        cfg = read_section(
            args.params,
            "train",
            TrainConfig,
            args.version,
            missing="no such version (known: {known})",
        )
        cfg.check_names(args.params, f"train.{args.version}")  # exit 4 naming the file

        from compat.data.sources import open_source
        from compat.data.split import load_train_manifest
        from compat.train.run import checkpoint_folder, plan_run, train_version

        plan_run(args.version, cfg, Path(args.models))  # every check before any data loads
        checkpoint_folder(args.version, Path(args.checkpoints) / args.version)
        split = cfg.split or args.version
        source = open_source(args.source)
        manifest = load_train_manifest(Path(args.splits) / f"{split}.json")
        card = train_version(
            args.version,
            cfg,
            source=source,
            manifest=manifest,
            models_dir=args.models,
            checkpoint_dir=Path(args.checkpoints) / args.version,
            progress=False if args.no_progress else None,
        )
    except CompatError as err:
        print(f"error: {err.message}", file=sys.stderr)
        return err.exit_code
    if card is None:  # a torchrun worker other than rank 0 writes nothing
        return 0
    print(
        f"train: {args.version} ({card.method}, parent {card.parent}): {card.backbone} "
        f"dim {card.dim}, {card.head} over {card.num_classes} classes, "
        f"{card.epochs} epochs in {card.training_seconds:.0f} s, "
        f"weights {card.weights_sha256[:12]}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
