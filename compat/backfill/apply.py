"""Backfill a stored gallery with psi: upgrade its old rows into the new version's space, without
the images (BiCT's forward step applied to a real gallery file).

Guarantees:

* **The input is never modified**; ``out`` must be another file.
* **Nothing half-written**: the output bundle appears (temporary file + rename) only when every
  selected row is upgraded.
* **Resumable**: rows are upgraded in batches; each finished batch is saved (atomically) in a
  work folder beside the output, ``.<out name>.backfill/``, keyed by a digest of the job (input
  sha256, psi sha256, selected rows, batch size). A killed run started again with the same
  arguments skips the saved batches; a work folder of another job is discarded. The folder is
  removed once the output is written.
* **Provenance**: the output records every row's version (``row_versions``), a bundle-level
  ``version`` when all rows share one, and appends this run to ``meta["backfill"]``.

Refused with a one-line :class:`~compat.errors.BadInputError` (exit 4): rows not made by
``--from`` (bundle ``version``/``row_versions``, or the embedding-cache key naming other parent
weights than psi was fitted on), a psi of other versions or dimensions, NaN or inf rows, and a
partial backfill that would mix rows of two widths in one matrix.

Which rows (``fraction``, ``order``): :mod:`compat.backfill.plan`. Searching a partially
backfilled gallery: :mod:`compat.embeddings.mixed`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from compat.backfill.plan import (
    bundle_version,
    check_rows,
    row_versions,
    select_rows,
)
from compat.errors import BadInputError, NotFoundError, UsageError
from compat.io import atomic_path, fingerprint, sha256_bytes, sha256_file, write_json
from compat.models.card import UpgradeCard, check_upgrade, read_upgrade_card

DEFAULT_BATCH = 8192
STATE = "state.json"
# Meta keys that describe an embedding-cache entry; they are not true of the upgraded bundle.
_CACHE_META = ("cache_key", "content_sha256")


@dataclass
class BackfillResult:
    gallery: str
    out: str
    source: str
    target: str
    total: int  # rows in the gallery
    upgraded: int  # rows upgraded by this run
    already: int  # rows that were in the target version before this run
    remaining: int  # rows still in the source version afterwards
    batches: int
    resumed_batches: int  # batches found finished from an interrupted run
    psi_weights_sha256: str
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def work_dir_for(out: str | os.PathLike[str]) -> Path:
    """The folder holding an unfinished backfill's finished batches."""
    p = Path(out)
    return p.parent / f".{p.name}.backfill"


def _batch_path(work: Path, b: int) -> Path:
    return work / f"batch-{b:06d}.npy"


def _same_file(a: Path, b: Path) -> bool:
    if a.resolve() == b.resolve():
        return True
    try:
        return b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _check_psi(card: UpgradeCard, source: str, target: str, dim: int | None, where: str) -> None:
    """psi must upgrade ``--from`` into ``--to`` and take the gallery's row width."""
    check_upgrade(
        card,
        where,
        source=source,
        target=target,
        wanted=f"not --from {source} -> --to {target}",
        in_dim=dim,
        rows_of="the gallery's rows",
    )


def _check_cache_key(meta: dict[str, Any], card: UpgradeCard, where: str, psi_where: str) -> None:
    """A gallery that came out of the embedding cache names the weights that made it."""
    key = meta.get("cache_key")
    made_by = key.get("weights_sha256") if isinstance(key, dict) else None
    check_upgrade(
        card,
        psi_where,
        target=card.to,
        from_weights=made_by if isinstance(made_by, str) else None,
        weights_origin=f"the rows of {where} were made by (meta.cache_key)",
        rerun="this psi does not apply to this gallery",
    )


