"""``compat score``: evaluation protocols on your own embeddings (.npz, .npy or Parquet).

Registered on the main app by ``score.register(app)``.
"""

from __future__ import annotations

import enum
import json
import math
import sys
from pathlib import Path

import typer

from compat.cli.common import check_bootstrap_options, exit_on_error


class DimMismatchChoice(enum.StrEnum):
    """``--dim-mismatch`` (:mod:`compat.embeddings.dims`)."""

    truncate = "truncate"
    pad = "pad"


HELP = (
    "Score query embeddings against gallery embeddings with the evaluation protocols.\n\n"
    "Each file is an .npz archive (numpy.savez) holding `embeddings` (n x d real numbers) and "
    "`labels` (n integers: the identity of each row); optional `ids` (n strings) name the "
    "items. A .npy matrix (memory-mapped; labels and ids in a <stem>.meta.npz sidecar) or a "
    "folder of Parquet shards (columns id, embedding, label) is read likewise. Rows are L2-normalised first (cosine similarity) unless --no-normalize is given, "
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
    "--index flat|ivf|hnsw|ivfpq (faiss; parameters with --index-param key=value, e.g. nlist=1024, "
    "nprobe=32, M=32, ef_search=128, m=32, nbits=8) also searches the gallery with that "
    "approximate index and reports its recall@k against exact search (the share of each "
    "query's exact top-k it returns), its build time and queries/s; the metrics above stay "
    "exact. The promotion gate always searches exactly.\n\n"
    "A LanceDB table (<folder>/<name>.lance, see docs/lancedb.md) is scored as it is served: "
    "each row from the newest version whose vec_<version> column holds it. A partially "
    "backfilled table (rows of two versions) is scored as the evaluate stage's partial-backfill "
    "curve: the newer version's rows with its queries, the other rows with queries in the older "
    "space (the query table's vec_<older> column; else the --query-adapter's mapped queries; "
    "else the newer queries as they are, backward compatible), each query's scores on the "
    "older rows matched to the newer rows' scale (calibration match). The queries may be a "
    "table too.\n\n"
    "--query-adapter DIR applies a query adapter (written by compat adapt) to the query rows "
    "before scoring: a new model's queries mapped into the old gallery's space. Its weights' "
    "sha256 is checked against its card and its input width against the query rows. An "
    "adapter its held-out check refused is not applied (exit 7) unless --allow-refused.\n\n"
    "A query blend (compat adapt --role query-blend) needs --old-query FILE too: the old "
    "model's embeddings of the same queries (any --query format; labels not needed), matched "
    "by ids when both files carry them (every query id must be there), else row for row. Each "
    "served query is the point at the blend's weight w on the arc from the old model's own "
    "query to the adapted new one (SLERP; w on the blend's card), as the gate serves it. Its "
    "sha256, card and refusal are checked as an adapter's. On a table gallery the blended "
    "queries search the blend's old version's rows (on a partially backfilled table, the "
    "older rows, before a query table's vec_<older> column).\n\n"
    "Exit codes: 0 success; 2 usage (unknown protocol, index or index parameter; a file that is "
    "not .npz, .npy or a Parquet folder; a --seed outside 0 .. 2**32 - 1; a query blend without "
    "--old-query, or --old-query without one); 3 a file or the "
    "adapter is missing; 4 bad input (unreadable archive, missing key, empty array, NaN or "
    "inf, non-integer labels, rows and labels of different lengths, an input that is not a "
    "regular file, query and gallery of different dimensions without --dim-mismatch, an "
    "adapter whose weights fail their sha256, whose widths are not the query rows' and the "
    "gallery's, or whose card names other versions or weights than the files record; an "
    "--old-query file whose width is not the blend's old side, that lacks a query's id or "
    "names one twice, or "
    "without ids has another row count than the queries); 7 the adapter or blend was refused "
    "when it was fitted (nothing scored).\n\n"
    "Different dimensions: --dim-mismatch truncate scores the first d coordinates of the wider "
    "rows (BCT's convention for a new model wider than the old one), truncating before "
    "L2-normalising; --dim-mismatch pad zero-pads the narrower rows."
)


