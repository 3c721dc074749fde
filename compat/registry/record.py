"""What compat writes onto a registered version's MLflow run, so the registry tells the story.

At ``compat register``: the training history, one point per epoch and metric
(``train/<name>`` at step = epoch, from ``train_metrics.json``, timestamped when the epochs
ran: :func:`log_training`, :func:`training_window`).
At ``compat promote`` (:func:`record_verdict`): status and per-criterion tags and a description
for people on the version (:mod:`compat.registry.describe`); on its run, the verdict in one
paragraph as the run's description, the evaluation set as a dataset input, the verdict as
tables and heatmaps under ``verdict/`` (:mod:`compat.registry.run_page`), a few verdict metrics
(:func:`verdict_metrics`, named ``verdict/...`` so that MLflow's metric view, sorted by name,
shows the training curves first), the sealed JSON report under ``reports/``, and the evaluate
stage's plots and metrics (heatmaps, CMC, backfill curves) under ``plots/`` and ``metrics/``.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from compat.contracts.gate import Verdict
from compat.io import scratch_dir, storage_errors
from compat.registry.describe import describe
from compat.registry.run_page import (
    evaluation_dataset,
    log_dataset,
    log_verdict_pages,
    set_note,
    verdict_paragraph,
)
from compat.registry.store import Registry, VersionRecord, tag_key
from compat.registry.tags import CHECKS_TAG, GAINS_TAG, SERVE_TAG

BATCH = 1000  # MLflow's log_batch takes at most 1000 metrics per call


def seal(report: dict[str, Any]) -> bytes:
    """The report's JSON bytes (sorted keys, indent 2); sets ``report_sha256`` to their digest."""
    blob = json.dumps(report, sort_keys=True, indent=2).encode()
    report["report_sha256"] = hashlib.sha256(blob).hexdigest()
    return blob


def metric_key(*parts: str) -> str:
    """An MLflow metric name from compat names: MLflow allows only letters, digits, ``_ - . /``
    and space, so ``tar@far=0.1`` -> ``tar_at_far_0.1`` and ``psi(v1)`` -> ``psi-v1``."""

    def clean(part: str) -> str:
        part = part.replace("@", "_at_").replace("=", "_").replace("(", "-").replace(")", "")
        return re.sub(r"[^\w.\- ]", "_", part).strip("_ ") or "_"

    return "/".join(clean(p) for p in parts)


MAX_TAG_VALUE = 100_000  # MLflow's limit on a model version tag's value


# Tags that belong to one verdict: record_verdict removes the previous verdict's before it
# writes its own, so a version's tags never mix two verdicts (a failed rollback's checks beside
# a later promotion's).
VERDICT_TAGS = ("compat.checks", "compat.gains", "compat.serve")
VERDICT_PREFIXES = ("compat.check.", "compat.gain.")


def verdict_tags(
    verdict: Verdict, when: str, kind: str | None = None, keep_status: bool = False
) -> dict[str, str]:
    """``compat.verdict.passed`` (``true``/``false``), ``compat.verdict.at``,
    ``compat.verdict.kind`` (``promotion`` or ``rollback``; ``kind`` when the caller knows it),
    ``compat.checks`` (every check object, compact JSON: what ``show`` and ``chain`` print), one
    ``compat.check.*`` per criterion (``pass +0.0123``) and the first update gain per protocol;
    and ``compat.status`` (``passed``/``failed``) unless ``keep_status``: a version that is or
    was production keeps ``promoted``, whatever a later gate says (its verdict is in
    ``compat.verdict.passed``)."""
    tags = {
        "compat.verdict.passed": "true" if verdict.passed else "false",
        "compat.verdict.at": when,
        "compat.verdict.kind": kind or ("rollback" if verdict.rollback else "promotion"),
    }
    if not keep_status:
        tags["compat.status"] = "passed" if verdict.passed else "failed"
    if verdict.serve.get("mode", "native") != "native":
        tags[SERVE_TAG] = serve_text(verdict.serve)
    checks = json.dumps(verdict.checks(), sort_keys=True, separators=(",", ":"), allow_nan=False)
    if len(checks) <= MAX_TAG_VALUE:  # else show/chain fall back to the per-check tags
        tags[CHECKS_TAG] = checks
    for r in verdict.results:
        key = tag_key("compat.check", r.gallery, r.protocol, r.metric, *_forward(r.require))
        tags[key] = f"{r.verdict} {r.difference:+.4f}" if r.difference is not None else "fail n/a"
    if verdict.gain:
        gains = json.dumps(verdict.gain, sort_keys=True, separators=(",", ":"), allow_nan=False)
        if len(gains) <= MAX_TAG_VALUE:
            tags[GAINS_TAG] = gains
    for p, per in verdict.gain.items():
        first = next((g for g in per.values() if g.get("value") is not None), None)
        if first is not None:  # a glance in MLflow's UI; never a bare number when it means nothing
            flag = "" if first.get("meaningful") else " (not meaningful)"
            tags[f"compat.gain.{p}"] = f"{first['value']:.4f}{flag}"
    return tags


