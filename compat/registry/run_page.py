"""What a version's MLflow run page shows besides its metrics: the story told for people.

- the run's **note** (MLflow's run description, tag ``mlflow.note.content``): at registration,
  what was trained (:func:`registration_note`); at promotion, the verdict in one paragraph
  (:func:`verdict_paragraph`);
- its **datasets**: the training data (at registration) and the evaluation set the gate judged
  on (at promotion), as MLflow dataset inputs with a name, a digest and a size
  (:func:`training_dataset`, :func:`evaluation_dataset`, :func:`log_dataset`);
- the verdict as **tables**: ``verdict/matrix.html`` (the verdict, every check, every gain and
  the compatibility matrix of every protocol judged or evaluated, one query x gallery table per
  metric), ``verdict/checks.json`` and ``verdict/matrix.json`` (MLflow tables,
  the table form ``MlflowClient.log_table`` writes), and one heatmap per protocol, ``verdict/heatmap_<protocol>.png``,
  drawn to stay legible at the width of MLflow's artifact view (:func:`log_verdict_pages`).

The evaluate stage's own plots (``plots/``) stay as they are; these are drawn here from the
verdict and the evaluation's matrix for the version's own cells only.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

from compat.contracts.gate import Verdict
from compat.evaluate.plots import HeatmapStyle
from compat.io import scratch_dir
from compat.registry.describe import percent, points
from compat.registry.store import Registry

NOTE_TAG = "mlflow.note.content"  # what MLflow shows as the run's description
CONTEXT_TAG = "mlflow.data.context"  # MLflow's dataset-input tag: training, evaluation, ...
FOLDER = "verdict"  # the run's artifact folder of these pages
PANELS_PER_ROW = 3  # heatmap panels side by side: ~900 px wide, readable in MLflow's viewer
# Large cell labels at any chain length and no axis labels (the title names the axes): the
# panels are small and MLflow's artifact view shows them at their own size (100 dpi).
RUN_PAGE_STYLE = HeatmapStyle(
    per_row=PANELS_PER_ROW, min_side=2.4, cell_font=11.0, long_cell_font=11.0,
    axis_labels=False, dpi=100,
)  # fmt: skip

Matrix = dict[str, dict[str, dict[str, dict[str, float | None]]]]


def registration_note(version: str, card: Any, kind: str) -> str:
    """The run's note at registration: what the version is and that it is not yet gated."""
    if kind != "model":
        return (
            f"{version}: embeddings of the evaluation set registered by compat (dim {card.dim}, "
            f"parent {card.parent or 'none'}); not yet gated: compat promote {version} records "
            "its verdict here."
        )
    trained = f"trained {card.epochs} epochs" if card.epochs else "trained"
    on = f" on {card.num_images} images" if card.num_images else ""
    took = f" in {card.wall_seconds:.0f} s" if card.wall_seconds else ""
    device = f" ({card.device})" if card.device else ""
    return (
        f"{version}: {card.method or 'a'} model ({card.backbone}, dim {card.dim}, head "
        f"{card.head or 'none'}, parent {card.parent or 'none'}), {trained}{on}{took}{device}; "
        f"not yet gated: compat promote {version} records its verdict here."
    )