def score(
    query: Path = typer.Option(
        ..., "--query", "-q", help="Query embeddings: .npz, .npy (+ .meta.npz) or a Parquet folder."
    ),
    gallery: Path = typer.Option(
        ...,
        "--gallery",
        "-g",
        help="Gallery embeddings: .npz, .npy (+ .meta.npz) or a Parquet folder.",
    ),
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
    index: str | None = typer.Option(
        None, "--index", help="Also measure an approximate index: flat, ivf, hnsw or ivfpq."
    ),
    index_param: list[str] = typer.Option(
        None, "--index-param", help="Index parameter key=value (repeatable)."
    ),
    recall_k: int = typer.Option(10, "--recall-k", min=1, help="k of the index's recall@k."),
    query_adapter: Path | None = typer.Option(
        None,
        "--query-adapter",
        help="Map the query rows with this adapter or query blend folder (compat adapt) before "
        "scoring.",
    ),
    allow_refused: bool = typer.Option(
        False,
        "--allow-refused",
        help="Apply a query adapter or blend even if its check refused it.",
    ),
    old_query: Path | None = typer.Option(
        None,
        "--old-query",
        help="With a query-blend map: the old model's embeddings of the same queries (any "
        "--query format; matched by ids, else row for row).",
    ),
) -> None:
    with exit_on_error():
        check_bootstrap_options(seed=seed)  # the verification pairs' seed, before any work
        from compat.cli.score_queries import open_query_map

        # missing: 3; changed weights or a gallery map: 4; a blend without --old-query: 2;
        # refused when fitted: 7 unless --allow-refused
        adapter = open_query_map(query_adapter, old_query, allow_refused)
        spec = None
        if index is not None:
            from compat.embeddings.ann import parse_index

            spec = parse_index(index, index_param)  # unknown name or key: exit 2
        flat, notes, counts, groups = _score(
            query, gallery, protocol or None, normalize, max_pairs, seed, device,
            dim_mismatch.value if dim_mismatch is not None else None, spec, recall_k, adapter,
            old_query,
        )  # fmt: skip
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        if as_json:
            out = _grouped(flat, groups, notes, query, gallery)
            if adapter is not None:  # only then: the reference keys stay as they were
                out["query_adapter"] = adapter.provenance(query_adapter)
            sys.stdout.write(json.dumps(out) + "\n")
        else:
            _print_table(flat, counts, query, gallery)
            if spec is not None:
                print(
                    f"index {flat['index.spec']}: recall@{recall_k} {flat[f'index.recall@{recall_k}']:.4f} "
                    f"against exact search; build {flat['index.build_seconds']:.2f} s, "
                    f"{flat['index.queries_per_second']:,.0f} queries/s "
                    f"(exact {flat['index.exact_queries_per_second']:,.0f})"
                )


def _finite(v: object) -> object:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _grouped(flat: dict, groups: dict, notes: list[str], query: Path, gallery: Path) -> dict:
    """``--json``: ``{query, gallery, protocols: {name: {metrics, counts}}, index, notes}``
    (undefined values are null)."""
    protocols = {
        name: {"metrics": {k: _finite(v) for k, v in g["metrics"].items()}, "counts": g["counts"]}
        for name, g in groups.items()
    }
    index = {
        k.removeprefix("index."): _finite(v) for k, v in flat.items() if k.startswith("index.")
    }
    return {
        "query": str(query),
        "gallery": str(gallery),
        "protocols": protocols,
        "index": index or None,
        "notes": notes,
    }


EXACT_IS_BETTER = 10_000  # rows: below this an exact scan is cheap (docs/findings.md, Search)


def _score(
    query_path: Path,
    gallery_path: Path,
    protocols: list[str] | None,
    normalize: bool,
    max_pairs: int,
    seed: int,
    device: str,
    dim_mismatch: str | None = None,
    spec=None,
    recall_k: int = 10,
    adapter=None,
    old_query: Path | None = None,
) -> tuple[dict, list[str], dict[str, dict[str, int]], dict[str, dict]]:
    import numpy as np

    from compat.embeddings.table import is_table
    from compat.errors import BadInputError
    from compat.evaluate.protocols import create_protocols, evaluate_sets, protocol_names

    names = list(dict.fromkeys(protocols or protocol_names()))
    built = create_protocols(names, max_pairs=max_pairs, seed=seed)  # unknown name: exit 2
    notes: list[str] = []
    if is_table(gallery_path):  # scored as served: compat.embeddings.table_search
        from compat.embeddings.table_search import score_table
        from compat.errors import UsageError

        if dim_mismatch is not None:
            raise UsageError("--dim-mismatch: a table gallery's queries meet each column's width")
        blend = None
        if old_query is not None:  # a blend: its queries where the adapter's would be
            from functools import partial

            from compat.cli.score_queries import blend_queries

            blend = partial(blend_queries, adapter, query_path=query_path, old_query=old_query)
        t = score_table(
            query_path, gallery_path, adapter=adapter, blend=blend,
            normalize=_normalized if normalize else (lambda x, _path: x),
        )  # fmt: skip
        q_emb, g_emb, notes = t.query, t.gallery, list(t.notes)
        q_labels, g_labels, q_ids, g_ids = (
            t.query_labels,
            t.gallery_labels,
            t.query_ids,
            t.gallery_ids,
        )
    else:
        q_emb, g_emb, q_labels, g_labels, q_ids, g_ids = _file_rows(
            query_path, gallery_path, normalize, dim_mismatch, adapter, notes, old_query
        )
    if not normalize:
        from compat.models.norms import products_overflow

        big = products_overflow(q_emb, g_emb)
        if big is not None:
            raise BadInputError(
                f"{query_path}: embeddings: row {big[2]} (norm {big[0]:.3g}) times {gallery_path} "
                f"row {big[3]} (norm {big[1]:.3g}) overflows float32 inner products; rescale "
                "the rows, or score cosines (without --no-normalize)"
            )

    exclude = None
    if query_path.resolve() == gallery_path.resolve():
        exclude = np.arange(len(q_emb), dtype=np.int64)
    elif q_ids is not None and g_ids is not None:
        position = {item: i for i, item in reversed(list(enumerate(g_ids)))}
        ex = np.array([position.get(item, -1) for item in q_ids], dtype=np.int64)
        exclude = ex if (ex >= 0).any() else None

    results = evaluate_sets(built, q_emb, q_labels, g_emb, g_labels, exclude=exclude, device=device)
    flat: dict[str, float] = {}
    counts: dict[str, dict[str, int]] = {}
    groups: dict[str, dict] = {}
    for name, result in results.items():
        flat.update(result.metrics)
        counts[name] = result.counts
        groups[name] = {"metrics": dict(result.metrics), "counts": result.counts}
    if spec is not None:
        measured, index_notes = _index_recall(spec, q_emb, g_emb, recall_k, device)
        flat.update(measured)
        notes += index_notes
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
    return flat, notes, counts, groups


