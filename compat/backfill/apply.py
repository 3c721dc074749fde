"""Backfill a stored gallery with psi: upgrade its old rows into the new version's space, without
the images (BiCT's forward step applied to a real gallery file). This module is the one loop;
what it may write and how the output is put in place is :mod:`compat.backfill.output`, how a
killed run resumes is :mod:`compat.backfill.resume`.

Guarantees:

* **The input is never modified**; ``out`` must be another file, apart from the input
  (:func:`compat.backfill.output.check_apart`).
* **Any format, bounded memory**: input and output are ``.npz``, ``.npy`` or Parquet shards
  (:mod:`compat.embeddings.formats`; the format follows the path). Rows stream through in
  blocks of ``batch_size`` file rows (block b = rows b*B ..), so an ``.npy`` or Parquet gallery
  of any size is upgraded in the memory of one block (an ``.npz`` is read whole).
* **Nothing half-written, only its own output replaced, one writer per output**: see
  :mod:`compat.backfill.output` (a foreign ``out`` is exit 2 before any work, a second run into
  the same ``out`` exit 6).
* **Resumable**: each finished block is saved in a work folder beside the output
  (:mod:`compat.backfill.resume`); a killed run started again with the same arguments skips
  the saved blocks that pass their checksum.
* **Nothing left behind**: a run that fails (exit 2-6) removes its work folder and lock; only a
  killed or interrupted run keeps the work folder, for the next run to resume. A full disk,
  spent quota or read-only file system is a :class:`~compat.errors.StorageError` (exit 5)
  naming the path and the bytes needed, before any work when the free space is already short.
* **Row for row the in-memory path**: every row is computed by the map's ``apply``
  (:func:`compat.maps.open_map`; psi's :meth:`compat.maps.psi.FoldedUpgrade.apply`) in its
  fixed row block (:mod:`compat.models.rowblocks`), so its value depends neither on the batch
  size nor on which other rows were selected, and every engine (:mod:`compat.backfill.engines`:
  this process, or Ray workers) writes the same bits as the map applied to the whole matrix
  (psi: :func:`compat.maps.psi.upgrade_array`), on the same machine.
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

import functools
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from compat.backfill.engines import ENGINES, make_engine
from compat.backfill.output import (
    OutLock,
    check_apart,
    check_out,
    check_replaceable,
    check_room,
    remove_stale_swaps,
    same_file,
    write_output,
)
from compat.backfill.plan import Selection, check_rows, row_versions, select_rows
from compat.backfill.progress import Bar
from compat.backfill.resume import Parts, check_work_folder, job_digest, resume_state, work_dir_for
from compat.errors import BadInputError, NotFoundError, UsageError
from compat.maps.space import card_joins
from compat.models.card import UpgradeCard, check_joined, check_upgrade

DEFAULT_BATCH = 8192
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
    refused: str | None = None  # psi was refused when fitted: nothing upgraded, nothing written

    @property
    def written(self) -> bool:
        """Whether ``out`` was written (a refused psi writes nothing)."""
        return self.refused is None

    def to_json(self) -> dict[str, Any]:
        why = None if self.written else f"psi was refused when it was fitted: {self.refused}"
        return {**asdict(self), "written": self.written, "why": why}


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


def _read_map_card(psi_path: Path) -> Any:
    """psi's upgrade card, or the card of a :mod:`compat.maps` gallery map fitted between any
    two versions or embedding files (``compat adapt --role gallery-map``): both have what a
    backfill reads (``to``, ``out_dim``, ``weights_sha256``, ``is_refused``/``refused``)."""
    from compat.maps.folder import open_card

    return open_card(psi_path)


def _check_map(card: Any, source: str, target: str, dim: int | None, where: str) -> None:
    """A fitted map must be a gallery map from ``--from`` into ``--to`` taking the rows' width."""
    if card.role != "gallery-map":
        raise BadInputError(
            f"{where}: role: a {card.role} maps queries, not stored rows; fit a gallery map "
            "(compat adapt --role gallery-map)"
        )
    versions, weights = card_joins(card)  # the check the gate and score make too
    check_joined(
        where, versions, weights, subject="the map", verb="joins", source=source,
        target=target, wanted=f"not --from {source} -> --to {target}",
    )  # fmt: skip
    if dim is not None and card.in_dim != dim:
        raise BadInputError(
            f"{where}: in_dim: the map reads {card.in_dim}-dim rows, the gallery's rows are "
            f"{dim}-dim"
        )