def verdict_paragraph(verdict: Verdict, against: str | None) -> str:
    """The verdict in one paragraph (the run's note): outcome, each check, each gain, the
    promotion asked for. Rates read as percentages, differences as points."""
    status = "PASSED" if verdict.passed else "FAILED"
    if verdict.parent is None and not verdict.rollback:
        head = f"{verdict.version} has no parent: it has no compatibility criteria to check."
    elif verdict.rollback:
        head = (
            f"{verdict.version} {status} its gate as a rollback from {against} (checked on the "
            f"rows of {', '.join(verdict.rollback)} too)."
        )
    else:
        failed = sum(not r.passed for r in verdict.results)
        count = f"{len(verdict.results) - failed} of {len(verdict.results)} checks pass"
        head = f"{verdict.version} {status} its compatibility contract with {verdict.parent} ({count})."
    sentences = [head]
    for r in verdict.results:
        bound = f", lower bound {points(r.lower_bound)}" if r.lower_bound is not None else ""
        mark = {"pass": "passes", "fail": "FAILS", "accepted": "FAILS, loss accepted"}[r.verdict]
        sentences.append(
            f"{r.description} {mark}: {percent(r.lhs_value)} vs {percent(r.rhs_value)}, "
            f"{points(r.difference)}{bound}."
        )
    for protocol, per in sorted(verdict.gain.items()):
        for metric, g in sorted(per.items()):
            value = g.get("value")
            if value is None:
                what = f"undefined ({g.get('reason') or 'no value'})"
            elif g.get("meaningful", True):
                what = percent(value)
            else:
                what = f"{percent(value)}, not meaningful ({g.get('reason')})"
            sentences.append(
                f"Update gain on {protocol} {metric} against paragon "
                f"{g.get('paragon') or 'n/a'}: {what}."
            )
    if verdict.accepted_loss:
        a = verdict.accepted_loss
        sentences.append(f"Loss accepted by {a['who']} with --accept-loss: {a['why']}.")
    sentences.append(
        f"Promotion requested against {against} (production at the time)."
        if against
        else "Promotion requested while no version was production."
    )
    return " ".join(sentences)


def set_note(reg: Registry, run_id: str, text: str) -> None:
    """Set the run's description (MLflow's ``mlflow.note.content`` tag)."""
    reg.call("set_tag", run_id, NOTE_TAG, text)


# --- datasets --------------------------------------------------------------------------------


def training_dataset(card: Any) -> tuple[Any, str] | None:
    """The training data of a trained version's card as (MLflow Dataset, context); None when
    the card records no training fingerprint."""
    from mlflow.entities import Dataset

    data = getattr(card, "data", None)
    digest = (data.train_fingerprint if data is not None else None) or card.data_fingerprint
    if not digest:
        return None
    split = (data.split if data is not None else None) or card.split or "train"
    profile = {"images": card.num_images, "classes": card.num_classes, "split": split}
    source = {"split": split, "source_fingerprint": card.source_fingerprint}
    dataset = Dataset(
        name=f"train:{split}",
        digest=str(digest)[:36],
        source_type="compat",
        source=json.dumps(source, sort_keys=True),
        profile=json.dumps({k: v for k, v in profile.items() if v is not None}, sort_keys=True),
    )
    return dataset, "training"


def evaluation_dataset(manifest: Any, where: str, digest: str | None = None) -> tuple[Any, str]:
    """The evaluation set the gate judged on (``splits/eval.json``) as (MLflow Dataset,
    context): digest the data fingerprint (source + manifest) when known, its size in items,
    classes, queries, gallery items and verification pairs."""
    from mlflow.entities import Dataset

    profile = {
        "items": len(manifest.items),
        "classes": len(set(manifest.labels)),
        "queries": len(manifest.query),
        "gallery": len(manifest.gallery),
        "pairs": len(manifest.pairs),
        "nonmated_classes": len(manifest.nonmated_classes),
    }
    source = {"manifest": where, "fingerprint": manifest.fingerprint,
              "source_fingerprint": manifest.source_fingerprint}  # fmt: skip
    dataset = Dataset(
        name=f"eval:{manifest.fingerprint[:8]}",
        digest=(digest or manifest.fingerprint)[:36],
        source_type="compat",
        source=json.dumps(source, sort_keys=True),
        profile=json.dumps(profile, sort_keys=True),
    )
    return dataset, "evaluation"


def log_dataset(reg: Registry, run_id: str, dataset: tuple[Any, str] | None) -> None:
    """Log (Dataset, context) as one of the run's dataset inputs (nothing for None)."""
    if dataset is None:
        return
    from mlflow.entities import DatasetInput, InputTag

    ds, context = dataset
    reg.call(
        "log_inputs", run_id, datasets=[DatasetInput(ds, tags=[InputTag(CONTEXT_TAG, context)])]
    )


# --- the verdict as tables and figures -------------------------------------------------------