def serve_text(serve: dict[str, Any]) -> str:
    """A served configuration in one line: ``query-adapter procrustes maps/x sha256 1a2b3c4d5e6f``."""
    parts = [serve.get("mode", "native")]
    for key in ("kind", "path"):
        if serve.get(key):
            parts.append(str(serve[key]))
    if serve.get("blend_weight") is not None:  # a query blend's weight on the adapted query
        parts.append(f"weight {serve['blend_weight']:g}")
    if serve.get("weights_sha256"):
        parts.append(f"sha256 {str(serve['weights_sha256'])[:12]}")
    return " ".join(parts)


def _forward(require: str) -> tuple[str, ...]:
    # A forward criterion (M(new, psi(parent))) gets its own key beside the backward one.
    return ("forward",) if "forward" in require.split(" > ") else ()


def verdict_metrics(verdict: Verdict) -> dict[str, float]:
    """The verdict as a few MLflow metrics, under ``verdict/`` so that MLflow's metric view
    (sections sorted by name) shows the training curves (``train/``) first:

    - ``verdict/passed``: 1 or 0;
    - ``verdict/checks_failed``: how many checks failed (when there were checks);
    - ``verdict/gain/<protocol>/<metric>``: each meaningful update gain against the paragon
      (BCT Eq. 9: every check of the pair passed, the paragon not weaker than the version);
      a gain that means nothing is never a bare number here.

    Every cell, check and gain, meaningful or not, is in the run's tables (``verdict/``,
    :mod:`compat.registry.run_page`) and in the JSON report.
    """
    out: dict[str, float] = {"verdict/passed": float(verdict.passed)}
    if verdict.results:
        out["verdict/checks_failed"] = float(len(verdict.failed()))
    for protocol, per_metric in verdict.gain.items():
        for metric, gain in per_metric.items():
            if gain.get("value") is not None and gain.get("meaningful"):
                out[metric_key("verdict", "gain", protocol, metric)] = float(gain["value"])
    return out


def training_history(path: Path, end_ms: int | None = None) -> list[tuple[str, float, int, int]]:
    """(key, value, timestamp ms, step) per epoch and number of a ``train_metrics.json``
    (``{"epochs": [rows], "summary": {...}}``, :mod:`compat.train.progress`): ``train/<name>``
    at step = epoch, timestamped as the epochs ran, one after the other, the last one ending
    at ``end_ms`` (when training ended, :func:`training_window`; default now); the summary's
    totals (``seconds_total``, ``images_per_s_mean``) at the last epoch. A file with only a
    summary (an older layout) gives its numbers at step 0; a missing or unreadable file, none.
    """
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return []
    if not isinstance(data, dict):
        return []
    rows = [r for r in data.get("epochs", []) if isinstance(r, dict)]
    summary = data.get("summary", {} if rows else data)
    summary = summary if isinstance(summary, dict) else {}
    now = int(time.time() * 1000) if end_ms is None else end_ms
    seconds = [float(r.get("seconds", 0) or 0) for r in rows]
    start = now - int(1000 * sum(seconds))
    out: list[tuple[str, float, int, int]] = []
    elapsed = 0.0
    last = 0
    for i, row in enumerate(rows):
        elapsed += seconds[i]
        step = int(row.get("epoch", i + 1))
        last = step
        stamp = start + int(1000 * elapsed)
        for k, v in row.items():
            if k != "epoch" and _number(v):
                out.append((metric_key("train", k), float(v), stamp, step))
    logged = {k for k, *_ in out}
    for k, v in summary.items():
        key = metric_key("train", k)
        if k != "epoch" and _number(v) and key not in logged:
            out.append((key, float(v), now, last))
    return out


def training_window(card: Any) -> tuple[int, int] | None:
    """(start, end) of a trained version's training, in ms since the epoch, from its card:
    ``created_at`` (written when training ended) less ``wall_seconds`` (else
    ``training_seconds``); None when the card does not say."""
    created = getattr(card, "created_at", None)
    took = getattr(card, "wall_seconds", None) or getattr(card, "training_seconds", None)
    if not created or took is None:
        return None
    try:
        end = int(datetime.fromisoformat(str(created)).timestamp() * 1000)
    except ValueError:
        return None
    return end - int(1000 * float(took)), end


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def log_metrics(reg: Registry, run_id: str, points: list[tuple[str, float, int, int]]) -> None:
    """Log (key, value, timestamp ms, step) points to a run, 1000 per request."""
    from mlflow.entities import Metric

    metrics = [Metric(k, v, t, s) for k, v, t, s in points]
    for i in range(0, len(metrics), BATCH):
        reg.call("log_batch", run_id, metrics=metrics[i : i + BATCH])