def check_map_card(card: Any, source: str, target: str, dim: int | None, where: str) -> None:
    """psi's card (:func:`_check_psi`) or a gallery map's (:func:`_check_map`) checked against
    ``--from``, ``--to`` and the width of the rows it reads (None: not checked)."""
    check = _check_psi if isinstance(card, UpgradeCard) else _check_map
    check(card, source, target, dim, where)


def _check_cache_key(meta: dict[str, Any], card: Any, where: str, psi_where: str) -> None:
    """A gallery that came out of the embedding cache (``meta.cache_key``) or ``compat embed``
    (``meta.weights_sha256``) names the weights that made it: psi, or a gallery map whose card
    records the weights of the rows it was fitted on, must have been fitted on those."""
    key = meta.get("cache_key")
    made_by = key.get("weights_sha256") if isinstance(key, dict) else meta.get("weights_sha256")
    field = "meta.cache_key" if isinstance(key, dict) else "meta.weights_sha256"
    versions, weights = card_joins(card)
    psi = isinstance(card, UpgradeCard)
    check_joined(
        psi_where, versions, weights, subject="psi" if psi else "the map",
        verb="upgrades" if psi else "joins",
        from_weights=made_by if isinstance(made_by, str) else None,
        weights_origin=f"the rows of {where} were made by ({field})",
        rerun=f"this {'psi' if psi else 'map'} does not apply to this gallery",
    )  # fmt: skip


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
    engine: str = "local",
    log: Any = None,
) -> BackfillResult:
    """Upgrade ``gallery`` rows made by ``source`` into ``target`` with the psi in ``psi_dir``;
    write the result to ``out``. See the module docstring for the guarantees.

    ``gallery`` and ``out`` are any of the formats of :mod:`compat.embeddings.formats` (the
    format follows the path). Rows are read, upgraded and saved one block of ``batch_size``
    rows at a time, so memory stays bounded for ``.npy`` and Parquet galleries of any size.
    ``engine="ray"`` runs psi as Ray tasks (:mod:`compat.backfill.engines`); its output is
    identical.
    """
    from compat.embeddings.formats import format_of
    from compat.embeddings.reader import GalleryReader

    say = log or (lambda msg: None)
    started = time.perf_counter()
    gallery_path, out_path = Path(gallery), Path(out)
    if batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {batch_size}")
    if source == target:
        raise UsageError(f"--from and --to are both {source!r}")
    if engine not in ENGINES:
        raise UsageError(f"--engine {engine!r}: expected one of {', '.join(ENGINES)}")
    from compat.embeddings.search import resolve_device

    device = resolve_device(device)  # a name or a device this machine lacks: exit 2, at once
    if not gallery_path.exists():
        raise NotFoundError(f"{gallery_path}: file not found")
    if same_file(gallery_path, out_path):
        raise UsageError(f"--out {out_path} is the input gallery; the input is never modified")
    out_format = format_of(out_path)
    if "lance" in (out_format, format_of(gallery_path)):
        raise UsageError(
            f"--out {out_path}: a LanceDB table is backfilled in place (--gallery <table> "
            "without --out); compat data import makes one of a file gallery, compat data "
            "export a file of one"
        )
    check_out(out_path, out_format)
    psi_path = Path(psi_dir)
    card = _read_map_card(psi_path)
    psi_where = str(psi_path / "card.json")

    reader = GalleryReader(gallery_path)
    where = reader.where
    check_apart(reader, out_path, out_format)
    versions = row_version_array(
        reader.version,
        reader.row_versions,
        reader.n,
        where=where,
        assume=source if assume_from else None,
    )
    check_rows(versions, source, target, where)
    n_source = int((versions == source).sum())
    check_map_card(card, source, target, reader.dim if n_source else None, psi_where)
    # What every result of this run shares; the elapsed time is read when it is built.
    result = functools.partial(
        BackfillResult,
        gallery=str(gallery_path),
        out=str(out_path),
        source=source,
        target=target,
        total=reader.n,
        psi_weights_sha256=card.weights_sha256,
    )
    if card.is_refused:
        # The upgrade stage saved the identity because psi did not beat the gallery left alone:
        # relabelling unchanged rows as `target` would misstate where they came from.
        return result(
            upgraded=0,
            already=int(reader.n - n_source),
            remaining=n_source,
            batches=0,
            resumed_batches=0,
            seconds=time.perf_counter() - started,
            refused=card.refused.reason,
        )
    if n_source:
        _check_cache_key(reader.meta, card, where, psi_where)
    if fraction >= 1.0:  # every --from row: no ranking needed (O(n) index arrays saved)
        is_source = versions == source
        rows = np.flatnonzero(is_source)
        selection = Selection(rows=rows, already=int(reader.n - is_source.sum()), total=reader.n)
        del is_source
    else:
        selection = select_rows(versions, source, target, fraction=fraction, order=order, seed=seed)
        rows = selection.rows
    out_dim = card.out_dim
    left = n_source - len(rows)
    if out_dim != reader.dim and selection.already:
        raise BadInputError(
            f"{where}: embeddings: rows already in {target} have {reader.dim} dims, "
            f"but psi makes {out_dim}-dim rows"
        )
    if out_dim != reader.dim and len(rows) and left:
        raise BadInputError(
            f"{psi_where}: out_dim: psi makes {out_dim}-dim rows from {reader.dim}-dim ones; "
            "a partial backfill would mix both widths in one gallery; use --fraction 1"
        )
    if out_format == "npz" and reader.labels is None:
        raise BadInputError(f"{where}: labels: an .npz output needs labels; write .npy or Parquet")

    work = work_dir_for(out_path)
    with OutLock(out_path):
        check_replaceable(out_path, out_format)
        check_work_folder(work)
        remove_stale_swaps(out_path)
        try:
            return _run(
                reader, out_path, out_format, work, card, psi_path, psi_where, rows, selection,
                versions, n_source, result, say, started,
                source=source, target=target, fraction=fraction, order=order, seed=seed,
                batch_size=batch_size, assume_from=assume_from, progress=progress,
                device=device, engine=engine,
            )  # fmt: skip
        except Exception:
            # A failed run leaves nothing; a killed or interrupted one (KeyboardInterrupt is no
            # Exception) keeps its finished batches for the next run to resume.
            shutil.rmtree(work, ignore_errors=True)
            raise


