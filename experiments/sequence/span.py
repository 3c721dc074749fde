"""Where a d-Simplex model's features live, and how independently trained models meet.

A diagnostic for the sequence experiment (docs/findings.md, "d-Simplex: where the features
live"), not a stage. For each model folder it prints:

- the **span energy** of its held-out embeddings: the mean squared norm of each unit embedding's
  projection onto the span of the d-Simplex vertices of the classes the model was trained on
  (the first ``num_classes`` vertices: a child's class order extends its parent's). 1.0 means
  the features live where the fixed classifier can see them; the rest lies along vertices no
  class uses yet, which nothing in training ties across models;
- the template identification top-1 matrix between the models on ``splits/eval.json``: queries
  embedded by the row's model against one template per class (the mean of the column model's
  gallery embeddings, re-normalised; the reference evaluation's gallery), so the diagonal holds
  self tests and a cell off it is a cross test;
- with ``--project``, the same matrix after projecting every embedding onto the span of the
  vertices of the classes all listed models were trained on (what the models share).

Usage (from experiments/sequence, after ``dvc repro``)::

    python span.py models/hoc-pre0 models/hoc-pre1 models/hoc-t1 [--project]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from compat.errors import BadInputError, CompatError
from compat.evaluate.metrics import identification_metrics
from compat.evaluate.ranking import ranking, template_gallery


def span_basis(vertices: np.ndarray) -> np.ndarray:
    """(d, r) orthonormal basis of the span of the rows of ``vertices`` (r = number of rows)."""
    q, _ = np.linalg.qr(np.asarray(vertices, dtype=np.float64).T)
    return q


def span_energy(embeddings: np.ndarray, basis: np.ndarray) -> float:
    """Mean squared norm of each L2-normalised row of ``embeddings`` projected onto ``basis``."""
    e = np.asarray(embeddings, dtype=np.float64)
    e = e / np.linalg.norm(e, axis=1, keepdims=True)
    return float(((e @ basis) ** 2).sum(axis=1).mean())


def template_top1(
    query: np.ndarray, query_labels: np.ndarray, gallery: np.ndarray, gallery_labels: np.ndarray
) -> float:
    """Top-1 of ``query`` against one re-normalised mean template per gallery class (cosine),
    ranked by the evaluate stage's own identification code."""
    templates, classes = template_gallery(gallery, gallery_labels)
    q = np.asarray(query, dtype=np.float32)
    q = q / np.linalg.norm(q, axis=1, keepdims=True)
    stats = ranking(q, np.asarray(query_labels), templates.astype(np.float32), classes)
    return identification_metrics(stats, ks=(1,))["top1"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="model folders (models/<version>)")
    parser.add_argument("--project", action="store_true", help="also the projected matrix")
    parser.add_argument("--source", default="data/source.json")
    parser.add_argument("--eval", default="splits/eval.json")
    args = parser.parse_args(argv)

    from compat.data.sources import open_source
    from compat.data.split import load_eval_manifest
    from compat.embeddings.embed import embed_items
    from compat.functional import dsimplex_vertices
    from compat.models.version import load_version

    try:
        source = open_source(args.source)
        manifest = load_eval_manifest(args.eval)
        labels = np.asarray(manifest.labels)
        query, gallery = np.asarray(manifest.query), np.asarray(manifest.gallery)
        names, emb, trained, dims = [], {}, {}, set()
        for folder in args.models:
            model, card = load_version(folder)
            if card.head != "dsimplex" or card.num_classes is None:
                raise BadInputError(f"{folder}/card.json: head: {card.head}, not a dsimplex model")
            name = Path(folder).name
            names.append(name)
            emb[name] = embed_items(model, source.load, manifest.items)
            trained[name] = card.num_classes
            dims.add(card.dim)
        if len(dims) != 1:
            raise BadInputError(f"models: embedding dims differ ({sorted(dims)}); compare one K")
    except CompatError as err:  # one line naming the file and field; the documented exit code
        print(f"span: {err}", file=sys.stderr)
        return err.exit_code
    vertices = dsimplex_vertices(dims.pop() + 1).double().numpy()

    print("| model | trained classes | span energy |\n|---|---|---|")
    for n in names:
        energy = span_energy(emb[n], span_basis(vertices[: trained[n]]))
        print(f"| {n} | {trained[n]} | {energy:.3f} |")

    def table(title: str, e: dict[str, np.ndarray]) -> None:
        print(f"\n{title}\n\n| query \\ gallery | " + " | ".join(names) + " |")
        print("|---" * (len(names) + 1) + "|")
        for a in names:
            cells = [
                100 * template_top1(e[a][query], labels[query], e[b][gallery], labels[gallery])
                for b in names
            ]
            print(f"| {a} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")

    table("template top-1 (%)", emb)
    if args.project:
        shared = span_basis(vertices[: min(trained.values())])
        projected = {n: e @ shared for n, e in emb.items()}
        table(
            f"template top-1 (%), projected on the first {min(trained.values())} vertices",
            projected,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