def _file_rows(query_path, gallery_path, normalize, dim_mismatch, adapter, notes, old_query=None):
    """Query and gallery rows of two files (normalised, widths met, the adapter applied or the
    blend served: :mod:`compat.cli.score_queries`), with labels and ids."""
    from compat.embeddings.reader import load_gallery
    from compat.errors import BadInputError

    q = load_gallery(query_path)
    g = load_gallery(gallery_path)
    q_raw, g_raw = q.embeddings, g.embeddings
    if adapter is not None:
        from compat.cli.score_queries import served_queries

        # unit rows in the map's output space (checked against the files' versions and weights)
        q_raw, note = served_queries(
            adapter, q, query_path, g, gallery_path, dim_mismatch, old_query
        )
        notes.append(note)
    if q_raw.shape[1] != g_raw.shape[1]:  # after the adapter: its output meets the gallery
        if dim_mismatch is None:
            raise BadInputError(
                f"{query_path}: embeddings: dimension {q_raw.shape[1]} does not match {gallery_path} "
                f"dimension {g.dim} (--dim-mismatch truncate|pad says how they meet)"
            )
        from compat.embeddings.dims import align_pair

        # Truncate first, L2-normalise after (below): BCT compares the first d_old coordinates.
        q_raw, g_raw = align_pair(q_raw, g_raw, dim_mismatch, normalize=False)
    q_emb = _normalized(q_raw, query_path) if normalize else q_raw
    g_emb = _normalized(g_raw, gallery_path) if normalize else g_raw
    return q_emb, g_emb, q.labels, g.labels, q.ids, g.ids


def _index_recall(spec, q_emb, g_emb, k: int, device: str) -> tuple[dict, list[str]]:
    """recall@k of an approximate index against exact search, with its build and search rates."""
    import time

    from compat.embeddings.ann import build_index, index_search, recall_at_k, resolved
    from compat.embeddings.search import resolve_device, search
    from compat.errors import BadInputError

    k = min(k, g_emb.shape[0])
    full = resolved(spec, *g_emb.shape).params
    cells = max(full.get("nlist", 1), 2 ** full.get("nbits", 0))
    if full.get("train", cells) < cells:
        raise BadInputError(
            f"--index {spec.kind}: {full['train']} training rows for {cells} cells or codewords "
            "(lower nlist or nbits, or raise train)"
        )
    dev = resolve_device(device)
    t0 = time.perf_counter()
    _, exact = search(q_emb, g_emb, k, device=dev)
    t1 = time.perf_counter()
    index = build_index(g_emb, spec, device=dev)
    t2 = time.perf_counter()
    _, approx = index_search(index, q_emb, k)
    t3 = time.perf_counter()
    nq = max(1, q_emb.shape[0])
    notes: list[str] = []
    scanned = full.get("nprobe", 0) / max(1, full.get("nlist", 1))
    if spec.kind in ("ivf", "ivfpq") and (scanned >= 0.5 or g_emb.shape[0] < EXACT_IS_BETTER):
        notes.append(
            f"--index {spec.kind} scans {scanned:.0%} of {g_emb.shape[0]:,} rows: exact search "
            f"(without --index) is the better choice below ~{EXACT_IS_BETTER:,} rows"
        )
    return {
        "index.spec": resolved(spec, *g_emb.shape).describe(),
        f"index.recall@{k}": recall_at_k(approx, exact),
        "index.build_seconds": t2 - t1,
        "index.queries_per_second": nq / max(t3 - t2, 1e-9),
        "index.exact_queries_per_second": nq / max(t1 - t0, 1e-9),
    }, notes


def _normalized(x, path: Path):
    from compat.errors import BadInputError
    from compat.models.norms import l2_normalize_rows

    out, zero = l2_normalize_rows(x)  # rows of any finite scale (1e20, 1e-30) come out unit
    if zero.size:
        raise BadInputError(
            f"{path}: embeddings: row {int(zero[0])} has zero norm and cannot be "
            "L2-normalised (use --no-normalize for raw inner products)"
        )
    return out


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
