"""``compat score``: evaluation protocols on your own embeddings (two .npz files).

Registered on the main app by ``score.register(app)``.
"""

from __future__ import annotations

import enum
import json
import math
import sys
from pathlib import Path

import typer

from compat.cli.common import exit_on_error


class DimMismatchChoice(enum.StrEnum):
    """``--dim-mismatch`` (:mod:`compat.embeddings.dims`)."""

    truncate = "truncate"
    pad = "pad"


HELP = (
    "Score query embeddings against gallery embeddings with the evaluation protocols.\n\n"
    "Each file is an .npz archive (numpy.savez) holding `embeddings` (n x d real numbers) and "
    "`labels` (n integers: the identity of each row); optional `ids` (n strings) name the "
    "items. Rows are L2-normalised first (cosine similarity) unless --no-normalize is given, "
    "in which case raw inner products are used. Every metric is a fraction in [0, 1].\n\n"
    "identification: top1, top5, top10, mAP, mAP@100 over the whole gallery. Queries whose "
    "label has no gallery row are skipped. Ties count against the query (pessimistic).\n\n"
    "open-set: tpir@fpir=0.1, tpir@fpir=0.01. Queries whose label occurs in the gallery are "
    "mated probes; queries whose label is absent from the gallery are the non-mated probes "
    "that set the threshold.\n\n"
    "verification: tar@far=0.1, tar@far=0.01, tar@far=0.001. Pairs are (query row, gallery "
    "row), genuine when the labels are equal. If there are at most --max-pairs such pairs, all "
    "of them are used; otherwise a sample seeded by --seed: all genuine pairs up to half of "
    "--max-pairs (else a uniform sample of that many) plus uniformly drawn impostor pairs to "
    "fill --max-pairs. TAR is read at the lowest threshold whose FAR does not exceed the "
    "target (no interpolation).\n\n"
    "Leave-one-out: when --query and --gallery are the same file, each row is left out of its "
    "own ranking and pairs (by index). When both files carry `ids`, a gallery row with the "
    "query's id is left out likewise (the same item embedded by two models).\n\n"
    "Exit codes: 0 success; 2 usage (unknown protocol); 3 a file is missing; 4 bad input "
    "(unreadable archive, missing key, empty array, NaN or inf, non-integer labels, rows and "
    "labels of different lengths, query and gallery of different dimensions without "
    "--dim-mismatch).\n\n"
    "Different dimensions: --dim-mismatch truncate scores the first d coordinates of the wider "
    "rows (BCT's convention for a new model wider than the old one), truncating before "
    "L2-normalising; --dim-mismatch pad zero-pads the narrower rows."
)