def _run(
    reader: Any,
    out_path: Path,
    out_format: str,
    work: Path,
    card: UpgradeCard,
    psi_path: Path,
    psi_where: str,
    rows: np.ndarray,
    selection: Selection,
    versions: np.ndarray,
    n_source: int,
    result: Any,
    say: Any,
    started: float,
    *,
    source: str,
    target: str,
    fraction: float,
    order: str,
    seed: int,
    batch_size: int,
    assume_from: bool,
    progress: bool | None,
    device: str,
    engine: str,
) -> BackfillResult:
    """The backfill proper, under the output's lock: resume, upgrade every block, assemble."""
    out_dim = card.out_dim
    input_sha = reader.sha256()
    job = job_digest(
        input_sha256=input_sha,
        psi_sha256=card.weights_sha256,
        rows=rows,
        batch_size=batch_size,
        assume_from=assume_from,
        out_format=out_format,
    )
    selected = np.zeros(reader.n, dtype=bool)
    selected[rows] = True
    if len(rows) == reader.n:  # all rows end in --to: no second per-row array
        new_versions = np.full(reader.n, target)
    else:
        new_versions = versions.copy()
        new_versions[rows] = target
    del versions
    width = out_dim if len(rows) else reader.dim
    n_batches = (reader.n + batch_size - 1) // batch_size
    done = resume_state(work, out_path, job, n_batches, say, out_format)
    check_room(out_path, work, reader.n, width, n_batches, len(done), out_format)
    meta = {k: v for k, v in reader.meta.items() if k not in _CACHE_META}
    history = list(meta.get("backfill", [])) if isinstance(meta.get("backfill"), list) else []
    history.append(
        {
            "from": source,
            "to": target,
            "psi_weights_sha256": card.weights_sha256,
            "from_weights_sha256": getattr(card, "from_weights_sha256", None),
            "to_weights_sha256": getattr(card, "to_weights_sha256", None),
            "input_sha256": input_sha,
            "fraction": fraction,
            "order": order,
            "seed": seed if order == "random" else None,
            "upgraded": len(rows),
            "total": reader.n,
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
    )
    meta["backfill"] = history

    parts = Parts(work, out_format, selected, new_versions, width)
    if done:
        say(f"backfill: resuming: {len(done)} of {n_batches} batches already done")
    label = f"backfill {source} -> {target}"
    done_rows = sum(min(batch_size, reader.n - b * batch_size) for b in done)
    runner = make_engine(engine, psi_path, card.weights_sha256, device)
    with Bar(reader.n, done_rows, progress, label) as bar:
        t0, moved = time.perf_counter(), 0
        for block, y_all in runner.map(_jobs(reader, selected, batch_size, done)):
            y = _merge(block, y_all, selected, psi_where)
            parts.write(block.start // batch_size, block, y)
            moved += len(y)
            bar.advance(len(y), moved / max(time.perf_counter() - t0, 1e-9))

    write_output(parts, reader, out_path, n_batches, batch_size, new_versions, meta)
    return result(
        upgraded=len(rows),
        already=selection.already,
        remaining=n_source - len(rows),
        batches=n_batches,
        resumed_batches=len(done),
        seconds=round(time.perf_counter() - started, 4),
    )


def row_version_array(
    version: str | None,
    per_row: np.ndarray | None,
    n: int,
    *,
    where: str,
    assume: str | None,
) -> np.ndarray:
    """Every row's version as a NumPy string array (see :func:`compat.backfill.plan.row_versions`)."""
    if per_row is not None:
        return np.asarray(per_row, dtype=np.str_)
    one = row_versions(version, None, 1, where=where, assume=assume)[0]
    return np.full(n, one)


def _jobs(
    reader: Any, selected: np.ndarray, batch_size: int, done: set[int]
) -> Iterator[tuple[Any, np.ndarray | None, int]]:
    """(block, rows for psi or None, the block's first row) for every unfinished block: psi
    runs over the whole block when any of its rows is selected, so a row's value never
    depends on which other rows were (every row is computed in its fixed row block)."""
    for block in reader.blocks(batch_size, skip=done):
        sel = selected[block.start : block.start + len(block.embeddings)]
        yield block, (block.embeddings if sel.any() else None), block.start


def _merge(
    block: Any, y_all: np.ndarray | None, selected: np.ndarray, psi_where: str
) -> np.ndarray:
    """A block's output rows: psi's rows where selected, the stored rows elsewhere."""
    x = block.embeddings
    if y_all is None:
        return x
    sel = selected[block.start : block.start + len(x)]
    bad = ~np.isfinite(y_all[sel])
    if bad.any():
        r = int(np.flatnonzero(sel)[int(np.argwhere(bad)[0, 0])])
        raise BadInputError(
            f"{psi_where}: psi produced NaN or inf for gallery row {block.start + r}"
        )
    if sel.all():
        return y_all
    y = np.array(x, dtype=np.float32, copy=True)
    y[sel] = y_all[sel]
    return y


__all__ = ["DEFAULT_BATCH", "BackfillResult", "backfill", "check_map_card"]