def run_matrix(verdict: Verdict, evaluated: Matrix | None) -> Matrix:
    """The cells this version's run shows: every cell the gate judged (its protocols and
    metrics first), then the evaluation's cells among the same versions (every protocol it
    ran: open-set and verification too)."""
    out: Matrix = {}
    names = {verdict.version}
    for per_metric in verdict.matrix.values():
        for rows in per_metric.values():
            for q, cols in rows.items():
                names.add(q)
                names.update(cols)
    for source, only_names in ((verdict.matrix, False), (evaluated or {}, True)):
        for protocol, per_metric in source.items():
            for metric, rows in per_metric.items():
                for q, cols in rows.items():
                    for g, v in cols.items():
                        if v is None or (only_names and (q not in names or g not in names)):
                            continue
                        cell = out.setdefault(protocol, {}).setdefault(metric, {})
                        cell.setdefault(q, {}).setdefault(g, v)
    return out


def _natural(name: str) -> tuple[Any, ...]:
    """Sort key reading digits as numbers: v1, v2, v3, v3-paragon, v10, psi(v1)."""
    parts = re.split(r"(\d+)", name)
    return (name.startswith("psi("), *[(0, int(p)) if p.isdigit() else (1, p) for p in parts])


def _axes(rows: dict[str, dict[str, float | None]]) -> tuple[list[str], list[str]]:
    """(queries, galleries) of one metric's cells, oldest version first."""
    queries = sorted(rows, key=_natural)
    galleries = sorted({g for cols in rows.values() for g in cols}, key=_natural)
    return queries, galleries


def matrix_rows(matrix: Matrix) -> list[dict[str, Any]]:
    """The matrix as long rows (protocol, metric, query, gallery, value): an MLflow table."""
    return [
        {"protocol": p, "metric": m, "query": q, "gallery": g, "value": v}
        for p, per in matrix.items()
        for m, rows in per.items()
        for q, cols in rows.items()
        for g, v in cols.items()
    ]


def _cell(v: float | None) -> str:
    if v is None:
        return "<td></td>"
    shade = int(255 - 120 * max(0.0, min(1.0, v)))
    return f'<td style="background:rgb({shade},{shade + (255 - shade) // 2},255)">{percent(v)}</td>'