def log_training(reg: Registry, run_id: str, folder: Path, end_ms: int | None = None) -> None:
    """The training history of ``folder/train_metrics.json`` as run metrics with steps, the
    last epoch ending at ``end_ms`` (default now)."""
    log_metrics(reg, run_id, training_history(folder / "train_metrics.json", end_ms))


def evaluation_files(version: str, plots: Path, metrics: Path) -> dict[str, list[Path]]:
    """The evaluate stage's outputs to attach to ``version``'s run: ``{artifact folder: files}``
    (every file under ``plots``, every ``metrics/*.json``), only when ``metrics/compat.json``
    evaluated ``version``'s queries (a matrix cell M(version, gallery)), so another chain's
    plots never land on it; empty otherwise."""
    summary = metrics / "compat.json"
    try:
        cells = json.loads(summary.read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError, AttributeError):
        return {}
    if not any(isinstance(cell, list) and cell[:1] == [version] for cell in cells):
        return {}
    out: dict[str, list[Path]] = {"metrics": sorted(metrics.glob("*.json"))}
    if plots.is_dir():
        for f in sorted(p for p in plots.rglob("*") if p.is_file()):
            out.setdefault(str(Path("plots") / f.parent.relative_to(plots)), []).append(f)
    return out


def evaluated_matrix(version: str, metrics: Path) -> dict[str, Any] | None:
    """The matrix of ``metrics/compat.json`` (every protocol the evaluate stage ran, open-set
    and verification included) when it evaluated ``version``'s queries; else None, so another
    chain's numbers never land on this version's run."""
    if not evaluation_files(version, Path("plots"), metrics):
        return None
    try:
        matrix = json.loads((metrics / "compat.json").read_text(encoding="utf-8")).get("matrix")
    except (OSError, ValueError, AttributeError):
        return None
    return matrix if isinstance(matrix, dict) else None


def record_verdict(
    reg: Registry,
    rec: VersionRecord,
    verdict: Verdict,
    report: dict[str, Any],
    blob: bytes,
    plots: Path = Path("plots"),
    metrics: Path = Path("metrics"),
    evaluation: Any = None,
    evaluation_where: str = "splits/eval.json",
    keep_status: bool = False,
) -> None:
    """Tags and description on the registered version (the previous verdict's tags removed;
    ``keep_status``: a version that is or was production keeps its status); on its run, the verdict in one
    paragraph (the run's description), the evaluation set the gate judged on (``evaluation``:
    its manifest, when there was one) as a dataset input, the verdict's metrics, tables and
    heatmaps, the JSON report (``blob``) and the evaluation's plots and metrics."""
    tags = verdict_tags(verdict, report["when"], report.get("kind"), keep_status)
    stale = [
        key
        for key in rec.tags
        if (key in VERDICT_TAGS or key.startswith(VERDICT_PREFIXES)) and key not in tags
    ]
    reg.delete_tags(rec, stale)
    reg.set_tags(rec, tags)
    reg.set_description(rec, describe(verdict, report.get("against")))
    if not rec.run_id:
        return
    set_note(reg, rec.run_id, verdict_paragraph(verdict, report.get("against")))
    if evaluation is not None:
        dataset = evaluation_dataset(evaluation, evaluation_where, report.get("data_fingerprint"))
        log_dataset(reg, rec.run_id, dataset)
    now = int(time.time() * 1000)
    log_metrics(reg, rec.run_id, [(k, v, now, 0) for k, v in verdict_metrics(verdict).items()])
    with scratch_dir("report") as tmp:
        path = tmp / f"promote-{report['when'].replace(':', '').replace('.', '')}.json"
        with storage_errors(path, need=len(blob)):  # a full TMPDIR: one line, exit 5
            path.write_bytes(blob)
        reg.call("log_artifact", rec.run_id, str(path), "reports")
    evaluated = evaluated_matrix(rec.name, metrics)
    log_verdict_pages(reg, rec.run_id, verdict, report.get("against"), evaluated)
    for folder, files in evaluation_files(rec.name, plots, metrics).items():
        for f in files:
            reg.call("log_artifact", rec.run_id, str(f), folder)


__all__ = [
    "CHECKS_TAG",
    "GAINS_TAG",
    "VERDICT_PREFIXES",
    "VERDICT_TAGS",
    "describe",
    "evaluated_matrix",
    "evaluation_files",
    "log_training",
    "metric_key",
    "record_verdict",
    "seal",
    "training_history",
    "training_window",
    "verdict_metrics",
    "verdict_tags",
]
