"""How much of a fine-tuned model's drift on the held-out classes is its BatchNorm statistics.

A diagnostic for the sequence experiment (docs/findings.md, "Fine-tuning: where the drift is"),
not a stage. Fine-tuning a model in PyTorch's train mode replaces its BatchNorm running
statistics with those of the task's images (a few classes), so a fine-tuned model can move away
from the gallery its start embedded even where its weights barely change. For a starting model
A and a model B fine-tuned from it on ``--split``, it prints the template identification top-1
(span.py's measure) of:

- A's self test and B's self test, and B's queries on A's gallery (the drift fine-tuning cost);
- A with only its BatchNorm statistics re-estimated on the split's images (no weight changes,
  ``torch.optim.swa_utils.update_bn``): its self test and its queries on A's gallery;
- with ``--start-split`` (A's training split), B with its statistics re-estimated on A's
  training images: whether B's weights, with A's kind of statistics, still fit A's gallery.

If A's cross test falls about as far as B's, the statistics carry the drift, and training with
``bn_stats: frozen`` keeps them. The split's images are fed as stored, without the training
augmentation.

Usage (from experiments/sequence, after ``dvc repro``)::

    python drift.py models/hoc-pre0 models/hoc-t1 --split t1 --start-split pretrain
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from compat.errors import BadInputError, CompatError


def reestimate_bn(
    model: nn.Module,
    load: Callable[[Sequence[str]], np.ndarray],
    items: Sequence[str],
    batch_size: int = 128,
    seed: int = 0,
) -> nn.Module:
    """A copy of ``model`` whose BatchNorm running statistics are recomputed over ``items``
    (``torch.optim.swa_utils.update_bn``: the plain average of the batches' statistics); every
    weight stays as it is. The items are shuffled (``seed``; their given order does not matter)
    because a batch's variance is measured around its own mean: batches of one class each, as a
    manifest's class-sorted order gives, would miss the variance between classes."""
    from compat.data.transforms import to_tensor

    if not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        raise BadInputError("model: has no BatchNorm layer to re-estimate")
    out = copy.deepcopy(model)
    ordered = sorted(items)
    order = [ordered[i] for i in np.random.default_rng(seed).permutation(len(ordered))]
    batches = (to_tensor(load(order[s : s + batch_size])) for s in range(0, len(order), batch_size))
    torch.optim.swa_utils.update_bn(batches, out)
    return out.eval()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("start", help="model folder A (models/<version>)")
    parser.add_argument("tuned", help="model folder B, fine-tuned from A")
    parser.add_argument("--split", required=True, help="B's training split (splits/<split>.json)")
    parser.add_argument("--start-split", help="A's training split (also re-estimate B on it)")
    parser.add_argument("--source", default="data/source.json")
    parser.add_argument("--eval", default="splits/eval.json")
    args = parser.parse_args(argv)

    from compat.data.sources import open_source
    from compat.data.split import load_eval_manifest, load_train_manifest
    from compat.embeddings.embed import embed_items
    from compat.models.version import load_version

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from span import template_top1

    try:
        source = open_source(args.source)
        manifest = load_eval_manifest(args.eval)
        splits = Path(args.eval).parent
        train = load_train_manifest(splits / f"{args.split}.json")
        a, _ = load_version(args.start)
        b, _ = load_version(args.tuned)
        models = {"A": a, "B": b, "A'": reestimate_bn(a, source.load, train.items)}
        if args.start_split is not None:
            start = load_train_manifest(splits / f"{args.start_split}.json")
            models["B'"] = reestimate_bn(b, source.load, start.items)
    except CompatError as err:  # one line naming the file and field; the documented exit code
        print(f"drift: {err}", file=sys.stderr)
        return err.exit_code
    labels = np.asarray(manifest.labels)
    query, gallery = np.asarray(manifest.query), np.asarray(manifest.gallery)
    emb = {n: embed_items(m, source.load, manifest.items) for n, m in models.items()}

    def top1(q: str, g: str) -> float:
        ql, gl = labels[query], labels[gallery]
        return 100 * template_top1(emb[q][query], ql, emb[g][gallery], gl)

    name_a, name_b = Path(args.start).name, Path(args.tuned).name
    a_self = top1("A", "A")
    rows = [
        (f"{name_a} (A)", a_self, a_self),
        (f"{name_b} (B, fine-tuned on {args.split})", top1("B", "B"), top1("B", "A")),
        (f"A, BatchNorm statistics of {args.split} (A')", top1("A'", "A'"), top1("A'", "A")),
    ]
    if "B'" in emb:
        rows.append(
            (
                f"B, BatchNorm statistics of {args.start_split} (B')",
                top1("B'", "B'"),
                top1("B'", "A"),
            )
        )
    print("| model | self test | queries on A's gallery |\n|---|---|---|")
    for name, self_test, cross in rows:
        print(f"| {name} | {self_test:.1f} | {cross:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