def _table(head: list[str], body: list[list[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    rows = "".join("<tr>" + "".join(row) + "</tr>" for row in body)
    return f"<table><tr>{th}</tr>{rows}</table>"


def _td(text: Any) -> str:
    return f"<td>{html.escape('' if text is None else str(text))}</td>"


CSS = (
    "body{font-family:system-ui,sans-serif;font-size:14px;margin:12px;max-width:900px}"
    "table{border-collapse:collapse;margin:6px 0 14px}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
    "th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}"
    "h2{font-size:17px}h3{font-size:15px;margin:14px 0 4px}.fail{color:#b00}"
)


def verdict_html(verdict: Verdict, against: str | None, matrix: Matrix) -> str:
    """One HTML page: the verdict paragraph, the checks, the gains and every protocol's
    matrix (a query x gallery table per metric, values in %)."""
    head, _, rest = verdict_paragraph(verdict, against).partition(". ")
    parts = [f"<h2>{html.escape(head)}.</h2>", f"<p>{html.escape(rest)}</p>"]
    if verdict.results:
        body = [
            [
                _td(r.gallery), _td(r.protocol), _td(r.metric), _td(r.require),
                _td(percent(r.lhs_value)), _td(percent(r.rhs_value)),
                _td(points(r.difference)),
                _td(points(r.lower_bound) if r.lower_bound is not None else ""),
                f'<td class="{"" if r.passed else "fail"}">{"pass" if r.passed else "FAIL"}</td>',
            ]
            for r in verdict.results
        ]  # fmt: skip
        head = ["gallery", "protocol", "metric", "require", "new", "baseline", "difference",
                "lower bound", "verdict"]  # fmt: skip
        parts += ["<h3>Checks</h3>", _table(head, body)]
    gains = [
        [_td(p), _td(m), _td(g.get("paragon")), _td(percent(g.get("value"))),
         _td("yes" if g.get("meaningful") else f"no: {g.get('reason')}")]
        for p, per in sorted(verdict.gain.items()) for m, g in sorted(per.items())
    ]  # fmt: skip
    if gains:
        head = ["protocol", "metric", "paragon", "update gain", "meaningful"]
        parts += ["<h3>Update gains</h3>", _table(head, gains)]
    for protocol, per in matrix.items():
        parts.append(f"<h3>{html.escape(protocol)}: M[query][gallery]</h3>")
        for metric, rows in per.items():
            queries, galleries = _axes(rows)
            body = [[_td(q)] + [_cell(rows[q].get(g)) for g in galleries] for q in queries]
            parts.append(_table([f"{metric}: query \\ gallery", *galleries], body))
    title = html.escape(f"{verdict.version}: compat verdict")
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{title}</title>'
        f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>\n"
    )


def heatmaps(matrix: Matrix, folder: Path) -> list[Path]:
    """One PNG per protocol, ``PANELS_PER_ROW`` metric panels a row, cells labelled in % large
    enough to read at ~900 px (MLflow's artifact view shows images at their own size): the
    evaluate stage's heat map (:func:`compat.evaluate.plots.draw_heatmap`) in
    :data:`RUN_PAGE_STYLE`, over this version's cells, versions in natural order."""
    from compat.evaluate.plots import draw_heatmap

    out = []
    for protocol, per in matrix.items():
        if not per:
            continue
        names = sorted(
            {n for rows in per.values() for q, cols in rows.items() for n in (q, *cols)},
            key=_natural,
        )
        title = f"{protocol}: M[query][gallery] (%)"
        path = folder / f"heatmap_{protocol}.png"
        out.append(draw_heatmap(path, title, per, names, style=RUN_PAGE_STYLE))
    return out


def log_verdict_pages(
    reg: Registry, run_id: str, verdict: Verdict, against: str | None, evaluated: Matrix | None
) -> None:
    """The verdict's HTML page, MLflow tables and heatmaps under the run's ``verdict/``."""
    matrix = run_matrix(verdict, evaluated)
    with scratch_dir("verdict") as tmp:
        folder = Path(tmp)
        (folder / "matrix.html").write_text(verdict_html(verdict, against, matrix), "utf-8")
        files = [folder / "matrix.html", *heatmaps(matrix, folder)]
        tables = []
        if verdict.results:
            checks = verdict.checks()
            files.append(_table_file(folder / "checks.json", checks))
            tables.append("checks.json")
        rows = matrix_rows(matrix)
        if rows:
            files.append(_table_file(folder / "matrix.json", rows))
            tables.append("matrix.json")
        for f in files:
            reg.call("log_artifact", run_id, str(f), FOLDER)
    if tables:
        # What MLflow's UI reads to show a JSON file as a table: the run tag log_table writes.
        # A documented reason for an internal tag: log_table itself first downloads a table
        # already at that path and appends to it, which races when several verdicts are
        # recorded on one run at once (and would append a second verdict's rows); writing the
        # file ourselves and this tag is what log_table does minus the read-modify-write of the
        # file. tests/registry/test_run_page.py checks the tag's shape against log_table's.
        logged = [{"path": f"{FOLDER}/{name}", "type": "table"} for name in tables]
        reg.call("set_tag", run_id, "mlflow.loggedArtifacts", json.dumps(logged))


def _table_file(path: Path, rows: list[dict[str, Any]]) -> Path:
    """``rows`` as an MLflow table file (``{"columns": [...], "data": [[...], ...]}``, the form
    ``MlflowClient.log_table`` writes), values exact. Written and logged as a plain artifact:
    ``log_table`` first downloads a table already there to append to it, which races when
    several copies record verdicts on one run at once (and appends a second verdict's rows)."""
    import math

    columns = list(rows[0])

    def plain(v: Any) -> Any:
        return None if isinstance(v, float) and not math.isfinite(v) else v

    data = [[plain(r.get(c)) for c in columns] for r in rows]
    path.write_text(json.dumps({"columns": columns, "data": data}), "utf-8")
    return path


__all__ = [
    "FOLDER",
    "NOTE_TAG",
    "evaluation_dataset",
    "heatmaps",
    "log_dataset",
    "log_verdict_pages",
    "matrix_rows",
    "registration_note",
    "run_matrix",
    "set_note",
    "training_dataset",
    "verdict_html",
    "verdict_paragraph",
]