class _Bar:
    """A rich progress bar on stderr (rows upgraded, rows/s); silent when disabled."""

    def __init__(self, total: int, done: int, enabled: bool | None, label: str) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.total, self.done, self.label = total, done, label
        self._p: Any = None
        self._task: Any = None

    def __enter__(self) -> _Bar:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TaskProgressColumn,
                TextColumn,
                TimeRemainingColumn,
            )

            self._p = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TaskProgressColumn(),
                TextColumn("{task.fields[rate]:>9.0f} rows/s"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self._p.__enter__()
            self._task = self._p.add_task(
                self.label, total=self.total, completed=self.done, rate=0.0
            )
        return self

    def advance(self, rows: int, rate: float) -> None:
        if self._p is not None:
            self._p.update(self._task, advance=rows, rate=rate)

    def __exit__(self, *exc: object) -> None:
        if self._p is not None:
            self._p.__exit__(*exc)


def backfill(
    gallery: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    source: str,
    target: str,
    psi_dir: str | os.PathLike[str],
    fraction: float = 1.0,
    order: str = "oldest",
    seed: int = 0,
    batch_size: int = DEFAULT_BATCH,
    assume_from: bool = False,
    progress: bool | None = None,
    device: str = "cpu",
    log: Any = None,
) -> BackfillResult:
    """Upgrade ``gallery`` rows made by ``source`` into ``target`` with the psi in ``psi_dir``;
    write the result to ``out``. See the module docstring for the guarantees."""
    from compat.embeddings.bundle import EmbeddingBundle, load_bundle, save_bundle
    from compat.models.upgrade import FoldedUpgrade, load_upgrade

    say = log or (lambda msg: None)
    started = time.perf_counter()
    gallery_path, out_path = Path(gallery), Path(out)
    if batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {batch_size}")
    if source == target:
        raise UsageError(f"--from and --to are both {source!r}")
    if not gallery_path.is_file():
        raise NotFoundError(f"{gallery_path}: file not found")
    if _same_file(gallery_path, out_path):
        raise UsageError(f"--out {out_path} is the input gallery; the input is never modified")
    psi_path = Path(psi_dir)
    card = read_upgrade_card(psi_path)
    psi_where = str(psi_path / "card.json")

    input_sha = sha256_file(gallery_path)
    bundle = load_bundle(gallery_path)
    where = str(gallery_path)
    versions = row_versions(
        bundle.version,
        bundle.row_versions,
        len(bundle),
        where=where,
        assume=source if assume_from else None,
    )
    check_rows(versions, source, target, where)
    n_source = sum(v == source for v in versions)
    _check_psi(card, source, target, bundle.dim if n_source else None, psi_where)
    if n_source:
        _check_cache_key(bundle.meta, card, where, psi_where)
    selection = select_rows(versions, source, target, fraction=fraction, order=order, seed=seed)
    rows = selection.rows
    out_dim = card.out_dim
    left = n_source - len(rows)
    if out_dim != bundle.dim and selection.already:
        raise BadInputError(
            f"{where}: embeddings: rows already in {target} have {bundle.dim} dims, "
            f"but psi makes {out_dim}-dim rows"
        )
    if out_dim != bundle.dim and len(rows) and left:
        raise BadInputError(
            f"{psi_where}: out_dim: psi makes {out_dim}-dim rows from {bundle.dim}-dim ones; "
            "a partial backfill would mix both widths in one gallery; use --fraction 1"
        )

    job = fingerprint(
        {
            "input_sha256": input_sha,
            "psi_sha256": card.weights_sha256,
            "rows": sha256_bytes(np.ascontiguousarray(rows, dtype=np.int64).tobytes()),
            "batch_size": batch_size,
            "assume_from": assume_from,
        }
    )
    work = work_dir_for(out_path)
    n_batches = (len(rows) + batch_size - 1) // batch_size
    done = _resume_state(work, job, n_batches, say)

    upgraded = np.empty((0, out_dim), dtype=np.float32)
    if len(rows):
        psi, _ = load_upgrade(psi_path)
        fast = FoldedUpgrade(psi, device)
        import torch

        todo = [b for b in range(n_batches) if b not in done]
        if done:
            say(f"backfill: resuming: {len(done)} of {n_batches} batches already done")
        done_rows = sum(min(batch_size, len(rows) - b * batch_size) for b in done)
        label = f"backfill {source} -> {target}"
        t0, upgraded_now = time.perf_counter(), 0
        with _Bar(len(rows), done_rows, progress, label) as bar:
            for b in todo:
                idx = rows[b * batch_size : (b + 1) * batch_size]
                y = fast(torch.from_numpy(bundle.embeddings[idx])).cpu().numpy()
                if not np.isfinite(y).all():
                    raise BadInputError(
                        f"{psi_where}: psi produced NaN or inf for gallery row "
                        f"{int(idx[int(np.argwhere(~np.isfinite(y))[0, 0])])}"
                    )
                with atomic_path(_batch_path(work, b)) as tmp, open(tmp, "wb") as f:
                    np.save(f, y.astype(np.float32, copy=False))
                upgraded_now += len(idx)
                bar.advance(len(idx), upgraded_now / max(time.perf_counter() - t0, 1e-9))
        upgraded = _assemble(work, rows, n_batches, batch_size, out_dim)

    if out_dim != bundle.dim and len(rows):  # a full backfill into a new width: all rows replaced
        embeddings = np.empty((len(bundle), out_dim), dtype=np.float32)
    else:
        embeddings = bundle.embeddings.copy()
    if len(rows):
        embeddings[rows] = upgraded
    new_versions = list(versions)
    for r in rows.tolist():
        new_versions[r] = target
    meta = {k: v for k, v in bundle.meta.items() if k not in _CACHE_META}
    history = list(meta.get("backfill", [])) if isinstance(meta.get("backfill"), list) else []
    history.append(
        {
            "from": source,
            "to": target,
            "psi_weights_sha256": card.weights_sha256,
            "from_weights_sha256": card.from_weights_sha256,
            "to_weights_sha256": card.to_weights_sha256,
            "input_sha256": input_sha,
            "fraction": fraction,
            "order": order,
            "seed": seed if order == "random" else None,
            "upgraded": len(rows),
            "total": len(bundle),
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
    )
    meta["backfill"] = history
    result_bundle = replace(
        bundle,
        embeddings=embeddings,
        version=bundle_version(new_versions),
        row_versions=new_versions,
        meta=meta,
    )
    assert isinstance(result_bundle, EmbeddingBundle)
    save_bundle(out_path, result_bundle)
    shutil.rmtree(work, ignore_errors=True)
    return BackfillResult(
        gallery=str(gallery_path),
        out=str(out_path),
        source=source,
        target=target,
        total=len(bundle),
        upgraded=len(rows),
        already=selection.already,
        remaining=n_source - len(rows),
        batches=n_batches,
        resumed_batches=len(done),
        psi_weights_sha256=card.weights_sha256,
        seconds=round(time.perf_counter() - started, 4),
    )


def _resume_state(work: Path, job: str, n_batches: int, say: Any) -> set[int]:
    """The finished batches of this job in ``work``; a folder of another job is discarded."""
    state = work / STATE
    if work.exists():
        try:
            same = json.loads(state.read_text()).get("job") == job
        except (OSError, json.JSONDecodeError, AttributeError):
            same = False
        if not same:
            say(f"backfill: discarding {work}: an unfinished backfill of other inputs")
            shutil.rmtree(work)
    if not work.exists():
        work.mkdir(parents=True)
        write_json(state, {"job": job, "batches": n_batches})
        return set()
    return {b for b in range(n_batches) if _batch_path(work, b).is_file()}


def _assemble(work: Path, rows: np.ndarray, n_batches: int, bs: int, dim: int) -> np.ndarray:
    out = np.empty((len(rows), dim), dtype=np.float32)
    for b in range(n_batches):
        y = np.load(_batch_path(work, b), allow_pickle=False)
        want = (min(bs, len(rows) - b * bs), dim)
        if y.shape != want or y.dtype != np.float32:
            raise BadInputError(
                f"{_batch_path(work, b)}: a saved batch has shape {y.shape}, expected {want}; "
                f"delete {work} and run again"
            )
        out[b * bs : b * bs + want[0]] = y
    return out


__all__ = ["DEFAULT_BATCH", "BackfillResult", "backfill", "work_dir_for"]
