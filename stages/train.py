"""DVC stage ``train@<version>``: train the version that params.yaml ``train.<version>`` describes.

Reads ``data/source.json``, ``splits/<split>.json`` and, for a compatible method, the parent in
``models/<parent>/``; writes ``models/<version>/{weights.safetensors,card.json,train_metrics.json}``.
Checkpoints go to ``cache/checkpoints/<version>/`` every epoch; a killed run started again resumes
from the last one. Runs unchanged under ``torchrun --nproc_per_node=N stages/train.py <version>``.

Usage: ``python stages/train.py v2 [--no-progress] [--params params.yaml]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from compat.stage import run_stage, training_set, version_parser, version_section


def main(argv: list[str] | None = None) -> int:
    """Run the stage; ``argv`` None (an in-process caller) means no arguments."""
    parser = version_parser(__doc__)
    parser.add_argument("--checkpoints", default="cache/checkpoints")
    args = parser.parse_args([] if argv is None else argv)

    def body() -> int:
        from compat.train.config import TrainConfig

        cfg = version_section(args, "train", TrainConfig, "no such version (known: {known})")
        cfg.check_names(args.params, f"train.{args.version}")  # exit 4 naming the file

        from compat.train.run import checkpoint_folder, plan_run, train_version

        plan_run(args.version, cfg, Path(args.models))  # every check before any data loads
        checkpoint_folder(args.version, Path(args.checkpoints) / args.version)
        source, manifest = training_set(args.source, args.splits, cfg.split or args.version)
        card = train_version(
            args.version,
            cfg,
            source=source,
            manifest=manifest,
            models_dir=args.models,
            checkpoint_dir=Path(args.checkpoints) / args.version,
            progress=False if args.no_progress else None,
        )
        if card is None:  # a torchrun worker other than rank 0 writes nothing
            return 0
        print(
            f"train: {args.version} ({card.method}, parent {card.parent}): {card.backbone} "
            f"dim {card.dim}, {card.head} over {card.num_classes} classes, "
            f"{card.epochs} epochs in {card.training_seconds:.0f} s, "
            f"weights {card.weights_sha256[:12]}"
        )
        return 0

    return run_stage(body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
