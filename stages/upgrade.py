"""DVC stage ``upgrade@<version>``: fit the upgrade module psi that params.yaml ``upgrade.<version>``
declares (BiCT's forward step: old gallery embeddings -> the version's space).

Reads ``models/<version>/`` and ``models/<from>/`` (from: the config's ``from``, default the
version's parent), ``data/source.json`` and ``splits/<split>.json`` (the split the version was
trained on, from its card); writes ``models/<version>/upgrade/{weights.safetensors,card.json,
metrics.json}``.

psi never makes the gallery worse than leaving it alone (:mod:`compat.maps.psi_fit`): when its
held-out retrieval does not beat the old gallery as it is, the stage says so, writes the
identity psi with a card whose ``refused`` names the numbers, and exits 0 (the pipeline goes on;
evaluate's forward section then equals backward, and ``compat backfill`` reports no upgrade).

Usage: ``python stages/upgrade.py v2 [--no-progress] [--params params.yaml]``.
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
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args([] if argv is None else argv)
    try:
        from compat.errors import BadInputError
        from compat.names import name_problem

        problem = name_problem(args.version)
        if problem:  # the name becomes models/<version>/: it must not leave the project
            raise BadInputError(f"{args.params}: upgrade.{args.version}: {problem}")
        from compat.maps.psi_config import UpgradeConfig

        cfg = read_section(
            args.params,
            "upgrade",
            UpgradeConfig,
            args.version,
            missing="no upgrade module declared (declared: {known})",
        )

        from compat.data.sources import open_source
        from compat.data.split import load_train_manifest
        from compat.maps.psi_fit import UpgradeData, plan_upgrade, train_upgrade

        plan = plan_upgrade(args.version, cfg, args.models)  # every check before data loads
        split = plan.new_card.split or args.version
        source = open_source(args.source)
        manifest = load_train_manifest(Path(args.splits) / f"{split}.json")
        if manifest.source_fingerprint != source.fingerprint:
            raise BadInputError(
                f"{args.splits}/{split}.json: made from source {manifest.source_fingerprint}, "
                f"but the source is now {source.fingerprint}; re-run the split stage"
            )
        images = source.load(manifest.items)
        card = train_upgrade(
            args.version,
            cfg,
            images,
            UpgradeData(
                split=manifest.name,
                data_fingerprint=manifest.fingerprint,
                source_fingerprint=manifest.source_fingerprint,
            ),
            models_dir=args.models,
            plan=plan,
            progress=False if args.no_progress else None,
            labels=manifest.labels,
        )
    except CompatError as err:
        print(f"error: {err.message}", file=sys.stderr)
        return err.exit_code
    print(_summary(card))
    return 0


def _summary(card) -> str:
    """One line for people: what was fitted, how it did on the held-out pairs, or why refused."""
    m = card.metrics or {}

    def num(key: str) -> str:
        v = m.get(key)
        return f"{v:.3f}" if isinstance(v, float) else "n/a"

    without = ""
    if isinstance(m.get("val_top1_without_upgrade"), float):
        without = f" (without psi {num('val_top1_without_upgrade')})"
    head = (
        f"upgrade: psi {card.from_} -> {card.to} ({card.in_dim} -> {card.hidden} x "
        f"{card.blocks} -> {card.out_dim}, {card.loss}{', residual' if card.residual else ''}) "
        f"on {card.num_pairs} pairs in {card.training_seconds:.0f} s"
    )
    if card.refused is not None:
        return (
            f"{head}: REFUSED: {card.refused.reason}; wrote the identity, so evaluate and "
            f"compat backfill see no upgrade"
        )
    return (
        f"{head}; best held-out epoch {m.get('best_epoch')} of {m.get('epochs_run')}: top-1 "
        f"{num('val_top1')}{without}, cosine {num('val_cosine')}; "
        f"weights {card.weights_sha256[:12]}"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