def score(
    query: Path = typer.Option(..., "--query", "-q", help="Query embeddings (.npz)."),
    gallery: Path = typer.Option(..., "--gallery", "-g", help="Gallery embeddings (.npz)."),
    protocol: list[str] = typer.Option(
        None,
        "--protocol",
        "-p",
        help="identification, open-set or verification; repeat for several (default: all).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print exactly one JSON object."),
    normalize: bool = typer.Option(
        True, "--normalize/--no-normalize", help="L2-normalise rows (cosine similarity)."
    ),
    max_pairs: int = typer.Option(
        1_000_000, "--max-pairs", min=2, help="Verification pairs to use at most."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed for sampled verification pairs."),
    device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:N or auto."),
    dim_mismatch: DimMismatchChoice | None = typer.Option(
        None,
        "--dim-mismatch",
        help="How query and gallery rows of different widths meet: truncate (BCT: the wider "
        "rows' first d coordinates, then L2-normalised) or pad (zero-pad the narrower rows).",
    ),
) -> None:
    with exit_on_error():
        flat, notes, counts = _score(
            query, gallery, protocol or None, normalize, max_pairs, seed, device,
            dim_mismatch.value if dim_mismatch is not None else None,
        )  # fmt: skip
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        if as_json:
            payload = {k: (v if math.isfinite(v) else None) for k, v in flat.items()}
            sys.stdout.write(json.dumps(payload) + "\n")
        else:
            _print_table(flat, counts, query, gallery)


def _score(
    query_path: Path,
    gallery_path: Path,
    protocols: list[str] | None,
    normalize: bool,
    max_pairs: int,
    seed: int,
    device: str,
    dim_mismatch: str | None = None,
) -> tuple[dict[str, float], list[str], dict[str, dict[str, int]]]:
    import numpy as np

    from compat.embeddings.bundle import load_bundle
    from compat.errors import BadInputError
    from compat.evaluate.protocols import create_protocols, evaluate_sets, protocol_names

    names = list(dict.fromkeys(protocols or protocol_names()))
    built = create_protocols(names, max_pairs=max_pairs, seed=seed)  # unknown name: exit 2
    q = load_bundle(query_path)
    g = load_bundle(gallery_path)
    q_raw, g_raw = q.embeddings, g.embeddings
    if q.dim != g.dim:
        if dim_mismatch is None:
            raise BadInputError(
                f"{query_path}: embeddings: dimension {q.dim} does not match {gallery_path} "
                f"dimension {g.dim} (--dim-mismatch truncate|pad says how they meet)"
            )
        from compat.embeddings.dims import align_pair

        # Truncate first, L2-normalise after (below): BCT compares the first d_old coordinates.
        q_raw, g_raw = align_pair(q_raw, g_raw, dim_mismatch, normalize=False)
    q_emb = _normalized(q_raw, query_path) if normalize else q_raw
    g_emb = _normalized(g_raw, gallery_path) if normalize else g_raw

    exclude = None
    if query_path.resolve() == gallery_path.resolve():
        exclude = np.arange(len(q), dtype=np.int64)
    elif q.ids is not None and g.ids is not None:
        position = {item: i for i, item in reversed(list(enumerate(g.ids)))}
        ex = np.array([position.get(item, -1) for item in q.ids], dtype=np.int64)
        exclude = ex if (ex >= 0).any() else None

    results = evaluate_sets(built, q_emb, q.labels, g_emb, g.labels, exclude=exclude, device=device)
    flat: dict[str, float] = {}
    counts: dict[str, dict[str, int]] = {}
    notes: list[str] = []
    for name, result in results.items():
        flat.update(result.metrics)
        counts[name] = result.counts
    if "identification" in counts and counts["identification"]["valid_queries"] == 0:
        notes.append("identification undefined: no query label occurs in the gallery")
    if "open-set" in counts:
        c = counts["open-set"]
        if c["non_mated"] == 0:
            notes.append("open-set undefined: every query label occurs in the gallery")
        elif c["mated"] == 0:
            notes.append("open-set undefined: no query label occurs in the gallery")
    if "verification" in counts:
        c = counts["verification"]
        if c["genuine_pairs"] == 0 or c["impostor_pairs"] == 0:
            notes.append("verification undefined: needs both genuine and impostor pairs")
    return flat, notes, counts


def _normalized(x, path: Path):
    import numpy as np

    from compat.errors import BadInputError

    norms = np.linalg.norm(x, axis=1, keepdims=True)
    zero = np.flatnonzero(norms[:, 0] == 0)
    if zero.size:
        raise BadInputError(
            f"{path}: embeddings: row {int(zero[0])} has zero norm and cannot be "
            "L2-normalised (use --no-normalize for raw inner products)"
        )
    return (x / norms).astype(np.float32)


def _print_table(
    flat: dict[str, float], counts: dict[str, dict[str, int]], query: Path, gallery: Path
) -> None:
    from compat.cli import output
    from compat.evaluate.protocols import PROTOCOLS

    rows = []
    for name in PROTOCOLS.names():
        if name not in counts:
            continue
        for metric in PROTOCOLS.create(name).metric_names():
            if metric not in flat:
                continue
            v = flat[metric]
            shown = ("-", "-") if not math.isfinite(v) else (output.fmt_value(v), f"{100 * v:.2f}")
            rows.append([name, metric, *shown])
    caption = "; ".join(
        f"{name}: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in c.items())
        for name, c in counts.items()
    )
    output.print_table(
        (
            "protocol",
            "metric",
            output.Column("value", numeric=True),
            output.Column("%", numeric=True),
        ),
        rows,
        title=f"query {query.name}  vs  gallery {gallery.name}",
        caption=caption,
    )


def register(app: typer.Typer) -> None:
    app.command("score", help=HELP)(score)
