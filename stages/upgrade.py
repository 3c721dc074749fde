"""DVC stage ``upgrade@<version>``: fit the upgrade module psi that params.yaml ``upgrade.<version>``
declares (BiCT's forward step: old gallery embeddings -> the version's space).

Reads ``models/<version>/`` and ``models/<from>/`` (from: the config's ``from``, default the
version's parent), ``data/source.json`` and ``splits/<split>.json`` (the split the version was
trained on, from its card); writes ``models/<version>/upgrade/{weights.safetensors,card.json,
metrics.json}``.

psi never makes the gallery worse than leaving it alone (:mod:`compat.maps.psi_fit`): when its
held-out retrieval does not beat the old gallery as it is, or, where ``splits/validation.json``
exists (``--check-split``), when the upgraded gallery does not beat keeping the old model there
as the gate judges (M(new, psi(old)) against M(old, old)), the stage says so, writes the
identity psi with a card whose ``refused`` names the numbers, and exits 0 (the pipeline goes on;
evaluate's forward section then equals backward, and ``compat backfill`` reports no upgrade).

Usage: ``python stages/upgrade.py v2 [--no-progress] [--params params.yaml] [--check-split F]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from compat.stage import run_stage, training_set, version_parser, version_section


def main(argv: list[str] | None = None) -> int:
    """Run the stage; ``argv`` None (an in-process caller) means no arguments."""
    parser = version_parser(__doc__)
    parser.add_argument(
        "--check-split",
        default=None,
        help="the held-out set psi is judged on as the gate judges, when it exists (default: "
        "validation.json in --splits)",
    )
    args = parser.parse_args([] if argv is None else argv)

    def body() -> None:
        from compat.maps.psi_config import UpgradeConfig

        cfg = version_section(
            args, "upgrade", UpgradeConfig, "no upgrade module declared (declared: {known})"
        )
        from compat.maps.psi_fit import HeldOutSet, UpgradeData, plan_upgrade, train_upgrade

        plan = plan_upgrade(args.version, cfg, args.models)  # every check before data loads
        split = plan.new_card.split or args.version
        source, manifest = training_set(args.source, args.splits, split)
        images = source.load(manifest.items)
        check = None
        path = Path(args.check_split or Path(args.splits) / "validation.json")
        if path.is_file():
            from compat.data.split import load_eval_manifest
            from compat.errors import BadInputError

            held = load_eval_manifest(path)
            if held.source_fingerprint != source.fingerprint:  # as training_set checks a split
                raise BadInputError(
                    f"{path}: made from source {held.source_fingerprint}, but the source is now "
                    f"{source.fingerprint}; re-run the split stage"
                )
            check = HeldOutSet(
                f"split:{path.stem}", held, source.load(held.items), held.fingerprint
            )
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
            check=check,
        )
        print(_summary(card))

    return run_stage(body)


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
    verdict = m.get("verdict") or {}
    judged = (
        f"; on {verdict['set']} as the gate judges: {verdict['served']:.4f} served, "
        f"{verdict['old_self']:.4f} M(old, old), lower bound {verdict['lower_bound']:+.4f}"
        if verdict.get("lower_bound") is not None
        else ""
    )
    return (
        f"{head}; best held-out epoch {m.get('best_epoch')} of {m.get('epochs_run')}: top-1 "
        f"{num('val_top1')}{without}, cosine {num('val_cosine')}{judged}; "
        f"weights {card.weights_sha256[:12]}"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
